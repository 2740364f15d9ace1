package snowflake

import (
	"context"
	"database/sql"
	"time"

	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store"
)

// newQueue is the run queue and the schedule cursors (store.QueueSQL) on
// this database, with the SQLite store's statements and the database's
// clock (CURRENT_TIMESTAMP()). Snowflake has no row locks and enforces no
// UNIQUE key: every write transaction first updates the 'queue' row of
// dvt_queue_lock (its own table, so that a worker that died inside a queue
// transaction holds off the queue only, not bootstraps), which serialises them (UPDATEs of a table wait for each other
// until COMMIT), so the dedup read and the limits read hold until the
// transaction commits. A claim is still decided by its conditional
// UPDATE's affected-row count, as on SQLite.
func (s *Store) newQueue() (*store.QueueSQL, error) {
	q, err := sqlfiles.Queries(sqlfiles.Snowflake, "queue.sql")
	if err != nil {
		return nil, err
	}
	return store.NewQueueSQL(store.QueueDialect{
		Queries:  q,
		Read:     s.db,
		Write:    func(ctx context.Context, fn func(store.Tx) error) error { return s.queueTx(ctx, q["lock_queue"], fn) },
		Classify: s.classify,
		Time:     func(t time.Time) any { return tsText(t) },
		// DATEADD(millisecond, ?, ...) takes the heartbeat's expiry offset.
		TTL:      func(d time.Duration) any { return d.Milliseconds() },
		TimeDest: func() any { return new(sql.NullTime) },
		TimeOf: func(dest any) time.Time {
			if t := dest.(*sql.NullTime); t.Valid {
				return t.Time.UTC()
			}
			return time.Time{}
		},
	}), nil
}

// queueTx runs fn in one write transaction under the lock row.
func (s *Store) queueTx(ctx context.Context, lock string, fn func(store.Tx) error) error {
	return s.lockedTx(ctx, lock, "run queue", fn)
}

// lockedTx runs fn in one write transaction under a lock row; what names
// the work in an error.
func (s *Store) lockedTx(ctx context.Context, lock, what string, fn func(store.Tx) error) error {
	return s.pinnedTx(ctx, lock, func(c *sql.Conn) (script, bool, error) {
		if err := fn(c); err != nil {
			return nil, false, s.classify(what, err)
		}
		return nil, true, nil
	})
}
