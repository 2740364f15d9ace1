package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/audit"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store"
)

// newAudit is the tamper-evident log's reads and its global log
// (store.AuditSQL) on this database; checkpointers serialise on an
// advisory lock, which appends never take.
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
		// REPEATABLE READ: every statement sees the snapshot its first one
		// took, so appends and the checkpointer committing meanwhile are
		// not seen half.
		Snapshot: func(ctx context.Context) (store.Tx, func(), error) {
			tx, err := s.db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
			if err != nil {
				return nil, nil, err
			}
			return tx, func() { tx.Rollback() }, nil
		},
		Events: func(ctx context.Context, q store.Tx, runID string, afterSeq int64, limit int) ([]engine.RunEventRecord, error) {
			var lim any = limit
			if limit <= 0 {
				lim = nil // LIMIT NULL: no limit
			}
			return s.collectEvents(q.QueryContext(ctx, s.q["list_events"], runID, afterSeq, lim))
		},
	}), nil
}

// AuditGuards reports what this connection may do to the append-only
// tables (audit doctor): their triggers must be enabled, and the user
// dvtrun connects as should neither own them (an owner can disable the
// triggers) nor hold UPDATE, DELETE or TRUNCATE on them.
func (s *Store) AuditGuards(ctx context.Context) ([]audit.Guard, error) {
	q, err := sqlfiles.Query(sqlfiles.Postgres, "audit.sql", "audit_guards")
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, q)
	if err != nil {
		return nil, s.classify(err)
	}
	defer rows.Close()
	var out []audit.Guard
	for rows.Next() {
		var table, owner string
		var owns, upd, del, trunc bool
		var triggers int
		if err := rows.Scan(&table, &owner, &owns, &upd, &del, &trunc, &triggers); err != nil {
			return nil, s.classify(err)
		}
		want := pgGuards[table]
		out = append(out, audit.Guard{Check: "triggers on " + table, OK: triggers == want.triggers,
			Detail: fmt.Sprintf("%d of %d append-only triggers enabled", triggers, want.triggers)})
		g := audit.Guard{Check: "owner of " + table, OK: !owns, Detail: "owned by " + owner + ", not this user"}
		if owns {
			g.Detail = "this user owns it and can disable its triggers: connect as a role without ownership"
		}
		out = append(out, g)
		var held []string
		for _, p := range []struct {
			name string
			has  bool
		}{{"UPDATE", upd && !want.update}, {"DELETE", del}, {"TRUNCATE", trunc}} {
			if p.has {
				held = append(held, p.name)
			}
		}
		g = audit.Guard{Check: "privileges on " + table, OK: len(held) == 0, Detail: "no UPDATE, DELETE or TRUNCATE"}
		if want.update {
			g.Detail = "no DELETE or TRUNCATE (UPDATE is the append path's; its trigger limits it)"
		}
		if len(held) > 0 {
			g.Detail = "this user holds " + strings.Join(held, ", ") + " (the triggers still refuse them)"
		}
		out = append(out, g)
	}
	return out, s.classify(rows.Err())
}

// pgGuards is, per append-only table, how many guard triggers it has
// (migrations 0500, 0550, 0810) and whether dvtrun's role needs UPDATE on
// it: the append path advances dvt_run_seq and sets dvt_runs'
// provider_run_ref, under the triggers that limit those UPDATEs.
var pgGuards = map[string]struct {
	triggers int
	update   bool
}{
	"dvt_run_events":        {2, false},
	"dvt_audit_genesis":     {3, false},
	"dvt_audit_log":         {2, false},
	"dvt_audit_checkpoints": {2, false},
	"dvt_audit_retention":   {3, false},
	"dvt_run_seq":           {2, true},
	"dvt_runs":              {2, true},
}
