package snowflake_test

import (
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/runner"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
)

var _ runner.FenceCloser = (*snowflake.Warehouse)(nil)

// fenceTables counts the run fence tables in the warehouse's schema.
func fenceTables(t *testing.T, w *snowflake.Warehouse) int {
	t.Helper()
	fts, err := w.FenceTables(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return len(fts)
}

// TestWarehouseFenceClosedAtRunEnd (issue 26): the run's end closes its
// fence: the table is dropped, so the fence tables are those of the runs
// in flight whatever the number of runs, and a stale runner of the run is
// still refused after the drop, whether it had the fence cached (its claim
// meets no table) or not (it makes the table anew, and is refused by the
// closed record, and the table is dropped again). Nothing it sends is
// written.
func TestWarehouseFenceClosedAtRunEnd(t *testing.T) {
	srv := sftest.Start(t)
	w := openWarehouseOpts(t, srv, snowflake.WarehouseOptions{})
	createEffects(t, w)
	const runs = 8
	for i := range runs {
		run := "run-" + string(rune('a'+i))
		for _, step := range []string{"sql.x", "sql.y"} {
			if _, err := w.RunStep(ctx, effectStep(run, step, 2)); err != nil {
				t.Fatal(err)
			}
		}
		if n := fenceTables(t, w); n != 1 {
			t.Fatalf("run %d in flight: %d fence tables, want its own", i+1, n)
		}
		if err := w.CloseRun(ctx, run, 2); err != nil {
			t.Fatal(err)
		}
		if n := fenceTables(t, w); n != 0 {
			t.Fatalf("after %d runs ended: %d fence tables, want 0", i+1, n)
		}
	}
	// dvtrun's own requests carry a QUERY_TAG too, naming the run.
	closes := 0
	for _, q := range srv.QueryLog() {
		if strings.Contains(q.SQLText, "INSERT INTO dvt_closed_fences") {
			closes++
			if !strings.Contains(q.QueryTag, `"dvtrun":"close run fence"`) || !strings.Contains(q.QueryTag, `"run_id":"run-`) {
				t.Errorf("the close of a fence ran with QUERY_TAG %q: %.200s", q.QueryTag, q.SQLText)
			}
		}
	}
	if closes == 0 {
		t.Error("no close of a fence in the query log")
	}
	// A run without a ledgered step costs no request at its end.
	before := srv.QueryRequests()
	if err := w.CloseRun(ctx, "run-nothing", 1); err != nil || srv.QueryRequests() != before {
		t.Fatalf("closing a run without a fence: %v, %d requests", err, srv.QueryRequests()-before)
	}

	// Stale runners of run-a, which ended above. One had the fence
	// cached: it ran a step of run-z before run-z's end elsewhere.
	stale := openWarehouseOpts(t, srv, snowflake.WarehouseOptions{})
	if _, err := stale.RunStep(ctx, effectStep("run-z", "sql.x", 1)); err != nil {
		t.Fatal(err)
	}
	if err := w.CloseRun(ctx, "run-z", 1); err != nil { // w never ran run-z: no table of its making
		t.Fatal(err)
	}
	closer := openWarehouseOpts(t, srv, snowflake.WarehouseOptions{})
	if _, err := closer.EndStaleTransactions(ctx, "run-z"); err != nil { // the taker
		t.Fatal(err)
	}
	if err := closer.CloseRun(ctx, "run-z", 2); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		w    *snowflake.Warehouse
		req  engine.StepRequest
	}{
		{"fence cached, table dropped under it", stale, effectStep("run-z", "sql.late", 1)},
		{"no fence cached: the table is made anew", openWarehouseOpts(t, srv, snowflake.WarehouseOptions{}), effectStep("run-a", "sql.late", 2)},
		{"a higher fence than the closer's", openWarehouseOpts(t, srv, snowflake.WarehouseOptions{}), effectStep("run-b", "sql.late", 9)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.w.RunStep(ctx, c.req)
			if engine.CodeOf(err) != engine.CodeLeaseLost || !strings.Contains(err.Error(), "fence is closed") {
				t.Fatalf("a stale runner's step after the run's end: %v, want LEASE_LOST naming the closed fence", err)
			}
			if n := effectRows(t, w, c.req.RunID, "sql.late"); n != 0 {
				t.Fatalf("the stale step wrote %d rows", n)
			}
			if n := fenceTables(t, w); n != 0 {
				t.Fatalf("%d fence tables after a stale runner was refused, want 0", n)
			}
		})
	}
}

// TestWarehouseFenceTablesLeftBehind: the fence tables an earlier version
// kept (or a runner that died before its run's end) are listed with their
// run and fence; RemoveFence closes such a run's fence and drops its table,
// and a stale runner of that run is refused afterwards.
func TestWarehouseFenceTablesLeftBehind(t *testing.T) {
	srv := sftest.Start(t)
	old := openWarehouseOpts(t, srv, snowflake.WarehouseOptions{})
	createEffects(t, old)
	for _, run := range []string{"old-1", "old-2"} {
		if _, err := old.RunStep(ctx, effectStep(run, "sql.x", 3)); err != nil {
			t.Fatal(err)
		}
	}
	// Not a fence table of dvtrun's making: never listed.
	if _, err := old.DB().ExecContext(ctx, `CREATE TABLE "DVT_FENCE_NOTMINE" (a INT)`); err != nil {
		t.Fatal(err)
	}
	w := openWarehouseOpts(t, srv, snowflake.WarehouseOptions{})
	fts, err := w.FenceTables(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(fts) != 2 {
		t.Fatalf("fence tables %+v, want old-1's and old-2's", fts)
	}
	for _, ft := range fts {
		if ft.Name != snowflake.FenceTable(ft.RunID) || ft.Fence != 3 || ft.Closed {
			t.Fatalf("fence table %+v, want its run, fence 3, not closed", ft)
		}
	}
	if err := w.RemoveFence(ctx, fts[0]); err != nil {
		t.Fatal(err)
	}
	left, err := w.FenceTables(ctx)
	if err != nil || len(left) != 1 || left[0].RunID != fts[1].RunID {
		t.Fatalf("after removing %s: %+v, %v", fts[0].Name, left, err)
	}
	if _, err := old.RunStep(ctx, effectStep(fts[0].RunID, "sql.late", 3)); engine.CodeOf(err) != engine.CodeLeaseLost {
		t.Fatalf("the removed run's stale runner: %v, want LEASE_LOST", err)
	}
	if n := effectRows(t, w, fts[0].RunID, "sql.late"); n != 0 {
		t.Fatalf("the stale step wrote %d rows", n)
	}
}

// TestWarehouseLegacyFencesRemoved: the shared dvt_run_fences of versions
// before issue 16 is removed once its runs have ended: their fences are
// closed first, so a stale runner of one is refused afterwards, and a
// process that had seen the table goes on with new runs without it.
func TestWarehouseLegacyFencesRemoved(t *testing.T) {
	srv := sftest.Start(t)
	w := openWarehouseOpts(t, srv, snowflake.WarehouseOptions{})
	createEffects(t, w)
	for _, q := range []string{
		"CREATE TABLE dvt_run_fences (run_id VARCHAR NOT NULL, fence BIGINT NOT NULL)",
		"INSERT INTO dvt_run_fences VALUES ('old-a', 5), ('old-b', 2)",
	} {
		if _, err := w.DB().ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// A runner of old-a that has seen the shared table (its fence 5).
	stale := openWarehouseOpts(t, srv, snowflake.WarehouseOptions{})
	if _, err := stale.RunStep(ctx, effectStep("old-a", "sql.x", 5)); err != nil {
		t.Fatal(err)
	}
	runs, ok, err := w.LegacyFenceRuns(ctx)
	if err != nil || !ok || strings.Join(runs, ",") != "old-a,old-b" {
		t.Fatalf("LegacyFenceRuns: %v %v %v", runs, ok, err)
	}
	if err := w.RemoveLegacyFences(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := w.LegacyFenceRuns(ctx); err != nil || ok {
		t.Fatalf("after the removal the shared table is still there (%v)", err)
	}
	for _, req := range []engine.StepRequest{effectStep("old-a", "sql.late", 5), effectStep("old-b", "sql.late", 2)} {
		if _, err := stale.RunStep(ctx, req); engine.CodeOf(err) != engine.CodeLeaseLost {
			t.Fatalf("%s after its shared fence was removed: %v, want LEASE_LOST", req.RunID, err)
		}
		if n := effectRows(t, w, req.RunID, "sql.late"); n != 0 {
			t.Fatalf("%s: the stale step wrote %d rows", req.RunID, n)
		}
	}
	// New runs go on, in the process that had seen the shared table too.
	if _, err := stale.RunStep(ctx, effectStep("new-1", "sql.x", 1)); err != nil {
		t.Fatalf("a new run after the removal: %v", err)
	}
}
