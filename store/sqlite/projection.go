package sqlite

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
)

// loadProjection composes sql/sqlite/projection.sql once (sqlfiles.ProjectionOf).
var loadProjection = sync.OnceValues(func() (sqlfiles.Projection, error) {
	return sqlfiles.ProjectionOf(sqlfiles.SQLite)
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
	snaps, err := s.projectRows(ctx, q.Run, runID)
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
	return s.projectRows(ctx, q.All)
}

// ProjectAllGo reduces every run's events with the Go reducer, reading the
// log in one ordered pass: the reference `dvtrun verify` compares
// ProjectAllSQL with.
func (s *Store) ProjectAllGo(ctx context.Context) (map[string]engine.Snapshot, error) {
	q, err := loadProjection()
	if err != nil {
		return nil, err
	}
	// Streamed: one run's events in memory at a time, not the whole log.
	rows, err := s.db.QueryContext(ctx, q.Events)
	if err != nil {
		return nil, classify(s.path, err)
	}
	defer rows.Close()
	return engine.ProjectRuns(s.scanEvents(rows))
}

// projectRows runs a projection statement and hands its rows — already
// decided by SQL — to engine.SnapshotAssembler.
func (s *Store) projectRows(ctx context.Context, query string, args ...any) (map[string]engine.Snapshot, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, classify(s.path, err)
	}
	defer rows.Close()
	var asm engine.SnapshotAssembler
	for rows.Next() {
		var r engine.ProjectionRow
		var started, completed, persisted, errCode, errMessage, skip, artifacts sql.NullString
		var eventID, eventType, entity, prior, attempted sql.NullString
		var hasError bool
		var retryable sql.NullBool
		if err := rows.Scan(&r.Kind, &r.RunID, &r.StepID, &r.Ord, &r.Status, &r.Substatus, &r.LastEventSeq, &r.Inconsistent,
			&r.TenantID, &r.ProjectID, &r.EnvironmentID, &r.LogicalAttemptID, &r.EngineAttemptID, &started, &completed, &r.DurationMs,
			&hasError, &errCode, &errMessage, &retryable, &skip, &artifacts,
			&eventID, &eventType, &persisted, &entity, &prior, &attempted); err != nil {
			return nil, classify(s.path, err)
		}
		if r.StartedAt, err = parseTime(r.RunID, "started_at", started); err != nil {
			return nil, err
		}
		if r.CompletedAt, err = parseTime(r.RunID, "completed_at", completed); err != nil {
			return nil, err
		}
		if r.PersistedAt, err = parseTime(r.RunID, "persisted_at", persisted); err != nil {
			return nil, err
		}
		if hasError {
			r.Error = &engine.ErrorInfo{Code: errCode.String, Message: errMessage.String, Retryable: retryable.Bool}
		}
		r.SkipReason, r.Artifacts = skip.String, artifacts.String
		r.EventID, r.EventType, r.Entity, r.PriorState, r.AttemptedState = eventID.String, eventType.String, entity.String, prior.String, attempted.String
		if err := asm.Add(r); err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, classify(s.path, err)
	}
	return asm.Snapshots(), nil
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
