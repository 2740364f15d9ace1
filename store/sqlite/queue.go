package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dvtrun/dvtrun/engine"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store"
)

// newQueue is the run queue and the schedule cursors (store.QueueSQL) on
// this database. Every write runs under BEGIN IMMEDIATE (the database's
// one write lock), so the limits and the dedup read in a transaction hold
// until it commits; a claim is still decided by its conditional UPDATE's
// affected-row count, the shape the Snowflake store shares. The database's
// clock is strftime('now') padded to engine.TimeFormat.
func (s *Store) newQueue() (*store.QueueSQL, error) {
	q, err := sqlfiles.Queries(sqlfiles.SQLite, "queue.sql")
	if err != nil {
		return nil, err
	}
	return store.NewQueueSQL(store.QueueDialect{
		Queries: q,
		Read:    s.db,
		Write: func(ctx context.Context, fn func(store.Tx) error) error {
			return s.writeTx(ctx, func(tx *sqlx.Tx) error { return fn(tx) })
		},
		Classify: func(_ string, err error) error { return classify(s.path, err) },
		Time:     func(t time.Time) any { return t.UTC().Format(engine.TimeFormat) },
		TTL:      func(d time.Duration) any { return modifier(d) },
		TimeDest: func() any { return new(sql.NullString) },
		TimeOf: func(dest any) time.Time {
			t, err := time.Parse(time.RFC3339Nano, dest.(*sql.NullString).String)
			if err != nil {
				return time.Time{}
			}
			return t.UTC()
		},
	}), nil
}

// writeTx runs fn in one write transaction under the process's write
// mutex and classifies its errors.
func (s *Store) writeTx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return classify(s.path, err)
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return classify(s.path, err)
	}
	return classify(s.path, tx.Commit())
}
