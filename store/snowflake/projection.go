package snowflake

import (
	"context"
	"database/sql"
	"sync"

	"github.com/dvtrun/dvtrun/engine"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
)

// loadProjection composes sql/snowflake/projection.sql once (sqlfiles.ProjectionOf).
var loadProjection = sync.OnceValues(func() (sqlfiles.Projection, error) {
	return sqlfiles.ProjectionOf(sqlfiles.Snowflake)
})

// ProjectSQL computes a run's snapshot with the SQL projection alone (the
// recursive CTEs of sql/snowflake/projection.sql over dvt_run_events and
// dvt_transitions), in one request. It must equal engine.Project over the
// same events. RUN_NOT_FOUND for an unknown run.
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
// log in one ordered query: the reference ProjectAllSQL is compared with.
func (s *Store) ProjectAllGo(ctx context.Context) (map[string]engine.Snapshot, error) {
	q, err := loadProjection()
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, q.Events)
	if err != nil {
		return nil, s.classify("read the event log", err)
	}
	defer rows.Close()
	return engine.ProjectRuns(func(yield func(engine.RunEventRecord, error) bool) {
		for rows.Next() {
			r, err := scanEvent(rows)
			if err != nil {
				yield(r, s.classify("read the event log", err))
				return
			}
			if !yield(r, nil) {
				return
			}
		}
		if err := rows.Err(); err != nil {
			yield(engine.RunEventRecord{}, s.classify("read the event log", err))
		}
	})
}

// projectRows runs a projection statement and hands its rows — already
// decided by SQL — to engine.SnapshotAssembler.
func (s *Store) projectRows(ctx context.Context, query string, args ...any) (map[string]engine.Snapshot, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, s.classify("project", err)
	}
	defer rows.Close()
	var asm engine.SnapshotAssembler
	for rows.Next() {
		var r engine.ProjectionRow
		var started, completed, persisted sql.NullTime
		var errCode, errMessage, skip, artifacts, eventID, eventType, entity, prior, attempted sql.NullString
		var hasError, inconsistent, retryable sql.NullBool
		if err := rows.Scan(&r.Kind, &r.RunID, &r.StepID, &r.Ord, &r.Status, &r.Substatus, &r.LastEventSeq, &inconsistent,
			&r.TenantID, &r.ProjectID, &r.EnvironmentID, &r.LogicalAttemptID, &r.EngineAttemptID, &started, &completed, &r.DurationMs,
			&hasError, &errCode, &errMessage, &retryable, &skip, &artifacts,
			&eventID, &eventType, &persisted, &entity, &prior, &attempted); err != nil {
			return nil, s.classify("project", err)
		}
		r.Inconsistent = inconsistent.Bool
		if started.Valid {
			r.StartedAt = started.Time.UTC()
		}
		if completed.Valid {
			r.CompletedAt = completed.Time.UTC()
		}
		if persisted.Valid {
			r.PersistedAt = persisted.Time.UTC()
		}
		if hasError.Bool {
			r.Error = &engine.ErrorInfo{Code: errCode.String, Message: errMessage.String, Retryable: retryable.Bool}
		}
		r.SkipReason, r.Artifacts = skip.String, artifacts.String
		r.EventID, r.EventType, r.Entity, r.PriorState, r.AttemptedState = eventID.String, eventType.String, entity.String, prior.String, attempted.String
		if err := asm.Add(r); err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, s.classify("project", err)
	}
	return asm.Snapshots(), nil
}
