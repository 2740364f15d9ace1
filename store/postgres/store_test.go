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
		Rows: func(t *testing.T, s storetest.AuditStore, q string) []string {
			var out []string
			if err := s.(*postgres.Store).DB().SelectContext(context.Background(), &out, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			return out
		},
	})
}
