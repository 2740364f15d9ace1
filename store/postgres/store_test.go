package postgres_test

import (
	"context"
	"testing"

	"github.com/dvtrun/dvtrun/store"
	"github.com/dvtrun/dvtrun/store/postgres"
	"github.com/dvtrun/dvtrun/store/postgres/pgtest"
	"github.com/dvtrun/dvtrun/store/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func openStore(t *testing.T, dsn string, opts postgres.Options) store.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), dsn, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	dsn := pgtest.DSN(t)
	clock := storetest.NewClock()
	storetest.Run(t, storetest.Backend{
		Open:    func(t *testing.T) store.Store { return openStore(t, dsn, postgres.Options{Now: clock.Now}) },
		Advance: clock.Advance,
		Fresh: func(t *testing.T) func(t *testing.T) store.Store {
			dsn := pgtest.DSN(t)
			return func(t *testing.T) store.Store { return openStore(t, dsn, postgres.Options{}) }
		},
	})
}

func TestTamperEvidence(t *testing.T) {
	storetest.RunAudit(t, storetest.AuditBackend{
		Fresh: func(t *testing.T) storetest.AuditStore {
			s := openStore(t, pgtest.DSN(t), postgres.Options{}).(*postgres.Store)
			t.Cleanup(func() { s.Close() })
			return s
		},
		Tamper: func(t *testing.T, s storetest.AuditStore, stmts ...string) {
			// The tables' owner can switch the triggers off: what the chain
			// and the checkpoints are for.
			db := s.(*postgres.Store).DB()
			for _, table := range []string{"dvt_run_events", "dvt_audit_genesis", "dvt_audit_log", "dvt_audit_checkpoints"} {
				stmts = append([]string{"ALTER TABLE " + table + " DISABLE TRIGGER USER"}, stmts...)
			}
			for _, q := range stmts {
				if _, err := db.ExecContext(context.Background(), q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
		},
		Guarded: func(s storetest.AuditStore, stmt string) error {
			_, err := s.(*postgres.Store).DB().ExecContext(context.Background(), stmt)
			return err
		},
		JSON: func(quoted string) string { return quoted },
	})
}

// TestChainView checks the SQL view an auditor queries: an untouched chain
// is ok everywhere, and a payload edited together with its event bytes is
// the one row that is not.
func TestChainView(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, pgtest.DSN(t), postgres.Options{}).(*postgres.Store)
	defer s.Close()
	f := storetest.SeedAudit(t, s)
	bad := func() []string {
		rows, err := s.DB().QueryContext(ctx, `SELECT run_id || ':' || run_seq FROM dvt_audit_chain WHERE NOT ok ORDER BY run_id, run_seq`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var v string
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
		return out
	}
	var n int
	if err := s.DB().GetContext(ctx, &n, `SELECT COUNT(*) FROM dvt_audit_chain WHERE ok`); err != nil || n != 12 {
		t.Fatalf("%d rows ok (%v), want all 12", n, err)
	}
	if got := bad(); len(got) != 0 {
		t.Fatalf("untouched chain: broken at %v", got)
	}
	for _, q := range []string{
		`ALTER TABLE dvt_run_events DISABLE TRIGGER USER`,
		`UPDATE dvt_run_events SET event_bytes = REPLACE(event_bytes, '42', '43') WHERE run_id = '` + f.A + `' AND run_seq = 4`,
	} {
		if _, err := s.DB().ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if got := bad(); len(got) != 1 || got[0] != f.A+":4" {
		t.Fatalf("edited event bytes: broken at %v, want [%s:4]", got, f.A)
	}
}
