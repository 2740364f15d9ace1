package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine/audit"
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
			for _, table := range []string{"dvt_run_events", "dvt_audit_genesis", "dvt_audit_log", "dvt_audit_checkpoints",
				"dvt_audit_retention", "dvt_run_seq", "dvt_runs"} {
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

// TestAppendOnlyRole sets up README's role for dvtrun (no ownership, no
// UPDATE, DELETE or TRUNCATE on the append-only tables) and checks that
// doctor fails for the owner and passes for the role, that the role is
// refused UPDATE and DELETE by privilege, and that it can still append,
// checkpoint and verify.
func TestAppendOnlyRole(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	owner := openStore(t, dsn, postgres.Options{}).(*postgres.Store)
	defer owner.Close()
	f := storetest.SeedAudit(t, owner)
	failed := func(s *postgres.Store) []string {
		t.Helper()
		gs, err := s.AuditGuards(ctx)
		if err != nil || len(gs) != 21 {
			t.Fatalf("guards: %v %v", gs, err)
		}
		var out []string
		for _, g := range gs {
			if !g.OK {
				out = append(out, g.Check)
			}
		}
		return out
	}
	if got := failed(owner); len(got) != 14 {
		t.Fatalf("as the owner, failed checks %v: want owner and privileges of the 7 tables", got)
	}
	role := fmt.Sprintf("dvtrun_app_%d", time.Now().UnixNano()%1_000_000_000)
	for _, q := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT USAGE ON SCHEMA public TO " + role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO " + role,
		"REVOKE UPDATE, DELETE, TRUNCATE ON dvt_run_events, dvt_audit_genesis, dvt_audit_log, dvt_audit_checkpoints, dvt_audit_retention FROM " + role,
		// The append path updates these two, under their triggers.
		"REVOKE DELETE, TRUNCATE ON dvt_run_seq, dvt_runs FROM " + role,
	} {
		if _, err := owner.DB().ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		owner.DB().ExecContext(ctx, "DROP OWNED BY "+role)
		owner.DB().ExecContext(ctx, "DROP ROLE "+role)
	})
	app := openStore(t, strings.Replace(dsn, "user=dvt", "user="+role, 1), postgres.Options{}).(*postgres.Store)
	defer app.Close()
	if got := failed(app); len(got) != 0 {
		t.Fatalf("as the role, failed checks %v", got)
	}
	for _, q := range []string{
		"UPDATE dvt_run_events SET payload = NULL WHERE run_id = '" + f.A + "'",
		"DELETE FROM dvt_audit_log",
		"TRUNCATE dvt_audit_checkpoints",
		"DELETE FROM dvt_run_seq WHERE run_id = '" + f.A + "'",
		"TRUNCATE dvt_runs",
		"UPDATE dvt_audit_retention SET cutoff = 'x'",
	} {
		if _, err := app.DB().ExecContext(ctx, q); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("%s: %v, want permission denied", q, err)
		}
	}
	// UPDATE on dvt_run_seq and dvt_runs is the role's (appends), and the
	// triggers narrow it to what the append path does.
	for _, q := range []string{
		"UPDATE dvt_run_seq SET status = 'COMPLETED' WHERE run_id = '" + f.B + "'",
		"UPDATE dvt_runs SET plan_id = 'other' WHERE run_id = '" + f.A + "'",
		"INSERT INTO dvt_audit_genesis (run_id, first_seq, recorded_at) VALUES ('" + f.B + "', 4, 'x')",
		"INSERT INTO dvt_audit_retention (run_id, removed_at, cutoff) VALUES ('" + f.B + "', 'x', 'x')",
	} {
		if _, err := app.DB().ExecContext(ctx, q); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want refused as append-only", q, err)
		}
	}
	storetest.NewFixture().Bootstrap(t, app) // a run appended as the role
	if cp := storetest.Checkpoint(t, app); cp.Size != 14 {
		t.Fatalf("checkpoint as the role: %d events, want 14", cp.Size)
	}
	rep, err := audit.Verify(ctx, app, audit.VerifyOptions{PublicKey: storetest.TestPublicKey})
	if err != nil || rep.Problem != nil || rep.Checkpoints != 2 {
		t.Fatalf("verify as the role: %+v %v", rep, err)
	}
}
