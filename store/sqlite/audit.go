package sqlite

import (
	"context"
	"database/sql"
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
		// A deferred (read-only) transaction: in WAL mode its first read
		// fixes the snapshot every later one sees, and writers go on.
		Snapshot: func(ctx context.Context) (store.Tx, func(), error) {
			tx, err := s.db.BeginTxx(ctx, &sql.TxOptions{ReadOnly: true})
			if err != nil {
				return nil, nil, err
			}
			return tx, func() { tx.Rollback() }, nil
		},
		Events: func(ctx context.Context, q store.Tx, runID string, afterSeq int64, limit int) ([]engine.RunEventRecord, error) {
			if limit <= 0 {
				limit = -1
			}
			return s.queryEvents(ctx, q, s.q["list_events"], runID, afterSeq, limit)
		},
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
	for _, t := range sqliteGuards {
		for _, op := range t.ops {
			name := t.table + "_no_" + op
			g := audit.Guard{Check: "trigger " + name, OK: present[name], Detail: "refuses " + strings.ToUpper(op) + " on " + t.table}
			if op == "update" && t.update != "" {
				g.Detail += " " + t.update
			}
			if op == "insert" {
				g.Detail += " " + t.insert
			}
			if !g.OK {
				g.Detail = "missing: " + t.table + " accepts " + strings.ToUpper(op)
			}
			out = append(out, g)
		}
	}
	return out, nil
}

// sqliteGuards are the append-only triggers per table (migrations 0500,
// 0550, 0810); update and insert say what those guards let through.
var sqliteGuards = []struct {
	table          string
	ops            []string
	update, insert string
}{
	{"dvt_run_events", []string{"update", "delete"}, "except a payload removed under a signed retention record", ""},
	{"dvt_audit_genesis", []string{"insert", "update", "delete"}, "", "(genesis rows come from migration 0500 only)"},
	{"dvt_audit_log", []string{"update", "delete"}, "", ""},
	{"dvt_audit_checkpoints", []string{"update", "delete"}, "", ""},
	{"dvt_audit_retention", []string{"insert", "update", "delete"}, "", "without a signed record in the global log"},
	{"dvt_run_seq", []string{"update", "delete"}, "except an append advancing it (an ended run's status is final)", ""},
	{"dvt_runs", []string{"update", "delete"}, "except provider_run_ref", ""},
}
