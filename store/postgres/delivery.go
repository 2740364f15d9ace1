package postgres

import (
	"context"
	"database/sql"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/delivery"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
)

// deliveryQuery is a statement of sql/postgres/delivery.sql.
func deliveryQuery(name string) (string, error) {
	return sqlfiles.Query(sqlfiles.Postgres, "delivery.sql", name)
}

// write runs one delivery statement in a transaction that holds the sink's
// transaction lock and returns the affected rows. The lock is what keeps a
// run's order: two claimers of a sink reading the same snapshot could
// otherwise each take a different part of one run.
func (s *Store) write(ctx context.Context, sink, name string, args ...any) (int64, error) {
	q, err := deliveryQuery(name)
	if err != nil {
		return 0, err
	}
	var n int64
	err = s.sinkTx(ctx, sink, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return n, err
}

// sinkTx runs fn in a transaction holding sink's lock ("" : every sink's).
func (s *Store) sinkTx(ctx context.Context, sink string, fn func(tx *sqlx.Tx) error) error {
	lock, err := deliveryQuery("sink_lock")
	if err != nil {
		return err
	}
	return s.tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, lock, sink); err != nil {
			return err
		}
		return fn(tx)
	})
}

// EnqueueDeliveries implements delivery.Store.
func (s *Store) EnqueueDeliveries(ctx context.Context, sink string) (int, error) {
	n, err := s.write(ctx, sink, "enqueue_deliveries", sink)
	if err != nil {
		return int(n), err
	}
	c, err := s.write(ctx, sink, "enqueue_checkpoint_deliveries", sink)
	return int(n + c), err
}

// ClaimDeliveries implements delivery.Store.
func (s *Store) ClaimDeliveries(ctx context.Context, sink, claimID string, limit int, ttl time.Duration) ([]delivery.Delivery, error) {
	n, err := s.write(ctx, sink, "claim_deliveries", sink, claimID, ttl.Seconds(), limit)
	if err != nil || n == 0 {
		return nil, err
	}
	q, err := deliveryQuery("claimed_deliveries")
	if err != nil {
		return nil, err
	}
	ds, err := s.scanDeliveries(s.query(ctx, q, sink, claimID))
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
	q, err := deliveryQuery("mark_delivered")
	if err != nil {
		return err
	}
	return s.sinkTx(ctx, sink, func(tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, q, sink, claimID, eventIDs)
		return err
	})
}

// MarkFailed implements delivery.Store.
func (s *Store) MarkFailed(ctx context.Context, sink, claimID string, f delivery.Failure) error {
	state, dead := delivery.StatePending, 0
	if f.Dead {
		state, dead = delivery.StateDead, 1
	}
	_, err := s.write(ctx, sink, "mark_failed", string(state), f.Error, f.RetryAfter.Seconds(), dead, sink, claimID, f.EventID)
	return err
}

// ReleaseClaim implements delivery.Store.
func (s *Store) ReleaseClaim(ctx context.Context, sink, claimID string) error {
	_, err := s.write(ctx, sink, "release_claim", sink, claimID)
	return err
}

// RetryDead implements delivery.Store.
func (s *Store) RetryDead(ctx context.Context, sink, eventID string) (int, error) {
	n, err := s.write(ctx, sink, "retry_dead", sink, sink, eventID, eventID)
	return int(n), err
}

// ListDeliveries implements delivery.Store.
func (s *Store) ListDeliveries(ctx context.Context, f delivery.Filter) ([]delivery.Delivery, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 1000
	}
	q, err := deliveryQuery("list_deliveries")
	if err != nil {
		return nil, err
	}
	return s.scanDeliveries(s.query(ctx, q, f.Sink, f.Sink, string(f.State), string(f.State), f.EventID, f.EventID, limit))
}

func (s *Store) scanDeliveries(rows *sql.Rows, err error) ([]delivery.Delivery, error) {
	if err != nil {
		return nil, s.classify(err)
	}
	defer rows.Close()
	var out []delivery.Delivery
	for rows.Next() {
		var d delivery.Delivery
		var typ, state, next, created string
		var lastErr, delivered sql.NullString
		if err := rows.Scan(&d.Sink, &d.EventID, &d.RunID, &d.RunSeq, &typ, &state, &d.Attempts, &next, &lastErr, &created, &delivered); err != nil {
			return nil, s.classify(err)
		}
		d.EventType, d.State, d.LastError = engine.EventType(typ), delivery.State(state), lastErr.String
		d.NextAttemptAt, d.CreatedAt = parseTime(next), parseTime(created)
		if delivered.Valid {
			t := parseTime(delivered.String)
			d.DeliveredAt = &t
		}
		out = append(out, d)
	}
	return out, s.classify(rows.Err())
}

// timeText binds a time as the store writes them (engine.TimeFormat).
func timeText(t time.Time) any { return t.UTC().Format(engine.TimeFormat) }

// parseTime reads a stored time; zero for ” (NULL) or text that is not one.
func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

var _ delivery.Store = (*Store)(nil)
