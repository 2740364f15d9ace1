package snowflake

import (
	"context"
	"database/sql"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store"
)

// Pulse implements store.Store in ONE request whatever the number of runs
// (the pulse_block Scripting block): one UPDATE renews the leases owner
// still holds with the asked fences, one query answers the asked runs'
// lease rows and new signals. Without Options.Now the database's clock
// sets the expiry, as it decides AcquireFencedLease's.
func (s *Store) Pulse(ctx context.Context, owner string, ttl time.Duration, runs []engine.PulseRun) (engine.PulseResult, error) {
	out := engine.PulseResult{Leases: map[string]engine.Lease{}}
	runs, err := store.PulseRuns(owner, runs)
	if err != nil || len(runs) == 0 {
		return out, err
	}
	rows := make([][]string, len(runs))
	for i, r := range runs {
		rows[i] = []string{hexLit(r.RunID), intLit(r.Fence), intLit(r.AfterSignal)}
	}
	expires := "NULL"
	if !s.dbClock {
		expires = hexLit(tsText(s.now().Add(ttl)))
	}
	block, err := render(s.q["pulse_block"], map[string]string{
		"runs": valuesRows(rows), "owner": hexLit(owner), "expires_at": expires, "ttl_ms": intLit(ttl.Milliseconds()),
	}, nil)
	if err != nil {
		return engine.PulseResult{}, err
	}
	err = s.withRetry(ctx, func() error {
		out = engine.PulseResult{Leases: map[string]engine.Lease{}}
		rs, err := s.db.QueryContext(ctx, block)
		if err != nil {
			return s.classify("pulse", err)
		}
		defer rs.Close()
		for rs.Next() {
			var kind, runID string
			var seq int64
			var name, typ, step, reason, by sql.NullString
			var at sql.NullTime
			if err := rs.Scan(&kind, &runID, &seq, &name, &typ, &step, &reason, &by, &at); err != nil {
				return s.classify("read pulse", err)
			}
			switch kind {
			case "L":
				out.Leases[runID] = engine.Lease{RunID: runID, Owner: name.String, Fence: seq, ExpiresAt: at.Time.UTC()}
			case "G":
				out.Signals = append(out.Signals, engine.Signal{SignalID: name.String, RunID: runID, Seq: seq,
					Type: engine.SignalType(typ.String), StepID: step.String, Reason: reason.String,
					RequestedBy: by.String, CreatedAt: at.Time.UTC()})
			}
		}
		return s.classify("read pulse", rs.Err())
	})
	if err != nil {
		return engine.PulseResult{}, err
	}
	return out, nil
}
