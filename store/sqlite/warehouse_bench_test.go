package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// BenchmarkWarehouseSeed10k loads a 10,000-row, 4-column seed (parse, type
// inference, insert, atomic replace). Target: at least 50,000 rows/s on a
// laptop core, so that example-sized seeds are never the slow part of a run.
func BenchmarkWarehouseSeed10k(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("id,name,amount,note\n")
	for i := range 10000 {
		fmt.Fprintf(&sb, "%d,name %d,%d.%02d,\"a, quoted \"\"note\"\"\"\n", i, i, i, i%100)
	}
	dir := b.TempDir()
	csv := filepath.Join(dir, "big.csv")
	if err := os.WriteFile(csv, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	w, err := OpenWarehouse(context.Background(), filepath.Join(dir, "wh.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	req := engine.StepRequest{StepID: "seed.big", Kind: plan.KindSeed, Relation: "big", SeedPath: csv}
	for b.Loop() {
		res, err := w.RunStep(context.Background(), req)
		if err != nil || res.RowCount != 10000 {
			b.Fatalf("%v %+v", err, res)
		}
	}
	b.ReportMetric(float64(b.N*10000)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkWarehouseModelRebuild rebuilds a 10,000-row table model over a
// seed while a view depends on it: the cost of the atomic replace.
func BenchmarkWarehouseModelRebuild(b *testing.B) {
	dir := b.TempDir()
	w, err := OpenWarehouse(context.Background(), filepath.Join(dir, "wh.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	ctx := context.Background()
	if _, err := w.DB().Exec(`CREATE TABLE src AS WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 10000) SELECT i, i % 7 AS k FROM c`); err != nil {
		b.Fatal(err)
	}
	model := engine.StepRequest{StepID: "model.m", Kind: plan.KindModel, Relation: "m", Materialized: "table", SQL: "select k, i * 2 as j from src"}
	if _, err := w.RunStep(ctx, model); err != nil {
		b.Fatal(err)
	}
	if _, err := w.RunStep(ctx, engine.StepRequest{StepID: "model.v", Kind: plan.KindModel, Relation: "v", Materialized: "view", SQL: "select k, sum(j) from m group by k"}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if res, err := w.RunStep(ctx, model); err != nil || res.RowCount != 10000 {
			b.Fatalf("%v %+v", err, res)
		}
	}
}

// BenchmarkWarehouseIncremental1kInto100k merges 1,000 new rows (500
// updates, 500 inserts) into a 100,000-row incremental table, against a
// full rebuild of the same select: what an incremental model saves per
// run when its filter picks the new rows.
func BenchmarkWarehouseIncremental1kInto100k(b *testing.B) {
	ctx := context.Background()
	for _, mode := range []string{"merge", "rebuild"} {
		b.Run(mode, func(b *testing.B) {
			w, err := OpenWarehouse(ctx, filepath.Join(b.TempDir(), "wh.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			if _, err := w.DB().ExecContext(ctx, `CREATE TABLE src AS
				WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000)
				SELECT i AS id, 'row ' || i AS label, 0 AS version FROM n`); err != nil {
				b.Fatal(err)
			}
			req := engine.StepRequest{StepID: "model.inc", Kind: plan.KindModel, Relation: "inc", Materialized: plan.MaterializedIncremental,
				SQL: "select id, label, version from src", UniqueKey: []string{"id"}, IncrementalFilter: "version > (select max(version) from {{ this }})"}
			if mode == "rebuild" {
				req.Materialized, req.UniqueKey, req.IncrementalFilter = plan.MaterializedTable, nil, ""
			}
			if _, err := w.RunStep(ctx, req); err != nil {
				b.Fatal(err)
			}
			version := 0
			for b.Loop() {
				b.StopTimer()
				version++
				// 500 changed rows and 500 new ones, all at the new version.
				if _, err := w.DB().ExecContext(ctx, `UPDATE src SET version = ?, label = 'changed' WHERE id % 200 = ? % 200`, version, version); err != nil {
					b.Fatal(err)
				}
				if _, err := w.DB().ExecContext(ctx, `INSERT INTO src WITH RECURSIVE k(j) AS (SELECT 1 UNION ALL SELECT j + 1 FROM k WHERE j < 500)
					SELECT (SELECT max(id) FROM src) + j, 'new', ? FROM k`, version); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if _, err := w.RunStep(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
