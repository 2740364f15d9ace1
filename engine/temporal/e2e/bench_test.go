package e2e

import (
	"fmt"
	"testing"
	"time"

	"go.temporal.io/server/temporaltest"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/runner"
	dvtemporal "github.com/dvtrun/dvtrun/engine/temporal"
)

// widePlan is n independent-in-chains sql steps (chains of 10), cheap in
// the warehouse, so the engine's own cost per step shows.
func widePlan(n int) *plan.Plan {
	p := &plan.Plan{PlanID: "bench", PlanVersion: "1", SchemaVersion: "1"}
	for i := range n {
		s := plan.Step{ID: fmt.Sprintf("sql.s%04d", i), Kind: plan.KindSQL, SQL: "SELECT 1"}
		if i%10 != 0 {
			s.DependsOn = []string{fmt.Sprintf("sql.s%04d", i-1)}
		}
		p.Steps = append(p.Steps, s)
	}
	return p
}

// BenchmarkStepsPerSecond runs the same 200-step plan on the same kind of
// store and warehouse (SQLite files) with 4 threads on the local runner
// and on the Temporal adapter against the in-process server; it reports
// steps/s and the engine's time per step.
func BenchmarkStepsPerSecond(b *testing.B) {
	const n = 200
	p := widePlan(n)
	queues := 0
	ts := temporaltest.NewServer()
	defer ts.Stop()
	report := func(b *testing.B, d time.Duration) {
		b.ReportMetric(float64(n*b.N)/d.Seconds(), "steps/s")
		b.ReportMetric(float64(d.Microseconds())/float64(n*b.N), "µs/step")
	}
	b.Run("local", func(b *testing.B) {
		var total time.Duration
		for range b.N {
			e := newEnv(b, ts, nil)
			runID := e.start(p)
			rn := &runner.Runner{Log: e.store, Clock: wallClock, IDs: uuids{}, Config: runner.Config{Config: cfg, Threads: 4, Owner: "bench"}}
			start := time.Now()
			snap, err := rn.Execute(e.ctx, runID, p, e.wh)
			total += time.Since(start)
			if err != nil || snap.Status != engine.StatusCompleted {
				b.Fatalf("local: %s %v", snap.Status, err)
			}
		}
		report(b, total)
	})
	b.Run("temporal", func(b *testing.B) {
		var total time.Duration
		for range b.N {
			e := newEnv(b, ts, nil)
			// A queue per run: the workers of earlier rounds (whose
			// stores are closed) still poll theirs.
			queues++
			q := fmt.Sprintf("bench-%d", queues)
			e.worker(q, p)
			runID := e.start(p)
			start := time.Now()
			r := e.run(q, dvtemporal.Input{RunID: runID, Threads: 4})
			if err := e.wait(r, 10*time.Minute); err != nil {
				b.Fatal(err)
			}
			total += time.Since(start)
			if s := engine.Project(runID, e.events(runID)); s.Status != engine.StatusCompleted {
				b.Fatalf("temporal: %s", s.Status)
			}
		}
		report(b, total)
	})
}
