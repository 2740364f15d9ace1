package sqlite

import (
	"context"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/audit"
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

// AuditGuards reports the append-only triggers (audit doctor). The file's
// owner can always drop them: the chain and the checkpoints are what
// detect that.
func (s *Store) AuditGuards(ctx context.Context) ([]audit.Guard, error) {
	q, err := sqlfiles.Query(sqlfiles.SQLite, "audit.sql", "audit_triggers")
	if err != nil {
		return nil, err
	}
	var have []string
	if err := s.db.SelectContext(ctx, &have, q); err != nil {
		return nil, classify(s.path, err)
	}
	present := map[string]bool{}
	for _, n := range have {
		present[n] = true
	}
	var out []audit.Guard
	for _, table := range []string{"dvt_run_events", "dvt_audit_genesis", "dvt_audit_log", "dvt_audit_checkpoints"} {
		for _, op := range []string{"update", "delete"} {
			name := table + "_no_" + op
			g := audit.Guard{Check: "trigger " + name, OK: present[name], Detail: "refuses " + strings.ToUpper(op) + " on " + table}
			if !g.OK {
				g.Detail = "missing: " + table + " accepts " + strings.ToUpper(op)
			}
			out = append(out, g)
		}
	}
	return out, nil
}
