package store

import (
	"context"
	"database/sql"
	"fmt"
	"iter"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
)

// ProjectionSQL is the SQL projection once for the SQL backends, over
// their composed sql/<dialect>/projection.sql (sqlfiles.ProjectionOf): the
// snapshot of a run, or of every run, decided by the recursive CTEs and
// assembled by engine.SnapshotAssembler, and the Go reducer's snapshots of
// the same log to compare them with (`dvtrun verify`).
type ProjectionSQL struct {
	Queries sqlfiles.Projection
	// Query runs a read with the backend's retries; Classify maps its
	// errors (and those of reading its rows) onto contract codes.
	Query    func(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	Classify func(op string, err error) error
	// Events yields the events of the rows of Queries.Events (the columns
	// of list_events), errors classified.
	Events func(rows Rows) iter.Seq2[engine.RunEventRecord, error]
	// GetRun tells a run without events (its initial state) from an
	// unknown one (RUN_NOT_FOUND).
	GetRun func(ctx context.Context, runID string) (engine.RunMetadata, error)
}

// ProjectSQL computes a run's snapshot with the SQL projection alone. It
// must equal engine.Project over the same events; `dvtrun verify` compares
// the two. RUN_NOT_FOUND for an unknown run.
func (p ProjectionSQL) ProjectSQL(ctx context.Context, runID string) (engine.Snapshot, error) {
	snaps, err := p.ProjectRows(ctx, p.Queries.Run, runID)
	if err != nil {
		return engine.Snapshot{}, err
	}
	if snap, ok := snaps[runID]; ok {
		return snap, nil
	}
	// A run with no events yet projects to its initial state; an unknown
	// run is an error.
	if _, err := p.GetRun(ctx, runID); err != nil {
		return engine.Snapshot{}, err
	}
	return engine.SnapshotOf(engine.Snapshot{RunID: runID, Status: engine.StatusNone}), nil
}

// ProjectAllSQL computes the snapshot of every run that has events, with
// one statement over the whole log.
func (p ProjectionSQL) ProjectAllSQL(ctx context.Context) (map[string]engine.Snapshot, error) {
	return p.ProjectRows(ctx, p.Queries.All)
}

// ProjectAllGo reduces every run's events with the Go reducer, reading the
// log in one ordered pass: the reference `dvtrun verify` compares
// ProjectAllSQL with.
func (p ProjectionSQL) ProjectAllGo(ctx context.Context) (map[string]engine.Snapshot, error) {
	// Streamed: one run's events in memory at a time, not the whole log.
	rows, err := p.Query(ctx, p.Queries.Events)
	if err != nil {
		return nil, p.Classify("read the event log", err)
	}
	defer rows.Close()
	return engine.ProjectRuns(p.Events(rows))
}

// ProjectRows runs a statement with the projection's 28 columns and hands
// its rows — already decided by SQL — to engine.SnapshotAssembler (the
// tests read the audit views that way too).
func (p ProjectionSQL) ProjectRows(ctx context.Context, query string, args ...any) (map[string]engine.Snapshot, error) {
	rows, err := p.Query(ctx, query, args...)
	if err != nil {
		return nil, p.Classify("project", err)
	}
	defer rows.Close()
	var asm engine.SnapshotAssembler
	for rows.Next() {
		var r engine.ProjectionRow
		var started, completed, persisted projectedTime
		var errCode, errMessage, skip, artifacts, eventID, eventType, entity, prior, attempted sql.NullString
		// Booleans come as the dialect has them: BOOLEAN, 0/1 or NULL.
		var hasError, inconsistent, retryable sql.NullBool
		if err := rows.Scan(&r.Kind, &r.RunID, &r.StepID, &r.Ord, &r.Status, &r.Substatus, &r.LastEventSeq, &inconsistent,
			&r.TenantID, &r.ProjectID, &r.EnvironmentID, &r.LogicalAttemptID, &r.EngineAttemptID, &started, &completed, &r.DurationMs,
			&hasError, &errCode, &errMessage, &retryable, &skip, &artifacts,
			&eventID, &eventType, &persisted, &entity, &prior, &attempted); err != nil {
			return nil, p.Classify("project", err)
		}
		r.Inconsistent = inconsistent.Bool
		if r.StartedAt, err = started.get(r.RunID, "started_at"); err != nil {
			return nil, err
		}
		if r.CompletedAt, err = completed.get(r.RunID, "completed_at"); err != nil {
			return nil, err
		}
		if r.PersistedAt, err = persisted.get(r.RunID, "persisted_at"); err != nil {
			return nil, err
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
		return nil, p.Classify("project", err)
	}
	return asm.Snapshots(), nil
}

// projectedTime is a projected time column as the dialect has it: a
// TIMESTAMP (Snowflake), RFC 3339 text (SQLite, Postgres) or NULL.
type projectedTime struct {
	t    time.Time
	text *string // text to parse; nil: t (zero for NULL)
}

// Scan implements sql.Scanner.
func (p *projectedTime) Scan(src any) error {
	*p = projectedTime{}
	switch v := src.(type) {
	case nil:
	case time.Time:
		p.t = v.UTC()
	case string:
		p.text = &v
	case []byte:
		s := string(v)
		p.text = &s
	default:
		return fmt.Errorf("a projected time is %T, not a timestamp or text", src)
	}
	return nil
}

// get is the time; text that is not RFC 3339 is STORE_CORRUPT.
func (p projectedTime) get(runID, column string) (time.Time, error) {
	if p.text == nil {
		return p.t, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *p.text)
	if err != nil {
		return time.Time{}, engine.Errorf(engine.CodeStoreCorrupt, "run %s: %s %q is not a timestamp: %w", runID, column, *p.text, err)
	}
	return t, nil
}
