package snowflake_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
)

// BenchmarkLedgeredRunsInParallel: runs of 4 ledgered DML steps each, one
// after another within a run, on the test server at 50 ms per request;
// runs=4 runs four at once, each on its own Warehouse (its own sessions, as
// four processes). Compare ns/op of runs=4 with runs=1: with one fence lock
// for all runs the four serialise from their claims to their commits
// (issue 16); with a fence per run they overlap and the ratio is near 1.
func BenchmarkLedgeredRunsInParallel(b *testing.B) {
	srv := sftest.StartWith(b, sftest.Options{RTT: 50 * time.Millisecond})
	const steps = 4
	for _, runs := range []int{1, 4} {
		b.Run(fmt.Sprintf("runs=%d", runs), func(b *testing.B) {
			whs := make([]*snowflake.Warehouse, runs)
			for k := range whs {
				w, err := snowflake.OpenWarehouse(ctx, srv.DSN("analytics", "public"), snowflake.WarehouseOptions{})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { w.Close() })
				whs[k] = w
			}
			if _, err := whs[0].DB().ExecContext(ctx, "CREATE TABLE IF NOT EXISTS effects (run VARCHAR, step VARCHAR)"); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				// New runs every time: a run whose steps committed already
				// would only read its ledger.
				batch := uuid.NewString()
				var wg sync.WaitGroup
				for k, w := range whs {
					wg.Go(func() {
						run := fmt.Sprintf("%s-%d", batch, k)
						for s := range steps {
							req := engine.StepRequest{RunID: run, StepID: fmt.Sprintf("sql.s%d", s), Kind: plan.KindSQL,
								SQL: fmt.Sprintf("INSERT INTO effects SELECT '%s', 'sql.s%d'", run, s), LogicalAttempt: 1, EngineAttempt: 1, Fence: 1}
							if _, err := w.RunStep(ctx, req); err != nil {
								b.Errorf("%s: %v", run, err)
								return
							}
						}
					})
				}
				wg.Wait()
			}
		})
	}
}
