package snowflake

import (
	"context"
	"time"

	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store"
)

// newAudit is the tamper-evident log's reads and its global log
// (store.AuditSQL) on this database; checkpointers write under the 'audit'
// lock row (dvt_audit_lock), a table appends never lock.
func (s *Store) newAudit() (*store.AuditSQL, error) {
	q, err := sqlfiles.Queries(sqlfiles.Snowflake, "audit.sql")
	if err != nil {
		return nil, err
	}
	s.aq = q
	return store.NewAuditSQL(store.AuditDialect{
		Queries: q,
		Read:    s.db,
		Write: func(ctx context.Context, fn func(store.Tx) error) error {
			return s.lockedTx(ctx, q["audit_lock"], "audit log", fn)
		},
		Classify: s.classify,
		Time:     func(t time.Time) any { return tsText(t) },
	}), nil
}
