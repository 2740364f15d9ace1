package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/queue"
	"github.com/dvtrun/dvtrun/engine/schedule"
)

// Tx runs statements: *sql.Tx, *sqlx.Tx, *sql.Conn or *sql.DB.
type Tx interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Row is one result row to scan: *sql.Row or *sql.Rows.
type Row interface{ Scan(dest ...any) error }

// QueueDialect is what a backend gives QueueSQL: its statements (the
// same names in sql/<dialect>/queue.sql), its write transaction and how it
// binds and reads timestamps.
type QueueDialect struct {
	Queries map[string]string
	// Read runs statements outside a transaction.
	Read Tx
	// Write runs fn in one write transaction that serialises the queue's
	// writers (SQLite: BEGIN IMMEDIATE; Snowflake: the 'queue' lock row)
	// and classifies its errors.
	Write func(ctx context.Context, fn func(tx Tx) error) error
	// Classify maps a read's error onto contract codes.
	Classify func(op string, err error) error
	// Time binds a timestamp parameter; TTL binds the heartbeat's expiry
	// offset for the heartbeat statement.
	Time func(time.Time) any
	TTL  func(time.Duration) any
	// TimeDest returns a scan destination for a (nullable) timestamp
	// column and TimeOf reads it (zero for NULL).
	TimeDest func() any
	TimeOf   func(dest any) time.Time
}

// QueueSQL implements queue.Store and schedule.CursorStore once for every
// SQL backend. Each claim is one conditional UPDATE on (request_id,
// version) whose affected-row count decides, with times compared against
// the database's clock in the statements themselves.
type QueueSQL struct{ d QueueDialect }

// NewQueueSQL returns the queue over a backend's dialect.
func NewQueueSQL(d QueueDialect) *QueueSQL { return &QueueSQL{d: d} }

func (s *QueueSQL) scanRequest(row Row) (queue.Request, error) {
	var r queue.Request
	var sched, owner, runID, outcome, shape sql.NullString
	var state string
	var serial int
	notBefore, enq, claimed, finished := s.d.TimeDest(), s.d.TimeDest(), s.d.TimeDest(), s.d.TimeDest()
	err := row.Scan(&r.RequestID, &r.Key, &r.TenantID, &r.ProjectID, &r.EnvironmentID, &r.PlanID, &r.PlanVersion,
		&r.RunRequestID, &r.PlanPath, &r.PlanSHA256, &r.Priority, notBefore, &sched,
		&serial, &state, &owner, &runID, &outcome, &r.Seq, &r.Version, &r.Attempts, enq, claimed, finished, &shape)
	r.NotBefore, r.EnqueuedAt, r.ClaimedAt, r.FinishedAt = s.d.TimeOf(notBefore), s.d.TimeOf(enq), s.d.TimeOf(claimed), s.d.TimeOf(finished)
	r.Schedule, r.Owner, r.RunID, r.Outcome = sched.String, owner.String, runID.String, outcome.String
	r.Serial, r.State = serial == 1, queue.State(state)
	if err == nil && shape.Valid && shape.String != "" {
		if jerr := json.Unmarshal([]byte(shape.String), &r.Shape); jerr != nil {
			// The request's shape is what its run does: guessing would run
			// another selection, target or interval.
			return r, engine.Errorf(engine.CodeStoreCorrupt, "run request %s: its run shape does not decode: %v", r.RequestID, jerr)
		}
	}
	return r, err
}

// shapeColumn is a request's run shape as stored: NULL when it says
// nothing.
func shapeColumn(sh queue.Shape) (any, error) {
	if sh.IsZero() {
		return nil, nil
	}
	b, err := json.Marshal(sh)
	if err != nil {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "the run request's shape does not encode as JSON: %v", err)
	}
	return string(b), nil
}

func (s *QueueSQL) scanCursor(row Row) (schedule.Cursor, error) {
	var c schedule.Cursor
	var lastReq sql.NullString
	next, last := s.d.TimeDest(), s.d.TimeDest()
	err := row.Scan(&c.Name, next, &c.Version, last, &lastReq, &c.Fired, &c.Missed, &c.Skipped)
	c.NextTick, c.LastTick, c.LastRequestID = s.d.TimeOf(next), s.d.TimeOf(last), lastReq.String
	return c, err
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func nullString(v string) any {
	if v == "" {
		return nil
	}
	return v
}

// dbNow reads the database's clock inside tx.
func (s *QueueSQL) dbNow(ctx context.Context, tx Tx) (time.Time, error) {
	dest := s.d.TimeDest()
	err := tx.QueryRowContext(ctx, s.d.Queries["db_now"]).Scan(dest)
	return s.d.TimeOf(dest), err
}

// insertRequest inserts r unless its key exists; it returns the stored
// request and whether it was inserted. now is the database's clock.
func (s *QueueSQL) insertRequest(ctx context.Context, tx Tx, r queue.Request, now time.Time) (queue.Request, bool, error) {
	old, err := s.scanRequest(tx.QueryRowContext(ctx, s.d.Queries["request_by_key"], r.Key))
	if err == nil {
		return old, false, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return queue.Request{}, false, err
	}
	stored, err := s.insertNew(ctx, tx, r, now)
	return stored, err == nil, err
}

// insertNew inserts r, whose key the transaction has read as absent, and
// returns the stored request.
func (s *QueueSQL) insertNew(ctx context.Context, tx Tx, r queue.Request, now time.Time) (queue.Request, error) {
	q := s.d.Queries
	var seq int64
	if err := tx.QueryRowContext(ctx, q["next_enqueue_seq"]).Scan(&seq); err != nil {
		return queue.Request{}, err
	}
	notBefore := now
	if !r.NotBefore.IsZero() {
		notBefore = r.NotBefore
	}
	shape, err := shapeColumn(r.Shape)
	if err != nil {
		return queue.Request{}, err
	}
	if _, err := tx.ExecContext(ctx, q["insert_request"], r.RequestID, r.Key, r.TenantID, r.ProjectID, r.EnvironmentID,
		r.PlanID, r.PlanVersion, r.RunRequestID, r.PlanPath, r.PlanSHA256, r.Priority, s.d.Time(notBefore),
		nullString(r.Schedule), boolInt(r.Serial), seq, s.d.Time(now), shape); err != nil {
		return queue.Request{}, err
	}
	return s.scanRequest(tx.QueryRowContext(ctx, q["request_by_id"], r.RequestID))
}

// EnqueueRequest implements queue.Store.
func (s *QueueSQL) EnqueueRequest(ctx context.Context, r queue.Request, admit func(queue.Request, queue.Stats) (queue.Request, error)) (queue.Request, bool, error) {
	var out queue.Request
	var created bool
	err := s.d.Write(ctx, func(tx Tx) error {
		q := s.d.Queries
		old, err := s.scanRequest(tx.QueryRowContext(ctx, q["request_by_key"], r.Key))
		if err == nil {
			out = old
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var st queue.Stats
		now := s.d.TimeDest()
		if err := tx.QueryRowContext(ctx, q["queue_stats"], r.PlanID).Scan(now, &st.Pending, &st.Active, &st.ActiveOfPlan); err != nil {
			return err
		}
		st.Now = s.d.TimeOf(now)
		if admit != nil {
			if r, err = admit(r, st); err != nil {
				return err
			}
		}
		// The key was read as absent above, in this transaction.
		out, err = s.insertNew(ctx, tx, r, st.Now)
		created = err == nil
		return err
	})
	return out, created, err
}

// GetRequest implements queue.Store.
func (s *QueueSQL) GetRequest(ctx context.Context, id string) (queue.Request, error) {
	r, err := s.scanRequest(s.d.Read.QueryRowContext(ctx, s.d.Queries["request_by_id"], id))
	if errors.Is(err, sql.ErrNoRows) {
		return r, engine.Errorf(engine.CodeRunNotFound, "no run request %s", id)
	}
	return r, s.d.Classify("read run request", err)
}

// ListRequests implements queue.Store.
func (s *QueueSQL) ListRequests(ctx context.Context, all bool) ([]queue.Request, error) {
	rows, err := s.d.Read.QueryContext(ctx, s.d.Queries["list_requests"], boolInt(all))
	if err != nil {
		return nil, s.d.Classify("list run requests", err)
	}
	defer rows.Close()
	var out []queue.Request
	for rows.Next() {
		r, err := s.scanRequest(rows)
		if err != nil {
			return nil, s.d.Classify("list run requests", err)
		}
		out = append(out, r)
	}
	return out, s.d.Classify("list run requests", rows.Err())
}

// CancelRequest implements queue.Store.
func (s *QueueSQL) CancelRequest(ctx context.Context, id string) (queue.Request, error) {
	var out queue.Request
	err := s.d.Write(ctx, func(tx Tx) error {
		if _, err := tx.ExecContext(ctx, s.d.Queries["cancel_request"], id); err != nil {
			return err
		}
		var err error
		out, err = s.scanRequest(tx.QueryRowContext(ctx, s.d.Queries["request_by_id"], id))
		if errors.Is(err, sql.ErrNoRows) {
			return engine.Errorf(engine.CodeRunNotFound, "no run request %s", id)
		}
		return err
	})
	return out, err
}

// Heartbeat implements queue.Store.
func (s *QueueSQL) Heartbeat(ctx context.Context, owner string, ttl time.Duration) error {
	return s.d.Write(ctx, func(tx Tx) error {
		_, err := tx.ExecContext(ctx, s.d.Queries["heartbeat"], owner, s.d.TTL(ttl))
		return err
	})
}

// RetireWorker implements queue.Store.
func (s *QueueSQL) RetireWorker(ctx context.Context, owner string) error {
	return s.d.Write(ctx, func(tx Tx) error {
		_, err := tx.ExecContext(ctx, s.d.Queries["retire_worker"], owner)
		return err
	})
}

// ListWorkers implements queue.Store.
func (s *QueueSQL) ListWorkers(ctx context.Context) ([]queue.Worker, error) {
	rows, err := s.d.Read.QueryContext(ctx, s.d.Queries["list_workers"])
	if err != nil {
		return nil, s.d.Classify("list workers", err)
	}
	defer rows.Close()
	var out []queue.Worker
	for rows.Next() {
		var w queue.Worker
		var live int
		started, beat, expires := s.d.TimeDest(), s.d.TimeDest(), s.d.TimeDest()
		if err := rows.Scan(&w.ID, started, beat, expires, &live); err != nil {
			return nil, s.d.Classify("list workers", err)
		}
		w.StartedAt, w.HeartbeatAt, w.ExpiresAt, w.Live = s.d.TimeOf(started), s.d.TimeOf(beat), s.d.TimeOf(expires), live == 1
		out = append(out, w)
	}
	return out, s.d.Classify("list workers", rows.Err())
}

// ClaimRequest implements queue.Store: in one write transaction it renews
// owner's heartbeat, reads the candidates the limits allow, and tries the
// conditional UPDATE on each until one changes a row.
func (s *QueueSQL) ClaimRequest(ctx context.Context, owner string, ttl time.Duration, l queue.ClaimLimits) (queue.Request, bool, error) {
	var out queue.Request
	var ok bool
	err := s.d.Write(ctx, func(tx Tx) error {
		q := s.d.Queries
		if _, err := tx.ExecContext(ctx, q["heartbeat"], owner, s.d.TTL(ttl)); err != nil {
			return err
		}
		cands, err := claimCandidates(ctx, tx, q, l)
		if err != nil {
			return err
		}
		for _, c := range cands {
			res, err := tx.ExecContext(ctx, q["claim_request"], owner, c.id, c.version)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n != 1 {
				continue
			}
			out, err = s.scanRequest(tx.QueryRowContext(ctx, q["request_by_id"], c.id))
			out.TakenOver = c.state != string(queue.StatePending)
			ok = err == nil
			return err
		}
		return nil
	})
	return out, ok, err
}

// ownedUpdate runs one of the owner-conditioned updates; LEASE_HELD when
// owner no longer holds the request.
func (s *QueueSQL) ownedUpdate(ctx context.Context, name, id, owner string, args ...any) error {
	return s.d.Write(ctx, func(tx Tx) error {
		res, err := tx.ExecContext(ctx, s.d.Queries[name], append(args, id, owner)...)
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
func (s *QueueSQL) SetRequestRun(ctx context.Context, id, owner, runID string) error {
	return s.ownedUpdate(ctx, "set_request_run", id, owner, runID)
}

// FinishRequest implements queue.Store.
func (s *QueueSQL) FinishRequest(ctx context.Context, id, owner, outcome string) error {
	return s.ownedUpdate(ctx, "finish_request", id, owner, outcome)
}

// ReleaseRequest implements queue.Store.
func (s *QueueSQL) ReleaseRequest(ctx context.Context, id, owner string) error {
	return s.ownedUpdate(ctx, "release_request", id, owner)
}

// InitCursor implements schedule.CursorStore.
func (s *QueueSQL) InitCursor(ctx context.Context, name string, next time.Time) error {
	return s.d.Write(ctx, func(tx Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, s.d.Queries["cursor_exists"], name).Scan(&n); err != nil || n > 0 {
			return err
		}
		_, err := tx.ExecContext(ctx, s.d.Queries["insert_cursor"], name, s.d.Time(next))
		return err
	})
}

// GetCursor implements schedule.CursorStore.
func (s *QueueSQL) GetCursor(ctx context.Context, name string) (schedule.Cursor, bool, error) {
	c, err := s.scanCursor(s.d.Read.QueryRowContext(ctx, s.d.Queries["get_cursor"], name))
	if errors.Is(err, sql.ErrNoRows) {
		return c, false, nil
	}
	return c, err == nil, s.d.Classify("read schedule cursor", err)
}

// ListCursors implements schedule.CursorStore.
func (s *QueueSQL) ListCursors(ctx context.Context) ([]schedule.Cursor, error) {
	rows, err := s.d.Read.QueryContext(ctx, s.d.Queries["list_cursors"])
	if err != nil {
		return nil, s.d.Classify("list schedule cursors", err)
	}
	defer rows.Close()
	var out []schedule.Cursor
	for rows.Next() {
		c, err := s.scanCursor(rows)
		if err != nil {
			return nil, s.d.Classify("list schedule cursors", err)
		}
		out = append(out, c)
	}
	return out, s.d.Classify("list schedule cursors", rows.Err())
}

// AdvanceCursor implements schedule.CursorStore: the conditional UPDATE
// on (name, version) and, only if it changed the row, the tick's requests,
// in one transaction.
func (s *QueueSQL) AdvanceCursor(ctx context.Context, a schedule.Advance) (bool, error) {
	won := false
	err := s.d.Write(ctx, func(tx Tx) error {
		var lastReq, lastTick any
		if n := len(a.Requests); n > 0 {
			lastReq = a.Requests[n-1].RequestID
		} else if a.LastRequestID != "" {
			lastReq = a.LastRequestID
		}
		if !a.LastTick.IsZero() {
			lastTick = s.d.Time(a.LastTick)
		}
		res, err := tx.ExecContext(ctx, s.d.Queries["advance_cursor"], s.d.Time(a.NextTick), lastTick,
			lastReq, a.Fired, a.Missed, a.Skipped, a.Name, a.Version)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return nil
		}
		now, err := s.dbNow(ctx, tx)
		if err != nil {
			return err
		}
		for _, r := range a.Requests {
			if _, _, err := s.insertRequest(ctx, tx, r, now); err != nil {
				return err
			}
		}
		won = true
		return nil
	})
	return won && err == nil, err
}

var (
	_ queue.Store          = (*QueueSQL)(nil)
	_ schedule.CursorStore = (*QueueSQL)(nil)
)
