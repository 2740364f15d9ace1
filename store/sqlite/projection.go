package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
)

// projectionQueries holds the statements of sql/sqlite/projection.sql, the
// projection in its two scopes.
type projectionQueries struct{ run, all, events string }

// loadProjection parses the embedded file once.
var loadProjection = sync.OnceValues(func() (projectionQueries, error) {
	q, err := sqlfiles.Queries(sqlfiles.SQLite, "projection.sql")
	if err != nil {
		return projectionQueries{}, err
	}
	body := q["project"]
	if !strings.Contains(body, "/*scope*/") || q["scope_run"] == "" || q["scope_all"] == "" || q["list_all_events"] == "" {
		return projectionQueries{}, errors.New("sqlfiles: sqlite/projection.sql lacks project, scope_run, scope_all or list_all_events")
	}
	// Both scopes are fixed text from the same file.
	return projectionQueries{
		run:    strings.Replace(body, "/*scope*/", q["scope_run"], 1),
		all:    strings.Replace(body, "/*scope*/", q["scope_all"], 1),
		events: q["list_all_events"],
	}, nil
})

// ProjectSQL computes a run's snapshot with the SQL projection alone (the
// recursive CTEs of sql/sqlite/projection.sql over dvt_run_events and
// dvt_transitions). It must equal engine.Project over the same events;
// `dvtrun verify` compares the two. RUN_NOT_FOUND for an unknown run.
func (s *Store) ProjectSQL(ctx context.Context, runID string) (engine.Snapshot, error) {
	q, err := loadProjection()
	if err != nil {
		return engine.Snapshot{}, err
	}
	snaps, err := s.projectRows(ctx, q.run, runID)
	if err != nil {
		return engine.Snapshot{}, err
	}
	if snap, ok := snaps[runID]; ok {
		return snap, nil
	}
	// A run with no events yet projects to its initial state; an unknown
	// run is an error.
	if _, err := s.GetRun(ctx, runID); err != nil {
		return engine.Snapshot{}, err
	}
	return engine.SnapshotOf(engine.Snapshot{RunID: runID, Status: engine.StatusNone}), nil
}

// ProjectAllSQL computes the snapshot of every run that has events, with one
// statement over the whole log.
func (s *Store) ProjectAllSQL(ctx context.Context) (map[string]engine.Snapshot, error) {
	q, err := loadProjection()
	if err != nil {
		return nil, err
	}
	return s.projectRows(ctx, q.all)
}

// ProjectAllGo reduces every run's events with the Go reducer, reading the
// log in one ordered pass: the reference `dvtrun verify` compares
// ProjectAllSQL with.
func (s *Store) ProjectAllGo(ctx context.Context) (map[string]engine.Snapshot, error) {
	q, err := loadProjection()
	if err != nil {
		return nil, err
	}
	events, err := s.queryEvents(ctx, s.db, q.events)
	if err != nil {
		return nil, err
	}
	out := make(map[string]engine.Snapshot)
	for i := 0; i < len(events); {
		j := i + 1
		for j < len(events) && events[j].RunID == events[i].RunID {
			j++
		}
		out[events[i].RunID] = engine.Project(events[i].RunID, events[i:j])
		i = j
	}
	return out, nil
}

// projectionRow is one row of the projection: a run, a step or a violation.
type projectionRow struct {
	kind, runID, stepID                string
	ord                                int64
	status, substatus                  string
	lastEventSeq                       int64
	inconsistent                       bool
	tenant, project, env               string
	logicalAttempt, engineAttempt      int
	startedAt, completedAt             sql.NullString
	durationMs                         int64
	hasError                           bool
	errCode, errMessage                sql.NullString
	errRetryable                       sql.NullBool
	skipReason, artifacts              sql.NullString
	eventID, eventType, persistedAt    sql.NullString
	entity, priorState, attemptedState sql.NullString
}

// projectRows runs a projection statement and assembles its rows — already
// decided by SQL — into snapshots: the rows come ordered by run, then run
// row, step rows in first-mention order, violations in runSeq order.
func (s *Store) projectRows(ctx context.Context, query string, args ...any) (map[string]engine.Snapshot, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, classify(s.path, err)
	}
	defer rows.Close()
	out := make(map[string]engine.Snapshot)
	var cur engine.Snapshot
	flush := func() {
		if cur.RunID != "" {
			out[cur.RunID] = engine.SnapshotOf(cur)
		}
	}
	for rows.Next() {
		var r projectionRow
		if err := rows.Scan(&r.kind, &r.runID, &r.stepID, &r.ord, &r.status, &r.substatus, &r.lastEventSeq, &r.inconsistent,
			&r.tenant, &r.project, &r.env, &r.logicalAttempt, &r.engineAttempt, &r.startedAt, &r.completedAt, &r.durationMs,
			&r.hasError, &r.errCode, &r.errMessage, &r.errRetryable, &r.skipReason, &r.artifacts,
			&r.eventID, &r.eventType, &r.persistedAt, &r.entity, &r.priorState, &r.attemptedState); err != nil {
			return nil, classify(s.path, err)
		}
		switch r.kind {
		case "RUN":
			flush()
			cur = engine.Snapshot{
				RunID: r.runID, TenantID: r.tenant, ProjectID: r.project, EnvironmentID: r.env,
				Status: engine.RunStatus(r.status), Substatus: r.substatus, LastEventSeq: r.lastEventSeq,
				Inconsistent: r.inconsistent, DurationMs: r.durationMs, Steps: []engine.StepSnapshot{},
			}
			if cur.StartedAt, err = parseTime(r.runID, "started_at", r.startedAt); err != nil {
				return nil, err
			}
			if cur.CompletedAt, err = parseTime(r.runID, "completed_at", r.completedAt); err != nil {
				return nil, err
			}
			cur.Error = errorInfo(r)
		case "STEP":
			if r.runID != cur.RunID {
				return nil, engine.Errorf(engine.CodeStoreCorrupt, "projection: step %s of run %s came without its run row", r.stepID, r.runID)
			}
			st := engine.StepSnapshot{
				StepID: r.stepID, Status: engine.StepStatus(r.status), LogicalAttemptID: r.logicalAttempt,
				EngineAttemptID: r.engineAttempt, DurationMs: r.durationMs, Error: errorInfo(r),
				SkipReason: r.skipReason.String, LastEventSeq: r.lastEventSeq,
			}
			if st.StartedAt, err = parseTime(r.runID, "started_at", r.startedAt); err != nil {
				return nil, err
			}
			if st.CompletedAt, err = parseTime(r.runID, "completed_at", r.completedAt); err != nil {
				return nil, err
			}
			if r.artifacts.Valid {
				// As engine.payloadArtifacts: a list that does not decode is none.
				if json.Unmarshal([]byte(r.artifacts.String), &st.Artifacts) != nil {
					st.Artifacts = nil
				}
			}
			cur.Steps = append(cur.Steps, st)
		case "VIOLATION":
			if r.runID != cur.RunID {
				return nil, engine.Errorf(engine.CodeStoreCorrupt, "projection: violation at runSeq %d of run %s came without its run row", r.ord, r.runID)
			}
			at, err := parseTime(r.runID, "persisted_at", r.persistedAt)
			if err != nil {
				return nil, err
			}
			cur.Violations = append(cur.Violations, engine.Violation{
				EventID: r.eventID.String, EventType: engine.EventType(r.eventType.String), RunSeq: r.ord,
				PersistedAt: at, Entity: r.entity.String, StepID: r.stepID,
				PriorState: r.priorState.String, AttemptedState: r.attemptedState.String,
			})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, classify(s.path, err)
	}
	flush()
	return out, nil
}

func errorInfo(r projectionRow) *engine.ErrorInfo {
	if !r.hasError {
		return nil
	}
	return &engine.ErrorInfo{Code: r.errCode.String, Message: r.errMessage.String, Retryable: r.errRetryable.Bool}
}

func parseTime(runID, column string, v sql.NullString) (time.Time, error) {
	if !v.Valid {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v.String)
	if err != nil {
		return time.Time{}, engine.Errorf(engine.CodeStoreCorrupt, "run %s: %s %q is not a timestamp: %w", runID, column, v.String, err)
	}
	return t, nil
}
