package snowflake

import (
	"context"
	"database/sql"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/delivery"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
)

// dq is a statement of sql/snowflake/delivery.sql (sqlfiles.Query parses
// the file once).
func dq(name string) (string, error) {
	return sqlfiles.Query(sqlfiles.Snowflake, "delivery.sql", name)
}

// exec runs one delivery statement (retrying contention) and returns the
// affected rows.
func (s *Store) execDelivery(ctx context.Context, op, name string, args ...any) (int64, error) {
	q, err := dq(name)
	if err != nil {
		return 0, err
	}
	var n int64
	err = s.withRetry(ctx, func() error {
		res, err := s.db.ExecContext(ctx, q, args...)
		if err != nil {
			return s.classify(op, err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return n, err
}

// EnqueueDeliveries implements delivery.Store in one request
// (enqueue_deliveries_block): lock, insert and commit in one Scripting
// block, so that no transaction holds the 'deliveries' lock across requests.
func (s *Store) EnqueueDeliveries(ctx context.Context, sink string) (int, error) {
	q, err := dq("enqueue_deliveries_block")
	if err != nil {
		return 0, err
	}
	block, err := render(q, map[string]string{"sink": hexLit(sink)}, nil)
	if err != nil {
		return 0, err
	}
	var n sql.NullInt64
	err = s.withRetry(ctx, func() error {
		return s.classify("enqueue deliveries", s.db.QueryRowContext(ctx, block).Scan(&n))
	})
	return int(n.Int64), err
}

// ClaimDeliveries implements delivery.Store in one request
// (claim_deliveries_block): lock, claim, commit and the claimed rows.
func (s *Store) ClaimDeliveries(ctx context.Context, sink, claimID string, limit int, ttl time.Duration) ([]delivery.Delivery, error) {
	q, err := dq("claim_deliveries_block")
	if err != nil {
		return nil, err
	}
	block, err := render(q, map[string]string{
		"sink": hexLit(sink), "claim_id": hexLit(claimID), "ttl_ms": intLit(ttl.Milliseconds()), "limit": intLit(int64(limit)),
	}, nil)
	if err != nil {
		return nil, err
	}
	var ds []delivery.Delivery
	err = s.withRetry(ctx, func() error {
		ds, err = s.scanDeliveries(s.db.QueryContext(ctx, block))
		return err
	})
	if err != nil || len(ds) == 0 {
		return nil, err
	}
	return ds, delivery.AttachEvents(ctx, s, ds)
}

// MarkDelivered implements delivery.Store: one UPDATE per 500 events.
func (s *Store) MarkDelivered(ctx context.Context, sink, claimID string, eventIDs []string) error {
	q, err := dq("mark_delivered")
	if err != nil {
		return err
	}
	for len(eventIDs) > 0 {
		chunk := eventIDs[:min(len(eventIDs), 500)]
		eventIDs = eventIDs[len(chunk):]
		args := []any{sink, claimID}
		for _, id := range chunk {
			args = append(args, id)
		}
		text := inList(q, "/*ids*/", len(chunk))
		err := s.withRetry(ctx, func() error {
			_, err := s.db.ExecContext(ctx, text, args...)
			return s.classify("mark delivered", err)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// MarkFailed implements delivery.Store.
func (s *Store) MarkFailed(ctx context.Context, sink, claimID string, f delivery.Failure) error {
	state, dead := delivery.StatePending, 0
	if f.Dead {
		state, dead = delivery.StateDead, 1
	}
	_, err := s.execDelivery(ctx, "mark failed", "mark_failed", string(state), f.Error, f.RetryAfter.Milliseconds(), dead, sink, claimID, f.EventID)
	return err
}

// ReleaseClaim implements delivery.Store.
func (s *Store) ReleaseClaim(ctx context.Context, sink, claimID string) error {
	_, err := s.execDelivery(ctx, "release claim", "release_claim", sink, claimID)
	return err
}

// RetryDead implements delivery.Store.
func (s *Store) RetryDead(ctx context.Context, sink, eventID string) (int, error) {
	n, err := s.execDelivery(ctx, "retry dead letters", "retry_dead", sink, sink, eventID, eventID)
	return int(n), err
}

// ListDeliveries implements delivery.Store.
func (s *Store) ListDeliveries(ctx context.Context, f delivery.Filter) ([]delivery.Delivery, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 1000
	}
	q, err := dq("list_deliveries")
	if err != nil {
		return nil, err
	}
	return s.scanDeliveries(s.db.QueryContext(ctx, q, f.Sink, f.Sink, string(f.State), string(f.State), f.EventID, f.EventID, limit))
}

func (s *Store) scanDeliveries(rows *sql.Rows, err error) ([]delivery.Delivery, error) {
	if err != nil {
		return nil, s.classify("list deliveries", err)
	}
	defer rows.Close()
	var out []delivery.Delivery
	for rows.Next() {
		var d delivery.Delivery
		var typ, state string
		var lastErr sql.NullString
		var delivered sql.NullTime
		if err := rows.Scan(&d.Sink, &d.EventID, &d.RunID, &d.RunSeq, &typ, &state, &d.Attempts, &d.NextAttemptAt, &lastErr, &d.CreatedAt, &delivered); err != nil {
			return nil, s.classify("list deliveries", err)
		}
		d.EventType, d.State, d.LastError = engine.EventType(typ), delivery.State(state), lastErr.String
		d.NextAttemptAt, d.CreatedAt = d.NextAttemptAt.UTC(), d.CreatedAt.UTC()
		if delivered.Valid {
			t := delivered.Time.UTC()
			d.DeliveredAt = &t
		}
		out = append(out, d)
	}
	return out, s.classify("list deliveries", rows.Err())
}

var _ delivery.Store = (*Store)(nil)
