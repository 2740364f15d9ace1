package snowflake

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/queue"
	"github.com/dvtrun/dvtrun/engine/schedule"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store"
)

// The run queue and the schedule cursors, with the SQLite store's
// statements and the database's clock (CURRENT_TIMESTAMP()). Snowflake has
// no row locks and enforces no UNIQUE key: every write transaction first
// updates the 'queue' row of dvt_locks, which serialises them (UPDATEs of a
// table wait for each other until COMMIT), so the dedup read and the limits
// read hold until the transaction commits. A claim is still decided by its
// conditional UPDATE's affected-row count, as on SQLite.

var queueSQL = sync.OnceValues(func() (map[string]string, error) {
	return sqlfiles.Queries(sqlfiles.Snowflake, "queue.sql")
})

// qtx runs fn in one write transaction under the 'queue' lock row, on a
// pinned session, retried whole when contention aborts it.
func (s *Store) qtx(ctx context.Context, fn func(c *sql.Conn, q map[string]string) error) error {
	q, err := queueSQL()
	if err != nil {
		return err
	}
	return s.withRetry(ctx, func() error {
		c, err := s.db.Conn(ctx)
		if err != nil {
			return s.classify("connect", err)
		}
		defer c.Close()
		committed := false
		defer func() {
			if !committed {
				s.rollback(ctx, c)
			}
		}()
		if err := s.execScript(ctx, c, script{s.q["begin"], q["lock_queue"]}); err != nil {
			return s.classify("lock the queue", err)
		}
		if err := fn(c, q); err != nil {
			return s.classify("run queue", err)
		}
		if _, err := c.ExecContext(ctx, s.q["commit"]); err != nil {
			return s.classify("commit", err)
		}
		committed = true
		return nil
	})
}

func tsOrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return tsText(t)
}

func scanRequest(sc interface{ Scan(...any) error }) (queue.Request, error) {
	var r queue.Request
	var notBefore, enq time.Time
	var claimed, finished sql.NullTime
	var state string
	var serial int
	err := sc.Scan(&r.RequestID, &r.Key, &r.TenantID, &r.ProjectID, &r.EnvironmentID, &r.PlanID, &r.PlanVersion,
		&r.RunRequestID, &r.PlanPath, &r.PlanSHA256, &r.Priority, &notBefore, &r.Schedule,
		&serial, &state, &r.Owner, &r.RunID, &r.Outcome, &r.Seq, &r.Version, &r.Attempts, &enq, &claimed, &finished)
	r.NotBefore, r.EnqueuedAt, r.ClaimedAt, r.FinishedAt = notBefore.UTC(), enq.UTC(), nullTime(claimed), nullTime(finished)
	r.Serial, r.State = serial == 1, queue.State(state)
	return r, err
}

func nullTime(t sql.NullTime) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time.UTC()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// insertRequest inserts r unless its key exists; it returns the stored
// request and whether it was inserted.
func insertRequest(ctx context.Context, c *sql.Conn, q map[string]string, r queue.Request, now time.Time) (queue.Request, bool, error) {
	old, err := scanRequest(c.QueryRowContext(ctx, q["request_by_key"], r.Key))
	if err == nil {
		return old, false, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return queue.Request{}, false, err
	}
	var seq int64
	if err := c.QueryRowContext(ctx, q["next_enqueue_seq"]).Scan(&seq); err != nil {
		return queue.Request{}, false, err
	}
	notBefore := now
	if !r.NotBefore.IsZero() {
		notBefore = r.NotBefore
	}
	if _, err := c.ExecContext(ctx, q["insert_request"], r.RequestID, r.Key, r.TenantID, r.ProjectID, r.EnvironmentID,
		r.PlanID, r.PlanVersion, r.RunRequestID, r.PlanPath, r.PlanSHA256, r.Priority, tsText(notBefore),
		nullable(r.Schedule), boolInt(r.Serial), seq, tsText(now)); err != nil {
		return queue.Request{}, false, err
	}
	stored, err := scanRequest(c.QueryRowContext(ctx, q["request_by_id"], r.RequestID))
	return stored, err == nil, err
}

// EnqueueRequest implements queue.Store.
func (s *Store) EnqueueRequest(ctx context.Context, r queue.Request, admit func(queue.Request, queue.Stats) (queue.Request, error)) (queue.Request, bool, error) {
	var out queue.Request
	var created bool
	err := s.qtx(ctx, func(c *sql.Conn, q map[string]string) error {
		old, err := scanRequest(c.QueryRowContext(ctx, q["request_by_key"], r.Key))
		if err == nil {
			out = old
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var st queue.Stats
		if err := c.QueryRowContext(ctx, q["queue_stats"], r.PlanID).Scan(&st.Now, &st.Pending, &st.Active, &st.ActiveOfPlan); err != nil {
			return err
		}
		st.Now = st.Now.UTC()
		if admit != nil {
			if r, err = admit(r, st); err != nil {
				return err
			}
		}
		out, created, err = insertRequest(ctx, c, q, r, st.Now)
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
	return r, s.classify("read run request", err)
}

// ListRequests implements queue.Store.
func (s *Store) ListRequests(ctx context.Context, all bool) ([]queue.Request, error) {
	q, err := queueSQL()
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, q["list_requests"], boolInt(all))
	if err != nil {
		return nil, s.classify("list run requests", err)
	}
	defer rows.Close()
	var out []queue.Request
	for rows.Next() {
		r, err := scanRequest(rows)
		if err != nil {
			return nil, s.classify("list run requests", err)
		}
		out = append(out, r)
	}
	return out, s.classify("list run requests", rows.Err())
}

// CancelRequest implements queue.Store.
func (s *Store) CancelRequest(ctx context.Context, id string) (queue.Request, error) {
	var out queue.Request
	err := s.qtx(ctx, func(c *sql.Conn, q map[string]string) error {
		if _, err := c.ExecContext(ctx, q["cancel_request"], id); err != nil {
			return err
		}
		var err error
		out, err = scanRequest(c.QueryRowContext(ctx, q["request_by_id"], id))
		if errors.Is(err, sql.ErrNoRows) {
			return engine.Errorf(engine.CodeRunNotFound, "no run request %s", id)
		}
		return err
	})
	return out, err
}

// ttlMillis is the heartbeat's expiry offset for DATEADD(millisecond, ...).
func ttlMillis(d time.Duration) int64 { return d.Milliseconds() }

// Heartbeat implements queue.Store.
func (s *Store) Heartbeat(ctx context.Context, owner string, ttl time.Duration) error {
	return s.qtx(ctx, func(c *sql.Conn, q map[string]string) error {
		_, err := c.ExecContext(ctx, q["heartbeat"], owner, ttlMillis(ttl))
		return err
	})
}

// RetireWorker implements queue.Store.
func (s *Store) RetireWorker(ctx context.Context, owner string) error {
	return s.qtx(ctx, func(c *sql.Conn, q map[string]string) error {
		_, err := c.ExecContext(ctx, q["retire_worker"], owner)
		return err
	})
}

// ClaimRequest implements queue.Store.
func (s *Store) ClaimRequest(ctx context.Context, owner string, ttl time.Duration, l queue.ClaimLimits) (queue.Request, bool, error) {
	var out queue.Request
	var ok bool
	err := s.qtx(ctx, func(c *sql.Conn, q map[string]string) error {
		if _, err := c.ExecContext(ctx, q["heartbeat"], owner, ttlMillis(ttl)); err != nil {
			return err
		}
		cands, err := store.ClaimCandidates(ctx, c, q, l)
		if err != nil {
			return err
		}
		for _, cand := range cands {
			res, err := c.ExecContext(ctx, q["claim_request"], owner, cand.ID, cand.Version)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n != 1 {
				continue
			}
			out, err = scanRequest(c.QueryRowContext(ctx, q["request_by_id"], cand.ID))
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
	return s.qtx(ctx, func(c *sql.Conn, q map[string]string) error {
		res, err := c.ExecContext(ctx, q[name], append(args, id, owner)...)
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
	var next time.Time
	var last sql.NullTime
	err := sc.Scan(&c.Name, &next, &c.Version, &last, &c.LastRequestID, &c.Fired, &c.Missed, &c.Skipped)
	c.NextTick, c.LastTick = next.UTC(), nullTime(last)
	return c, err
}

// InitCursor implements schedule.CursorStore.
func (s *Store) InitCursor(ctx context.Context, name string, next time.Time) error {
	return s.qtx(ctx, func(c *sql.Conn, q map[string]string) error {
		var n int
		if err := c.QueryRowContext(ctx, q["cursor_exists"], name).Scan(&n); err != nil || n > 0 {
			return err
		}
		_, err := c.ExecContext(ctx, q["insert_cursor"], name, tsText(next))
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
	return c, err == nil, s.classify("read schedule cursor", err)
}

// ListCursors implements schedule.CursorStore.
func (s *Store) ListCursors(ctx context.Context) ([]schedule.Cursor, error) {
	q, err := queueSQL()
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, q["list_cursors"])
	if err != nil {
		return nil, s.classify("list schedule cursors", err)
	}
	defer rows.Close()
	var out []schedule.Cursor
	for rows.Next() {
		c, err := scanCursor(rows)
		if err != nil {
			return nil, s.classify("list schedule cursors", err)
		}
		out = append(out, c)
	}
	return out, s.classify("list schedule cursors", rows.Err())
}

// AdvanceCursor implements schedule.CursorStore.
func (s *Store) AdvanceCursor(ctx context.Context, a schedule.Advance) (bool, error) {
	won := false
	err := s.qtx(ctx, func(c *sql.Conn, q map[string]string) error {
		var lastReq any
		if n := len(a.Requests); n > 0 {
			lastReq = a.Requests[n-1].RequestID
		}
		res, err := c.ExecContext(ctx, q["advance_cursor"], tsText(a.NextTick), tsOrNil(a.LastTick),
			lastReq, a.Fired, a.Missed, a.Skipped, a.Name, a.Version)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return nil
		}
		var now time.Time
		if err := c.QueryRowContext(ctx, q["db_now"]).Scan(&now); err != nil {
			return err
		}
		for _, r := range a.Requests {
			if _, _, err := insertRequest(ctx, c, q, r, now); err != nil {
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
