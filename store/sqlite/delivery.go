package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/delivery"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
)

// addDeliveryQueries adds the statements of sql/sqlite/delivery.sql to q,
// prefixed "delivery/", so that Open prepares them once with the others.
func addDeliveryQueries(q map[string]string) error {
	dq, err := sqlfiles.Queries(sqlfiles.SQLite, "delivery.sql")
	if err != nil {
		return err
	}
	for name, text := range dq {
		q["delivery/"+name] = text
	}
	return nil
}

// modifier renders a duration as an SQLite date modifier ("+1.500
// seconds"): the database computes "now + d" itself.
func modifier(d time.Duration) string { return fmt.Sprintf("%+.3f seconds", d.Seconds()) }

// write runs one prepared delivery statement under the process's write
// mutex and returns the affected rows.
func (s *Store) write(ctx context.Context, name string, args ...any) (int64, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	res, err := s.execWrite(ctx, func() (sql.Result, error) { return s.stmts["delivery/"+name].ExecContext(ctx, args...) })
	if err != nil {
		return 0, classify(s.path, err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// EnqueueDeliveries implements delivery.Store.
func (s *Store) EnqueueDeliveries(ctx context.Context, sink string) (int, error) {
	n, err := s.write(ctx, "enqueue_deliveries", sink)
	if err != nil {
		return int(n), err
	}
	c, err := s.write(ctx, "enqueue_checkpoint_deliveries", sink)
	return int(n + c), err
}

// ClaimDeliveries implements delivery.Store.
func (s *Store) ClaimDeliveries(ctx context.Context, sink, claimID string, limit int, ttl time.Duration) ([]delivery.Delivery, error) {
	n, err := s.write(ctx, "claim_deliveries", sink, claimID, modifier(ttl), limit)
	if err != nil || n == 0 {
		return nil, err
	}
	ds, err := s.scanDeliveries(s.stmts["delivery/claimed_deliveries"].QueryContext(ctx, sink, claimID))
	if err != nil {
		return nil, err
	}
	return ds, delivery.AttachEvents(ctx, s, ds)
}

// MarkDelivered implements delivery.Store: one transaction for the batch.
func (s *Store) MarkDelivered(ctx context.Context, sink, claimID string, eventIDs []string) error {
	if len(eventIDs) == 0 {
		return nil
	}
	return s.writeTx(ctx, func(tx *sqlx.Tx) error {
		st := tx.StmtContext(ctx, s.stmts["delivery/mark_delivered"])
		for _, id := range eventIDs {
			if _, err := st.ExecContext(ctx, sink, claimID, id); err != nil {
				return err
			}
		}
		return nil
	})
}

// MarkFailed implements delivery.Store.
func (s *Store) MarkFailed(ctx context.Context, sink, claimID string, f delivery.Failure) error {
	state, dead := delivery.StatePending, 0
	if f.Dead {
		state, dead = delivery.StateDead, 1
	}
	_, err := s.write(ctx, "mark_failed", string(state), f.Error, modifier(f.RetryAfter), dead, sink, claimID, f.EventID)
	return err
}

// ReleaseClaim implements delivery.Store.
func (s *Store) ReleaseClaim(ctx context.Context, sink, claimID string) error {
	_, err := s.write(ctx, "release_claim", sink, claimID)
	return err
}

// RetryDead implements delivery.Store.
func (s *Store) RetryDead(ctx context.Context, sink, eventID string) (int, error) {
	n, err := s.write(ctx, "retry_dead", sink, sink, eventID, eventID)
	return int(n), err
}

// ListDeliveries implements delivery.Store.
func (s *Store) ListDeliveries(ctx context.Context, f delivery.Filter) ([]delivery.Delivery, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 1000
	}
	return s.scanDeliveries(s.stmts["delivery/list_deliveries"].QueryContext(ctx, f.Sink, f.Sink, string(f.State), string(f.State), f.EventID, f.EventID, limit))
}

func (s *Store) scanDeliveries(rows *sql.Rows, err error) ([]delivery.Delivery, error) {
	if err != nil {
		return nil, classify(s.path, err)
	}
	defer rows.Close()
	var out []delivery.Delivery
	for rows.Next() {
		var d delivery.Delivery
		var typ, state, next, created string
		var lastErr, delivered sql.NullString
		if err := rows.Scan(&d.Sink, &d.EventID, &d.RunID, &d.RunSeq, &typ, &state, &d.Attempts, &next, &lastErr, &created, &delivered); err != nil {
			return nil, classify(s.path, err)
		}
		d.EventType, d.State, d.LastError = engine.EventType(typ), delivery.State(state), lastErr.String
		d.NextAttemptAt, _ = time.Parse(time.RFC3339Nano, next)
		d.CreatedAt, _ = time.Parse(time.RFC3339Nano, created)
		if delivered.Valid {
			t, _ := time.Parse(time.RFC3339Nano, delivered.String)
			d.DeliveredAt = &t
		}
		out = append(out, d)
	}
	return out, classify(s.path, rows.Err())
}

var _ delivery.Store = (*Store)(nil)
