package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/store/postgres/pgtest"
)

// BenchmarkSeedLoad decided how the Postgres warehouse loads seeds: COPY
// (copyRows, one round trip for all rows) against batched multi-row
// INSERTs (insertRows), in the step's transaction, for a small seed and a
// 10,000-row one (4 columns: bigint, text, numeric, text with quotes).
//
// Run it with: go test -run '^$' -bench SeedLoad ./store/postgres/
func BenchmarkSeedLoad(b *testing.B) {
	w, err := OpenWarehouse(context.Background(), pgtest.DSN(b), WarehouseOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	for _, rows := range []int{100, 10000} {
		var sb strings.Builder
		sb.WriteString("id,name,amount,note\n")
		for i := range rows {
			fmt.Fprintf(&sb, "%d,name %d,%d.%02d,\"a, quoted \"\"note\"\"\"\n", i, i, i, i%100)
		}
		seed, err := plan.ReadSeed(strings.NewReader(sb.String()), "bench.csv")
		if err != nil {
			b.Fatal(err)
		}
		for _, load := range []struct {
			name string
			fn   func(s *step, tmp string, seed *plan.SeedTable) (int64, error)
		}{{"copy", (*step).copyRows}, {"insert", (*step).insertRows}} {
			b.Run(fmt.Sprintf("%s/rows=%d", load.name, rows), func(b *testing.B) {
				ctx := context.Background()
				for b.Loop() {
					conn, err := w.db.Conn(ctx)
					if err != nil {
						b.Fatal(err)
					}
					tx, err := conn.BeginTx(ctx, nil)
					if err != nil {
						b.Fatal(err)
					}
					s := &step{w: w, ctx: ctx, conn: conn, tx: tx}
					if _, err := tx.ExecContext(ctx, `CREATE TABLE "public"."bench" (id bigint, name text, amount numeric, note text)`); err != nil {
						b.Fatal(err)
					}
					n, err := load.fn(s, `"public"."bench"`, seed)
					if err != nil || n != int64(rows) {
						b.Fatalf("%v: %d rows", err, n)
					}
					if err := tx.Rollback(); err != nil {
						b.Fatal(err)
					}
					conn.Close()
				}
				b.ReportMetric(float64(b.N*rows)/b.Elapsed().Seconds(), "rows/s")
			})
		}
	}
}
