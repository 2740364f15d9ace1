package sqlite

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// TestWarehouseLedgerOnce: every step kind that writes commits its ledger
// row with its work, and the same logical attempt run again returns the
// recorded result without repeating the effect.
func TestWarehouseLedgerOnce(t *testing.T) {
	w := openWarehouseT(t)
	ctx := context.Background()
	// Opening writes nothing: the ledger appears with the first ledgered step.
	if _, ok, err := w.LookupStep(ctx, "run-1", "sql.insert", 1); ok || err != nil {
		t.Fatalf("LookupStep on a new warehouse: %v %v, want not found", ok, err)
	}
	whRun(t, w, engine.StepRequest{StepID: "setup", Kind: plan.KindSQL, SQL: "CREATE TABLE effects (n INTEGER)"})
	seed := whWriteCSV(t, "s.csv", "id\n1\n2\n")
	cases := []struct {
		name string
		req  engine.StepRequest
		want engine.StepResult
	}{
		{"sql", engine.StepRequest{StepID: "sql.insert", Kind: plan.KindSQL, SQL: "INSERT INTO effects VALUES (1)"}, engine.StepResult{RowsAffected: 1}},
		{"seed", engine.StepRequest{StepID: "seed.s", Kind: plan.KindSeed, Relation: "s", SeedPath: seed}, engine.StepResult{RowCount: 2, RowsAffected: 2}},
		{"model table", engine.StepRequest{StepID: "model.t", Kind: plan.KindModel, Relation: "t", Materialized: plan.MaterializedTable, SQL: "select * from s"}, engine.StepResult{RowCount: 2}},
		{"model view", engine.StepRequest{StepID: "model.v", Kind: plan.KindModel, Relation: "v", Materialized: plan.MaterializedView, SQL: "select * from s"}, engine.StepResult{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := c.req
			req.RunID, req.LogicalAttempt, req.EngineAttempt, req.Fence = "run-1", 1, 2, 7
			first := whRun(t, w, req)
			if first.Ledger != nil || first.RowCount != c.want.RowCount || first.RowsAffected != c.want.RowsAffected {
				t.Fatalf("first run: %+v, want %+v", first, c.want)
			}
			req.EngineAttempt = 3
			again := whRun(t, w, req)
			if again.Ledger == nil || again.Ledger.EngineAttempt != 2 || again.Ledger.Fence != 7 {
				t.Fatalf("second run of the same attempt: %+v, want the recorded result of engine attempt 2", again)
			}
			if again.RowCount != c.want.RowCount || again.RowsAffected != c.want.RowsAffected {
				t.Fatalf("recorded result %+v, want %+v", again, c.want)
			}
			e, ok, err := w.LookupStep(ctx, "run-1", req.StepID, 1)
			if err != nil || !ok || e.Result.RowsAffected != c.want.RowsAffected || e.CommittedAt.IsZero() {
				t.Fatalf("LookupStep: %+v %v %v", e, ok, err)
			}
			if _, ok, _ := w.LookupStep(ctx, "run-1", req.StepID, 2); ok {
				t.Fatal("logical attempt 2 never ran but is in the ledger")
			}
		})
	}
	if got := whQueryStrings(t, w, "SELECT count(*) FROM effects"); got[0] != "1" {
		t.Fatalf("effects = %s rows, want 1", got[0])
	}
	// A new logical attempt (RETRY_STEP) is new work.
	whRun(t, w, engine.StepRequest{RunID: "run-1", StepID: "sql.insert", Kind: plan.KindSQL, SQL: "INSERT INTO effects VALUES (2)", LogicalAttempt: 2, Fence: 7})
	if got := whQueryStrings(t, w, "SELECT count(*) FROM effects"); got[0] != "2" {
		t.Fatalf("effects = %s rows after logical attempt 2, want 2", got[0])
	}
}

// TestWarehouseLedgerFence: once a runner with a higher fence committed
// work for a run, a stale runner's step is refused with LEASE_LOST and
// writes nothing; other runs are not affected.
func TestWarehouseLedgerFence(t *testing.T) {
	w := openWarehouseT(t)
	whRun(t, w, engine.StepRequest{StepID: "setup", Kind: plan.KindSQL, SQL: "CREATE TABLE effects (n INTEGER)"})
	step := func(run, id string, fence int64) engine.StepRequest {
		return engine.StepRequest{RunID: run, StepID: id, Kind: plan.KindSQL, SQL: "INSERT INTO effects VALUES (1)", LogicalAttempt: 1, Fence: fence}
	}
	whRun(t, w, step("run-1", "sql.a", 1))
	whRun(t, w, step("run-1", "sql.b", 2)) // the successor commits
	_, err := w.RunStep(context.Background(), step("run-1", "sql.c", 1))
	if engine.CodeOf(err) != engine.CodeLeaseLost {
		t.Fatalf("stale fence: %v, want LEASE_LOST", err)
	}
	whRun(t, w, step("run-2", "sql.c", 1)) // fences are per run
	if got := whQueryStrings(t, w, "SELECT count(*) FROM effects"); got[0] != "3" {
		t.Fatalf("effects = %s rows, want 3", got[0])
	}
}

// TestWarehouseLedgerRace: two handles on one file (two runners) run the
// same step attempt at once, many times: each attempt takes effect once,
// and the loser gets the winner's recorded result.
func TestWarehouseLedgerRace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wh.db")
	ctx := context.Background()
	var ws [2]*Warehouse
	for i := range ws {
		w, err := OpenWarehouse(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		ws[i] = w
	}
	whRun(t, ws[0], engine.StepRequest{StepID: "setup", Kind: plan.KindSQL, SQL: "CREATE TABLE effects (step TEXT)"})
	const attempts = 20
	for i := range attempts {
		id := "sql.s" + string(rune('a'+i))
		var wg sync.WaitGroup
		recorded := make([]bool, len(ws))
		for k, w := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := w.RunStep(ctx, engine.StepRequest{RunID: "run-1", StepID: id, Kind: plan.KindSQL,
					SQL: "INSERT INTO effects VALUES ('" + id + "')", LogicalAttempt: 1, EngineAttempt: k + 1, Fence: 1})
				if err != nil {
					t.Errorf("%s on handle %d: %v", id, k, err)
					return
				}
				recorded[k] = res.Ledger != nil
			}()
		}
		wg.Wait()
		if recorded[0] == recorded[1] {
			t.Errorf("%s: recorded flags %v, want exactly one execution and one replay", id, recorded)
		}
	}
	if got := whQueryStrings(t, ws[0], "SELECT count(*) FROM effects"); got[0] != "20" {
		t.Fatalf("effects = %s rows, want %d", got[0], attempts)
	}
}
