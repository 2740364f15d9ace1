package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/audit"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// TestChainStartsAtGenesis: a store made before the chain (migrations up
// to 0499) with a run half done is migrated on open; the run's existing
// events are not hashed, its genesis row says where its chain starts, the
// events appended afterwards chain from there, and the store verifies.
func TestChainStartsAtGenesis(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	migs, err := sqlfiles.Migrations(sqlfiles.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	exec(`CREATE TABLE dvt_schema_version (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)`)
	for _, m := range migs {
		if m.Version >= 500 {
			break
		}
		exec(m.SQL)
		exec(`INSERT INTO dvt_schema_version VALUES (?, ?, '2026-01-01T00:00:00.000000000Z')`, m.Version, m.Name)
	}
	// The run as an older dvtrun wrote it: RunQueued and RunStarted.
	f := storetest.NewFixture()
	exec(`INSERT INTO dvt_runs (run_id, tenant_id, project_id, environment_id, plan_id, plan_version, plan_sha256, target_adapter, created_at)
		VALUES (?, 'acme', 'shop', 'dev', 'shop_plan', '7', 'ab12', 'local', '2026-04-01T08:00:00.000000000Z')`, f.Meta.RunID)
	exec(`INSERT INTO dvt_run_seq (run_id, next_seq, status) VALUES (?, 3, 'RUNNING')`, f.Meta.RunID)
	for i, typ := range []engine.EventType{engine.RunQueued, engine.RunStarted} {
		e := f.Event(typ, "", 1)
		exec(`INSERT INTO dvt_run_events (run_id, run_seq, tenant_id, project_id, environment_id, event_id, event_type, plan_id,
			plan_version, logical_attempt_id, engine_attempt_id, idempotency_key, emitted_at, persisted_at)
			VALUES (?, ?, 'acme', 'shop', 'dev', ?, ?, 'shop_plan', '7', 1, 1, ?, ?, ?)`,
			f.Meta.RunID, i+1, e.EventID, string(typ), e.IdempotencyKey, e.EmittedAt.Format(engine.TimeFormat), e.EmittedAt.Format(engine.TimeFormat))
	}
	db.Close()

	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	heads, err := s.AuditRuns(ctx, f.Meta.RunID)
	if err != nil || len(heads) != 1 || heads[0].FirstSeq != 3 {
		t.Fatalf("genesis: %+v %v, want the chain to start at runSeq 3", heads, err)
	}
	if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{f.Event(engine.StepStarted, "model.x", 1), f.Event(engine.StepCompleted, "model.x", 1)}); err != nil {
		t.Fatal(err)
	}
	links, err := s.Links(ctx, f.Meta.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if links[1].Hash != "" || links[2].Hash != "" || links[3].PrevHash != audit.Genesis || links[4].PrevHash != links[3].Hash {
		t.Fatalf("links %+v: want runSeq 1-2 unchained, 3 after genesis, 4 after 3", links)
	}
	rep, err := audit.Verify(ctx, s, audit.VerifyOptions{})
	if err != nil || rep.Problem != nil || rep.Events != 4 || rep.Chained != 2 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}
