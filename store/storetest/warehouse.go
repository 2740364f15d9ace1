package storetest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// Warehouse is a warehouse under test, with direct access to check what
// its steps built.
type Warehouse interface {
	engine.Warehouse
	DB() *sql.DB
}

// RunWarehouseIncremental is the incremental-model scenario every
// warehouse passes: three runs over a source that gains and changes rows
// each time leave the incremental table equal to a full rebuild of the
// same select; a failing merge (duplicate key in the new rows, a column the
// table has and the new rows lack) leaves the table as it was; a row
// deleted from the source stays (as in dbt) until --full-refresh rebuilds
// the table; without a unique key new rows are appended.
func RunWarehouseIncremental(t *testing.T, wh Warehouse) {
	ctx := context.Background()
	dir := t.TempDir()
	version := 0
	seed := func(csv string) {
		t.Helper()
		version++
		path := filepath.Join(dir, "src"+strings.Repeat("_", version)+".csv")
		if err := os.WriteFile(path, []byte(csv), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := wh.RunStep(ctx, engine.StepRequest{StepID: "seed.inc_src", Kind: plan.KindSeed, Relation: "inc_src", SeedPath: path}); err != nil {
			t.Fatalf("seed: %v", err)
		}
	}
	const body = "select id, val, updated from inc_src"
	incremental := func(rel, sql string, key []string, fullRefresh bool) (engine.StepResult, error) {
		return wh.RunStep(ctx, engine.StepRequest{
			StepID: "model." + rel, Kind: plan.KindModel, Relation: rel, Materialized: plan.MaterializedIncremental,
			SQL: sql, UniqueKey: key, FullRefresh: fullRefresh,
			IncrementalFilter: "updated > (select coalesce(max(updated), 0) from {{ this }})",
		})
	}
	rows := func(rel string) string {
		t.Helper()
		r, err := wh.DB().QueryContext(ctx, "select cast(id as varchar) || ':' || val || ':' || cast(updated as varchar) from "+rel+" order by id, val")
		if err != nil {
			t.Fatalf("read %s: %v", rel, err)
		}
		defer r.Close()
		var out []string
		for r.Next() {
			var s string
			if err := r.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		return strings.Join(out, " ")
	}
	rebuild := func() string {
		t.Helper()
		if _, err := wh.RunStep(ctx, engine.StepRequest{StepID: "model.inc_full", Kind: plan.KindModel, Relation: "inc_full", Materialized: plan.MaterializedTable, SQL: body}); err != nil {
			t.Fatalf("full rebuild: %v", err)
		}
		return rows("inc_full")
	}

	runs := []struct {
		csv          string
		wantAffected int64 // rows the incremental step wrote
	}{
		{"id,val,updated\n1,a,1\n2,b,1\n", 2},                      // first build: the full select
		{"id,val,updated\n1,a,1\n2,B,2\n3,c,2\n", 2},               // 2 changed, 3 new
		{"id,val,updated\n1,A,3\n2,B,2\n3,c,2\n4,d,3\n5,e,3\n", 3}, // 1 changed, 4 and 5 new
	}
	for i, r := range runs {
		seed(r.csv)
		res, err := incremental("inc_orders", body, []string{"id"}, false)
		if err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
		if res.RowsAffected != r.wantAffected {
			t.Errorf("run %d: RowsAffected %d, want %d", i+1, res.RowsAffected, r.wantAffected)
		}
		got, want := rows("inc_orders"), rebuild()
		if got != want {
			t.Errorf("run %d: incremental table %q, full rebuild %q", i+1, got, want)
		}
		if res.RowCount != int64(strings.Count(want, " ")+1) {
			t.Errorf("run %d: RowCount %d for %q", i+1, res.RowCount, want)
		}
	}
	before := rows("inc_orders")

	// A failing merge leaves the previous table intact.
	seed("id,val,updated\n1,A,3\n6,f,4\n6,g,4\n")
	if _, err := incremental("inc_orders", body, []string{"id"}, false); engine.CodeOf(err) != engine.CodeStepFailed || !strings.Contains(err.Error(), "more than once") {
		t.Errorf("duplicate key in the new rows: %v, want STEP_FAILED naming the duplicate", err)
	}
	if got := rows("inc_orders"); got != before {
		t.Errorf("after the failed merge the table is %q, want %q", got, before)
	}
	if _, err := incremental("inc_orders", "select id, updated from inc_src", []string{"id"}, false); engine.CodeOf(err) != engine.CodeStepFailed {
		t.Errorf("new rows without the table's column val: %v, want STEP_FAILED", err)
	}
	if got := rows("inc_orders"); got != before {
		t.Errorf("after the failed merge the table is %q, want %q", got, before)
	}

	// A row deleted from the source stays in the incremental table (dbt's
	// semantics) until a full refresh rebuilds it from the full select.
	seed("id,val,updated\n2,B,2\n3,c,2\n4,d,3\n5,e,3\n7,h,5\n")
	if _, err := incremental("inc_orders", body, []string{"id"}, false); err != nil {
		t.Fatal(err)
	}
	if got := rows("inc_orders"); !strings.HasPrefix(got, "1:A:3 ") || !strings.HasSuffix(got, " 7:h:5") {
		t.Errorf("after a merge, row 1 (deleted from the source) should stay and 7 arrive: %q", got)
	}
	if _, err := incremental("inc_orders", body, []string{"id"}, true); err != nil {
		t.Fatalf("full refresh: %v", err)
	}
	if got, want := rows("inc_orders"), rebuild(); got != want {
		t.Errorf("after --full-refresh the table is %q, want the full rebuild %q", got, want)
	}

	// Without a unique key, the filtered new rows are appended.
	seed("id,val,updated\n1,a,1\n")
	if _, err := incremental("inc_log", body, nil, false); err != nil {
		t.Fatal(err)
	}
	seed("id,val,updated\n1,a,1\n1,b,2\n2,c,2\n")
	if res, err := incremental("inc_log", body, nil, false); err != nil || res.RowsAffected != 2 {
		t.Fatalf("append: %v %+v", err, res)
	}
	if got := rows("inc_log"); got != "1:a:1 1:b:2 2:c:2" {
		t.Errorf("appended table %q", got)
	}
}

// RunWarehouseSeedData: a seed loads the CSV bytes of its request
// (StepRequest.SeedData, from the stored plan bundle), never the file
// SeedPath names, which may be gone or hold other rows.
func RunWarehouseSeedData(t *testing.T, wh Warehouse) {
	ctx := context.Background()
	onDisk := filepath.Join(t.TempDir(), "people.csv")
	if err := os.WriteFile(onDisk, []byte("id\n7\n8\n9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{onDisk, filepath.Join(t.TempDir(), "gone.csv")} {
		res, err := wh.RunStep(ctx, engine.StepRequest{StepID: "seed.people", Kind: plan.KindSeed, Relation: "people",
			SeedPath: path, SeedData: []byte("id\n1\n2\n")})
		if err != nil {
			t.Fatalf("seed with SeedPath %s: %v", path, err)
		}
		var n, sum int
		if err := wh.DB().QueryRowContext(ctx, "select count(*), sum(id) from people").Scan(&n, &sum); err != nil {
			t.Fatal(err)
		}
		if res.RowCount != 2 || n != 2 || sum != 3 {
			t.Fatalf("SeedPath %s: loaded %d rows (table: %d, sum %d), want the 2 rows of SeedData", path, res.RowCount, n, sum)
		}
	}
}

// LedgerWarehouse is a warehouse with a step ledger.
type LedgerWarehouse interface {
	Warehouse
	engine.Ledger
}

// RunWarehouseLedger is the step-ledger scenario of the warehouses whose
// every writing step kind joins the ledger's transaction (SQLite,
// Postgres): each commits its ledger row with its work, the same logical
// attempt run again returns the recorded result without repeating the
// effect, a new logical attempt is new work; once a runner with a higher
// fence committed for a run, a stale runner's step is refused with
// LEASE_LOST and writes nothing, and fences are per run.
func RunWarehouseLedger(t *testing.T, wh LedgerWarehouse) {
	ctx := context.Background()
	step := func(req engine.StepRequest) engine.StepResult {
		t.Helper()
		res, err := wh.RunStep(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", req.StepID, err)
		}
		return res
	}
	effects := func() int {
		t.Helper()
		var n int
		if err := wh.DB().QueryRowContext(ctx, "SELECT count(*) FROM ledger_effects").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	step(engine.StepRequest{StepID: "setup", Kind: plan.KindSQL, SQL: "CREATE TABLE ledger_effects (n INTEGER)"})
	cases := []struct {
		name string
		req  engine.StepRequest
		want engine.StepResult
	}{
		{"sql", engine.StepRequest{StepID: "sql.insert", Kind: plan.KindSQL, SQL: "INSERT INTO ledger_effects VALUES (1)"}, engine.StepResult{RowsAffected: 1}},
		{"seed", engine.StepRequest{StepID: "seed.ledger_s", Kind: plan.KindSeed, Relation: "ledger_s", SeedData: []byte("id\n1\n2\n")}, engine.StepResult{RowCount: 2, RowsAffected: 2}},
		{"model table", engine.StepRequest{StepID: "model.ledger_t", Kind: plan.KindModel, Relation: "ledger_t", Materialized: plan.MaterializedTable, SQL: "select * from ledger_s"}, engine.StepResult{RowCount: 2}},
		{"model view", engine.StepRequest{StepID: "model.ledger_v", Kind: plan.KindModel, Relation: "ledger_v", Materialized: plan.MaterializedView, SQL: "select * from ledger_s"}, engine.StepResult{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := c.req
			req.RunID, req.LogicalAttempt, req.EngineAttempt, req.Fence = "run-1", 1, 2, 7
			first := step(req)
			if first.Ledger != nil || first.RowCount != c.want.RowCount || first.RowsAffected != c.want.RowsAffected {
				t.Fatalf("first run: %+v, want %+v", first, c.want)
			}
			req.EngineAttempt = 3
			again := step(req)
			if again.Ledger == nil || again.Ledger.EngineAttempt != 2 || again.Ledger.Fence != 7 {
				t.Fatalf("second run of the same attempt: %+v, want the recorded result of engine attempt 2", again)
			}
			if again.RowCount != c.want.RowCount || again.RowsAffected != c.want.RowsAffected {
				t.Fatalf("recorded result %+v, want %+v", again, c.want)
			}
			e, ok, err := wh.LookupStep(ctx, "run-1", req.StepID, 1)
			if err != nil || !ok || e.Result.RowsAffected != c.want.RowsAffected || e.CommittedAt.IsZero() {
				t.Fatalf("LookupStep: %+v %v %v", e, ok, err)
			}
			if _, ok, _ := wh.LookupStep(ctx, "run-1", req.StepID, 2); ok {
				t.Fatal("logical attempt 2 never ran but is in the ledger")
			}
		})
	}
	if n := effects(); n != 1 {
		t.Fatalf("ledger_effects = %d rows, want 1", n)
	}
	// A new logical attempt (RETRY_STEP) is new work.
	step(engine.StepRequest{RunID: "run-1", StepID: "sql.insert", Kind: plan.KindSQL, SQL: "INSERT INTO ledger_effects VALUES (2)", LogicalAttempt: 2, Fence: 7})
	if n := effects(); n != 2 {
		t.Fatalf("ledger_effects = %d rows after logical attempt 2, want 2", n)
	}

	fenced := func(run, id string, fence int64) engine.StepRequest {
		return engine.StepRequest{RunID: run, StepID: id, Kind: plan.KindSQL, SQL: "INSERT INTO ledger_effects VALUES (1)", LogicalAttempt: 1, Fence: fence}
	}
	step(fenced("run-2", "sql.a", 1))
	step(fenced("run-2", "sql.b", 2)) // the successor commits
	if _, err := wh.RunStep(ctx, fenced("run-2", "sql.c", 1)); engine.CodeOf(err) != engine.CodeLeaseLost {
		t.Fatalf("stale fence: %v, want LEASE_LOST", err)
	}
	step(fenced("run-3", "sql.c", 1)) // fences are per run
	if n := effects(); n != 5 {
		t.Fatalf("ledger_effects = %d rows, want 5", n)
	}
}

// RunWarehouseLedgerRace: two handles on one warehouse (two runners) run
// the same step attempt at once, many times: each attempt takes effect
// once, and the loser gets the winner's recorded result.
func RunWarehouseLedgerRace(t *testing.T, ws [2]LedgerWarehouse) {
	ctx := context.Background()
	if _, err := ws[0].RunStep(ctx, engine.StepRequest{StepID: "setup", Kind: plan.KindSQL, SQL: "CREATE TABLE race_effects (step TEXT)"}); err != nil {
		t.Fatal(err)
	}
	const attempts = 20
	for i := range attempts {
		id := fmt.Sprintf("sql.s%02d", i)
		var wg sync.WaitGroup
		recorded := make([]bool, len(ws))
		for k, w := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := w.RunStep(ctx, engine.StepRequest{RunID: "run-1", StepID: id, Kind: plan.KindSQL,
					SQL: "INSERT INTO race_effects VALUES ('" + id + "')", LogicalAttempt: 1, EngineAttempt: k + 1, Fence: 1})
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
	var n, distinct int
	if err := ws[0].DB().QueryRowContext(ctx, "SELECT count(*), count(DISTINCT step) FROM race_effects").Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != attempts || distinct != attempts {
		t.Fatalf("race_effects = %d rows (%d distinct), want %d", n, distinct, attempts)
	}
}
