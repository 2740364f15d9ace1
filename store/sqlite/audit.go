package sqlite

import (
	"context"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dvtrun/dvtrun/engine"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store"
)

// newAudit is the tamper-evident log's reads and its global log
// (store.AuditSQL) on this database; the checkpointer writes under BEGIN
// IMMEDIATE like every writer.
func (s *Store) newAudit() (*store.AuditSQL, error) {
	q, err := sqlfiles.Queries(sqlfiles.SQLite, "audit.sql")
	if err != nil {
		return nil, err
	}
	return store.NewAuditSQL(store.AuditDialect{
		Queries: q,
		Read:    s.db,
		Write: func(ctx context.Context, fn func(store.Tx) error) error {
			return s.writeTx(ctx, func(tx *sqlx.Tx) error { return fn(tx) })
		},
		Classify: func(_ string, err error) error { return classify(s.path, err) },
		Time:     func(t time.Time) any { return t.UTC().Format(engine.TimeFormat) },
	}), nil
}
