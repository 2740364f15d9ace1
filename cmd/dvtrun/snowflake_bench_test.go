package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
)

// BenchmarkShopStoreCost measures what choosing Snowflake as the state
// store costs (issue 11): README's example plan runs with the Snowflake
// store and the Snowflake warehouse, then with the SQLite store and the
// same Snowflake warehouse, on test servers that add a network round trip
// to every HTTP request. Reported per iteration (medians over b.N):
//
//   - ratio: wall time with the Snowflake store / with the SQLite store;
//   - store-req/step: HTTP requests the Snowflake state store served
//     during the run (login included), per executed step;
//   - sf-ms, sqlite-ms: the two wall times.
//
// Run it with: go test -run '^$' -bench ShopStoreCost -benchtime 3x ./cmd/dvtrun/
func BenchmarkShopStoreCost(b *testing.B) {
	plan := filepath.Join(repoRoot(b), "plans", "shop", "plan.yaml")
	b.Chdir(b.TempDir()) // the CLI writes run artifacts under .dvt/ of its directory
	for _, rtt := range []time.Duration{0, 100 * time.Millisecond} {
		b.Run(fmt.Sprintf("rtt=%s", rtt), func(b *testing.B) {
			storeSrv := sftest.StartWith(b, sftest.Options{RTT: rtt})
			whSrv := sftest.StartWith(b, sftest.Options{RTT: rtt})
			storeDSN := storeSrv.DSN("DVT", "PUBLIC")
			ctx := context.Background()
			st, err := snowflake.Open(ctx, storeDSN, snowflake.Options{}) // migrates outside the measurement
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			var ratios, perStep, sfMs, liteMs []float64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				dir := b.TempDir()
				wh := "snowflake://" + whSrv.DSN(fmt.Sprintf("ANALYTICS%d", i), "PUBLIC")
				storeSrv.ResetCounters()
				sf := timeRun(b, ctx, plan, map[string]string{"DVT_STORE": "snowflake://" + storeDSN, "DVT_WAREHOUSE": wh})
				reqs := storeSrv.Requests()
				lite := timeRun(b, ctx, plan, map[string]string{"DVT_STORE": "sqlite:" + filepath.Join(dir, "state.db"), "DVT_WAREHOUSE": wh})
				b.StopTimer()
				steps := executedSteps(b, ctx, st)
				b.StartTimer()
				ratios = append(ratios, float64(sf)/float64(lite))
				perStep = append(perStep, float64(reqs)/float64(steps))
				sfMs = append(sfMs, float64(sf.Milliseconds()))
				liteMs = append(liteMs, float64(lite.Milliseconds()))
			}
			b.ReportMetric(median(ratios), "ratio")
			b.ReportMetric(median(perStep), "store-req/step")
			b.ReportMetric(median(sfMs), "sf-ms")
			b.ReportMetric(median(liteMs), "sqlite-ms")
		})
	}
}

// timeRun runs the plan through the CLI in-process and returns its wall time.
func timeRun(b *testing.B, ctx context.Context, plan string, env map[string]string) time.Duration {
	b.Helper()
	var out, errb bytes.Buffer
	start := time.Now()
	code := run(ctx, []string{"run", plan}, &out, &errb, func(k string) string { return env[k] })
	d := time.Since(start)
	if code != 0 || !strings.Contains(out.String(), "ERROR=0 SKIP=0") {
		b.Fatalf("run with %s: exit %d\n%s\n%s", env["DVT_STORE"], code, out.String(), errb.String())
	}
	return d
}

// executedSteps is the number of steps of the newest run in the store.
func executedSteps(b *testing.B, ctx context.Context, st *snowflake.Store) int {
	b.Helper()
	runs, err := st.ListRuns(ctx, store.RunFilter{Limit: 1})
	if err != nil || len(runs) == 0 {
		b.Fatalf("ListRuns: %v (%d runs)", err, len(runs))
	}
	evs, err := st.ListEvents(ctx, runs[0].RunID, 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	snap := engine.Project(runs[0].RunID, evs)
	if snap.Status != engine.StatusCompleted {
		b.Fatalf("run %s is %s", runs[0].RunID, snap.Status)
	}
	return len(snap.Steps)
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
