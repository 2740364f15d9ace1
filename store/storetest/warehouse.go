package storetest

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
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
