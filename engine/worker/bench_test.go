package worker_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/queue"
	"github.com/dvtrun/dvtrun/engine/service/servicetest"
	"github.com/dvtrun/dvtrun/engine/worker"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

// startExec starts each request's run for real (engine.Engine.StartRun
// bootstraps it in the store) and reports it COMPLETED without running
// steps: the benchmark measures the queue's side, claim to started run.
type startExec struct {
	eng  *engine.Engine
	plan *plan.Plan
}

func (x *startExec) Run(ctx context.Context, r queue.Request, runID string) (engine.RunStatus, error) {
	if _, err := x.eng.StartRun(ctx, engine.StartRequest{Plan: x.plan, RunRequestID: r.RunRequestID, RunID: runID}); err != nil {
		return "", err
	}
	return engine.StatusCompleted, nil
}

// BenchmarkTwoWorkersClaimAndStart: requests claimed and started per
// second by two workers (two store handles, two slots each) on one SQLite
// file. Compare with engine/runner's BenchmarkRunner2000Steps (steps/s).
func BenchmarkTwoWorkersClaimAndStart(b *testing.B) {
	path := filepath.Join(b.TempDir(), "state.db")
	open := func() *sqlite.Store {
		return servicetest.OpenSQLite(b, path)
	}
	st := open()
	benchPlan, err := plan.Parse([]byte("planId: bench\nplanVersion: \"1\"\nsteps:\n  - {id: model.a, kind: model, sql: select 1}\n"), "bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	q := &queue.Queue{Store: st, IDs: engine.IDFunc(uuid.NewString)}
	for i := range b.N {
		if _, _, err := q.Enqueue(ctx, queue.Request{TenantID: "a", ProjectID: "p", EnvironmentID: "e", PlanID: "bench", PlanVersion: "1",
			RunRequestID: fmt.Sprint("bench-", i), PlanPath: "bench.yaml", PlanSHA256: "ab"}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	var workers []*worker.Worker
	for i := range 2 {
		ws := open()
		eng := &engine.Engine{Log: ws, Clock: engine.ClockFunc(time.Now), IDs: engine.IDFunc(uuid.NewString),
			Config: engine.Config{TenantID: "a", ProjectID: "p", EnvironmentID: "e"}}
		w := newWorker(ws, &startExec{eng: eng, plan: benchPlan}, fmt.Sprint("bench-", i))
		w.Poll = 5 * time.Millisecond
		w.HeartbeatTTL = 30 * time.Second
		if err := w.Start(ctx); err != nil {
			b.Fatal(err)
		}
		workers = append(workers, w)
	}
	for {
		list, err := st.ListRequests(ctx, false)
		if err != nil {
			b.Fatal(err)
		}
		if len(list) == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.StopTimer()
	for _, w := range workers {
		w.Stop()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s")
	var claims int64
	for _, w := range workers {
		claims += w.Metrics.Snapshot().Claims
	}
	if claims != int64(b.N) {
		b.Fatalf("%d claims for %d requests", claims, b.N)
	}
}
