package postgres

import (
	"context"
	"time"

	"github.com/jmoiron/sqlx"

	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store"
)

// newAudit is the tamper-evident log's reads and its global log
// (store.AuditSQL) on this database; checkpointers serialise on a lock of
// the log table, which appends never take.
func (s *Store) newAudit() (*store.AuditSQL, error) {
	q, err := sqlfiles.Queries(sqlfiles.Postgres, "audit.sql")
	if err != nil {
		return nil, err
	}
	return store.NewAuditSQL(store.AuditDialect{
		Queries: q,
		Read:    s.db,
		Write: func(ctx context.Context, fn func(store.Tx) error) error {
			return s.tx(ctx, func(tx *sqlx.Tx) error {
				if _, err := tx.ExecContext(ctx, q["audit_lock"]); err != nil {
					return err
				}
				return fn(tx)
			})
		},
		Classify: func(_ string, err error) error { return s.classify(err) },
		Time:     func(t time.Time) any { return timeText(t) },
	}), nil
}
