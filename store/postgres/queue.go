package postgres

import (
	"context"
	"database/sql"
	"time"

	"github.com/jmoiron/sqlx"

	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store"
)

// newQueue is the run queue and the schedule cursors (store.QueueSQL) on
// this database: the conditional-UPDATE claims the SQLite and Snowflake
// stores share, their writers serialised by a transaction lock on the
// queue (queue_lock), so the limits and the dedup a transaction reads hold
// until it commits. Times are the database's clock, dvt_now().
func (s *Store) newQueue() (*store.QueueSQL, error) {
	q, err := sqlfiles.Queries(sqlfiles.Postgres, "queue.sql")
	if err != nil {
		return nil, err
	}
	return store.NewQueueSQL(store.QueueDialect{
		Queries: q,
		Read:    s.db,
		Write: func(ctx context.Context, fn func(store.Tx) error) error {
			return s.tx(ctx, func(tx *sqlx.Tx) error {
				if _, err := tx.ExecContext(ctx, q["queue_lock"]); err != nil {
					return err
				}
				return fn(tx)
			})
		},
		Classify: func(_ string, err error) error { return s.classify(err) },
		Time:     timeText,
		TTL:      func(d time.Duration) any { return d.Seconds() },
		TimeDest: func() any { return new(sql.NullString) },
		TimeOf:   func(dest any) time.Time { return parseTime(dest.(*sql.NullString).String) },
	}), nil
}
