package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/queue"
	"github.com/dvtrun/dvtrun/engine/schedule"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store"
)

// The run queue and the schedule cursors. Every write runs under BEGIN
// IMMEDIATE (the database's one write lock), so the limits read in a claim
// transaction hold until it commits; the claim itself is still decided by
// the conditional UPDATE's affected-row count, the shape the Snowflake
// store shares.

var queueSQL = sync.OnceValues(func() (map[string]string, error) {
	return sqlfiles.Queries(sqlfiles.SQLite, "queue.sql")
})

// qtx runs fn in one write transaction.
func (s *Store) qtx(ctx context.Context, fn func(tx *sqlx.Tx, q map[string]string) error) error {
	q, err := queueSQL()
	if err != nil {
		return err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return classify(s.path, err)
	}
	defer tx.Rollback()
	if err := fn(tx, q); err != nil {
		return classify(s.path, err)
	}
	return classify(s.path, tx.Commit())
}

func parseTS(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t.UTC()
}

func tsOrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(engine.TimeFormat)
}

func scanRequest(sc interface{ Scan(...any) error }) (queue.Request, error) {
	var r queue.Request
	var notBefore, enq, claimed, finished, state string
	var serial int
	err := sc.Scan(&r.RequestID, &r.Key, &r.TenantID, &r.ProjectID, &r.EnvironmentID, &r.PlanID, &r.PlanVersion,
		&r.RunRequestID, &r.PlanPath, &r.PlanSHA256, &r.Priority, &notBefore, &r.Schedule,
		&serial, &state, &r.Owner, &r.RunID, &r.Outcome, &r.Seq, &r.Version, &r.Attempts, &enq, &claimed, &finished)
	r.NotBefore, r.EnqueuedAt, r.ClaimedAt, r.FinishedAt = parseTS(notBefore), parseTS(enq), parseTS(claimed), parseTS(finished)
	r.Serial, r.State = serial == 1, queue.State(state)
	return r, err
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// insertRequest inserts r unless its key exists; it returns the stored
// request and whether it was inserted.
func insertRequest(ctx context.Context, tx *sqlx.Tx, q map[string]string, r queue.Request, now string) (queue.Request, bool, error) {
	old, err := scanRequest(tx.QueryRowContext(ctx, q["request_by_key"], r.Key))
	if err == nil {
		return old, false, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return queue.Request{}, false, err
	}
	var seq int64
	if err := tx.GetContext(ctx, &seq, q["next_enqueue_seq"]); err != nil {
		return queue.Request{}, false, err
	}
	notBefore := now
	if !r.NotBefore.IsZero() {
		notBefore = r.NotBefore.UTC().Format(engine.TimeFormat)
	}
	if _, err := tx.ExecContext(ctx, q["insert_request"], r.RequestID, r.Key, r.TenantID, r.ProjectID, r.EnvironmentID,
		r.PlanID, r.PlanVersion, r.RunRequestID, r.PlanPath, r.PlanSHA256, r.Priority, notBefore,
		nullable(r.Schedule), boolInt(r.Serial), seq, now); err != nil {
		return queue.Request{}, false, err
	}
	stored, err := scanRequest(tx.QueryRowContext(ctx, q["request_by_id"], r.RequestID))
	return stored, err == nil, err
}

// EnqueueRequest implements queue.Store.
func (s *Store) EnqueueRequest(ctx context.Context, r queue.Request, admit func(queue.Request, queue.Stats) (queue.Request, error)) (queue.Request, bool, error) {
	var out queue.Request
	var created bool
	err := s.qtx(ctx, func(tx *sqlx.Tx, q map[string]string) error {
		old, err := scanRequest(tx.QueryRowContext(ctx, q["request_by_key"], r.Key))
		if err == nil {
			out = old
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var st queue.Stats
		var now string
		if err := tx.QueryRowContext(ctx, q["queue_stats"], r.PlanID).Scan(&now, &st.Pending, &st.Active, &st.ActiveOfPlan); err != nil {
			return err
		}
		st.Now = parseTS(now)
		if admit != nil {
			if r, err = admit(r, st); err != nil {
				return err
			}
		}
		out, created, err = insertRequest(ctx, tx, q, r, now)
		return err
	})
	return out, created, err
}

// GetRequest implements queue.Store.
func (s *Store) GetRequest(ctx context.Context, id string) (queue.Request, error) {
	q, err := queueSQL()
	if err != nil {
		return queue.Request{}, err
	}
	r, err := scanRequest(s.db.QueryRowContext(ctx, q["request_by_id"], id))
	if errors.Is(err, sql.ErrNoRows) {
		return r, engine.Errorf(engine.CodeRunNotFound, "no run request %s", id)
	}
	return r, classify(s.path, err)
}

// ListRequests implements queue.Store.
func (s *Store) ListRequests(ctx context.Context, all bool) ([]queue.Request, error) {
	q, err := queueSQL()
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, q["list_requests"], boolInt(all))
	if err != nil {
		return nil, classify(s.path, err)
	}
	defer rows.Close()
	var out []queue.Request
	for rows.Next() {
		r, err := scanRequest(rows)
		if err != nil {
			return nil, classify(s.path, err)
		}
		out = append(out, r)
	}
	return out, classify(s.path, rows.Err())
}

// CancelRequest implements queue.Store.
func (s *Store) CancelRequest(ctx context.Context, id string) (queue.Request, error) {
	var out queue.Request
	err := s.qtx(ctx, func(tx *sqlx.Tx, q map[string]string) error {
		if _, err := tx.ExecContext(ctx, q["cancel_request"], id); err != nil {
			return err
		}
		var err error
		out, err = scanRequest(tx.QueryRowContext(ctx, q["request_by_id"], id))
		if errors.Is(err, sql.ErrNoRows) {
			return engine.Errorf(engine.CodeRunNotFound, "no run request %s", id)
		}
		return err
	})
	return out, err
}

// ttlModifier is SQLite's date modifier for now + d.
func ttlModifier(d time.Duration) string { return fmt.Sprintf("%+.3f seconds", d.Seconds()) }

// Heartbeat implements queue.Store.
func (s *Store) Heartbeat(ctx context.Context, owner string, ttl time.Duration) error {
	return s.qtx(ctx, func(tx *sqlx.Tx, q map[string]string) error {
		_, err := tx.ExecContext(ctx, q["heartbeat"], owner, ttlModifier(ttl))
		return err
	})
}

// RetireWorker implements queue.Store.
func (s *Store) RetireWorker(ctx context.Context, owner string) error {
	return s.qtx(ctx, func(tx *sqlx.Tx, q map[string]string) error {
		_, err := tx.ExecContext(ctx, q["retire_worker"], owner)
		return err
	})
}

// ClaimRequest implements queue.Store.
func (s *Store) ClaimRequest(ctx context.Context, owner string, ttl time.Duration, l queue.ClaimLimits) (queue.Request, bool, error) {
	var out queue.Request
	var ok bool
	err := s.qtx(ctx, func(tx *sqlx.Tx, q map[string]string) error {
		if _, err := tx.ExecContext(ctx, q["heartbeat"], owner, ttlModifier(ttl)); err != nil {
			return err
		}
		cands, err := store.ClaimCandidates(ctx, tx, q, l)
		if err != nil {
			return err
		}
		for _, c := range cands {
			res, err := tx.ExecContext(ctx, q["claim_request"], owner, c.ID, c.Version)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n != 1 {
				continue
			}
			out, err = scanRequest(tx.QueryRowContext(ctx, q["request_by_id"], c.ID))
			ok = err == nil
			return err
		}
		return nil
	})
	return out, ok, err
}

// ownedUpdate runs one of the owner-conditioned updates and reports
// LEASE_HELD when owner no longer holds the request.
func (s *Store) ownedUpdate(ctx context.Context, name, id, owner string, args ...any) error {
	return s.qtx(ctx, func(tx *sqlx.Tx, q map[string]string) error {
		res, err := tx.ExecContext(ctx, q[name], append(args, id, owner)...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return engine.Errorf(engine.CodeLeaseHeld, "run request %s is no longer held by %s", id, owner)
		}
		return nil
	})
}

// SetRequestRun implements queue.Store.
func (s *Store) SetRequestRun(ctx context.Context, id, owner, runID string) error {
	return s.ownedUpdate(ctx, "set_request_run", id, owner, runID)
}

// FinishRequest implements queue.Store.
func (s *Store) FinishRequest(ctx context.Context, id, owner, outcome string) error {
	return s.ownedUpdate(ctx, "finish_request", id, owner, outcome)
}

// ReleaseRequest implements queue.Store.
func (s *Store) ReleaseRequest(ctx context.Context, id, owner string) error {
	return s.ownedUpdate(ctx, "release_request", id, owner)
}

func scanCursor(sc interface{ Scan(...any) error }) (schedule.Cursor, error) {
	var c schedule.Cursor
	var next, last string
	err := sc.Scan(&c.Name, &next, &c.Version, &last, &c.LastRequestID, &c.Fired, &c.Missed, &c.Skipped)
	c.NextTick, c.LastTick = parseTS(next), parseTS(last)
	return c, err
}

// InitCursor implements schedule.CursorStore.
func (s *Store) InitCursor(ctx context.Context, name string, next time.Time) error {
	return s.qtx(ctx, func(tx *sqlx.Tx, q map[string]string) error {
		_, err := tx.ExecContext(ctx, q["insert_cursor"], name, next.UTC().Format(engine.TimeFormat))
		return err
	})
}

// GetCursor implements schedule.CursorStore.
func (s *Store) GetCursor(ctx context.Context, name string) (schedule.Cursor, bool, error) {
	q, err := queueSQL()
	if err != nil {
		return schedule.Cursor{}, false, err
	}
	c, err := scanCursor(s.db.QueryRowContext(ctx, q["get_cursor"], name))
	if errors.Is(err, sql.ErrNoRows) {
		return c, false, nil
	}
	return c, err == nil, classify(s.path, err)
}

// ListCursors implements schedule.CursorStore.
func (s *Store) ListCursors(ctx context.Context) ([]schedule.Cursor, error) {
	q, err := queueSQL()
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, q["list_cursors"])
	if err != nil {
		return nil, classify(s.path, err)
	}
	defer rows.Close()
	var out []schedule.Cursor
	for rows.Next() {
		c, err := scanCursor(rows)
		if err != nil {
			return nil, classify(s.path, err)
		}
		out = append(out, c)
	}
	return out, classify(s.path, rows.Err())
}

// AdvanceCursor implements schedule.CursorStore.
func (s *Store) AdvanceCursor(ctx context.Context, a schedule.Advance) (bool, error) {
	won := false
	err := s.qtx(ctx, func(tx *sqlx.Tx, q map[string]string) error {
		var lastReq any
		if n := len(a.Requests); n > 0 {
			lastReq = a.Requests[n-1].RequestID
		}
		res, err := tx.ExecContext(ctx, q["advance_cursor"], a.NextTick.UTC().Format(engine.TimeFormat), tsOrNil(a.LastTick),
			lastReq, a.Fired, a.Missed, a.Skipped, a.Name, a.Version)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return nil
		}
		var now string
		if err := tx.GetContext(ctx, &now, q["db_now"]); err != nil {
			return err
		}
		for _, r := range a.Requests {
			if _, _, err := insertRequest(ctx, tx, q, r, now); err != nil {
				return err
			}
		}
		won = true
		return nil
	})
	return won && err == nil, err
}

var (
	_ queue.Store          = (*Store)(nil)
	_ schedule.CursorStore = (*Store)(nil)
)
