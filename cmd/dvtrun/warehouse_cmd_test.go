package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
)

// TestSnowflakeFenceTablesBounded (issue 26): store and warehouse on one
// Snowflake database and schema from the first command; a run with a
// ledgered step leaves no fence table behind at its end, so after 8 runs
// there are as many as after one: none. The tables an earlier version left
// (one per run, kept for good) are listed by `dvtrun warehouse cleanup`,
// which changes nothing without --apply, and with it removes those of ended
// runs (and the shared dvt_run_fences of versions before issue 16, once
// all its runs ended) and keeps the one of a run this store does not know.
func TestSnowflakeFenceTablesBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Snowflake-protocol test server")
	}
	srv := sftest.Start(t)
	dsn := srv.DSN("DVT", "PUBLIC")
	h := newHarness(t)
	h.env["DVT_STORE"] = "snowflake://" + dsn
	h.env["DVT_WAREHOUSE"] = "snowflake://" + dsn
	h.env["DVT_TARGET_PATH"] = filepath.Join(h.dir, "target")
	plan := fixture("fences", "plan.yaml")

	ctx := context.Background()
	var runs []string
	for i := range 8 {
		r := h.run("run", plan)
		if r.code != 0 {
			t.Fatalf("run %d: exit %d\n%s\n%s", i+1, r.code, r.stdout, r.stderr)
		}
		runs = append(runs, runIDFrom(t, r.stdout))
	}
	wh, err := snowflake.OpenWarehouse(ctx, dsn, snowflake.WarehouseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	count := func() int {
		t.Helper()
		fts, err := wh.FenceTables(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(fts)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d fence tables after 8 runs, want 0 (each run's is dropped at its end)", n)
	}
	var ledgered int
	if err := wh.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM dvt_step_ledger WHERE step_id = 'sql.add'").Scan(&ledgered); err != nil || ledgered != 8 {
		t.Fatalf("ledger rows of sql.add: %d (%v), want 8: the step must have run in the ledger, behind a fence", ledgered, err)
	}

	// What an earlier version left: a fence table per ended run, and one
	// of a run of another store sharing the warehouse.
	for _, run := range []string{runs[0], runs[1], "not-in-this-store"} {
		table := `"` + snowflake.FenceTableName(run) + `"`
		for _, q := range []string{"CREATE TABLE " + table + " (run_id VARCHAR NOT NULL, fence BIGINT NOT NULL)", "INSERT INTO " + table + " VALUES ('" + run + "', 1)"} {
			if _, err := wh.DB().ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
	}
	// And the one table all runs shared before issue 16.
	for _, q := range []string{"CREATE TABLE dvt_run_fences (run_id VARCHAR NOT NULL, fence BIGINT NOT NULL)",
		"INSERT INTO dvt_run_fences VALUES ('" + runs[2] + "', 1), ('" + runs[3] + "', 1)"} {
		if _, err := wh.DB().ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	r := h.run("warehouse", "cleanup")
	if r.code != 0 || strings.Count(r.stdout, "would remove") != 3 || !strings.Contains(r.stdout, "kept: not a run of this state store") ||
		!strings.Contains(r.stdout, "run again with --apply") {
		t.Fatalf("warehouse cleanup (dry run): exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if n := count(); n != 3 {
		t.Fatalf("the dry run left %d fence tables, want the 3 it found", n)
	}
	r = h.run("warehouse", "cleanup", "--apply")
	if r.code != 0 || strings.Count(r.stdout, "  removed") != 3 || !strings.Contains(r.stdout, "Removed 3 of 4 fence tables") {
		t.Fatalf("warehouse cleanup --apply: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	fts, err := wh.FenceTables(ctx)
	if err != nil || len(fts) != 1 || fts[0].RunID != "not-in-this-store" {
		t.Fatalf("after cleanup: %+v, %v; want only the unknown run's table", fts, err)
	}
	if _, shared, err := wh.LegacyFenceRuns(ctx); err != nil || shared {
		t.Fatalf("after cleanup the shared dvt_run_fences is still there (%v)", err)
	}
	// The runs go on working after the cleanup.
	if r := h.run("run", plan); r.code != 0 {
		t.Fatalf("a run after the cleanup: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d fence tables after one more run, want the unknown run's only", n)
	}
}

// TestWarehouseCleanupOtherWarehouses: a warehouse that keeps nothing per
// run says so and exits 0.
func TestWarehouseCleanupOtherWarehouses(t *testing.T) {
	h := newHarness(t)
	r := h.run("warehouse", "cleanup")
	if r.code != 0 || !strings.Contains(r.stdout, "The sqlite warehouse keeps no objects per run") {
		t.Fatalf("warehouse cleanup on SQLite: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}
