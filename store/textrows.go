package store

import (
	"database/sql"
	"encoding/json"
	"iter"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// Rows is a result set to scan: *sql.Rows, or pgx.Rows on Postgres's
// pipelined append.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// ScanTextEvents yields the events of rows — the columns of list_events,
// times as engine.TimeFormat text (SQLite, Postgres) — and then rows.Err,
// if any, through wrap (the backend's error classification). A time that
// does not parse is STORE_CORRUPT.
func ScanTextEvents(rows Rows, wrap func(error) error) iter.Seq2[engine.RunEventRecord, error] {
	return func(yield func(engine.RunEventRecord, error) bool) {
		for rows.Next() {
			var r engine.RunEventRecord
			var step, payload sql.NullString
			var emitted, persisted, typ string
			if err := rows.Scan(&r.RunID, &r.RunSeq, &r.TenantID, &r.ProjectID, &r.EnvironmentID, &r.EventID, &typ, &step,
				&r.PlanID, &r.PlanVersion, &r.LogicalAttemptID, &r.EngineAttemptID, &r.IdempotencyKey, &emitted, &persisted, &payload); err != nil {
				yield(r, wrap(err))
				return
			}
			r.EventType = engine.EventType(typ)
			r.StepID = step.String
			if payload.Valid {
				r.Payload = json.RawMessage(payload.String)
			}
			var err error
			if r.EmittedAt, err = time.Parse(time.RFC3339Nano, emitted); err != nil {
				yield(r, engine.Errorf(engine.CodeStoreCorrupt, "run %s runSeq %d: emitted_at %q: %v", r.RunID, r.RunSeq, emitted, err))
				return
			}
			if r.PersistedAt, err = time.Parse(time.RFC3339Nano, persisted); err != nil {
				yield(r, engine.Errorf(engine.CodeStoreCorrupt, "run %s runSeq %d: persisted_at %q: %v", r.RunID, r.RunSeq, persisted, err))
				return
			}
			if !yield(r, nil) {
				return
			}
		}
		if err := rows.Err(); err != nil {
			yield(engine.RunEventRecord{}, wrap(err))
		}
	}
}

// ScanTextSignals reads the signals of rows (the columns of list_signals,
// created_at as text) and closes them; err is the query's.
func ScanTextSignals(rows *sql.Rows, err error) ([]engine.Signal, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []engine.Signal
	for rows.Next() {
		var sig engine.Signal
		var typ, created string
		if err := rows.Scan(&sig.RunID, &sig.Seq, &sig.SignalID, &typ, &sig.StepID, &sig.Reason, &sig.RequestedBy, &created); err != nil {
			return nil, err
		}
		sig.Type = engine.SignalType(typ)
		sig.CreatedAt, _ = time.Parse(time.RFC3339Nano, created)
		out = append(out, sig)
	}
	return out, rows.Err()
}

// NextLease is AcquireFencedLease's decision, shared by the backends that
// read the lease row under their lock: row (holder, its expiry as text,
// fence; found false when the run never had a lease) against owner at now
// (the store's clock). LEASE_HELD when another owner's lease has not
// expired; otherwise the lease owner takes, its fence one higher when the
// lease passes to a new owner.
func NextLease(runID, owner string, ttl time.Duration, now time.Time, found bool, holder, expires string, fence int64) (engine.Lease, error) {
	if found {
		exp, err := time.Parse(time.RFC3339Nano, expires)
		if err == nil && holder != owner && exp.After(now) {
			return engine.Lease{}, engine.Errorf(engine.CodeLeaseHeld, "run %s is owned by %s until %s", runID, holder, exp.Format(time.RFC3339))
		}
	}
	if holder != owner {
		fence++ // a new owner: every earlier owner's writes are now stale
	}
	return engine.Lease{RunID: runID, Owner: owner, Fence: fence, ExpiresAt: now.Add(ttl)}, nil
}
