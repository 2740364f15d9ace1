package worker_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/queue"
	"github.com/dvtrun/dvtrun/engine/service/servicetest"
	"github.com/dvtrun/dvtrun/engine/worker"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

var ctx = context.Background()

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fakeExec records what the worker asked of it.
type fakeExec struct {
	mu        sync.Mutex
	runs      map[string]int // runID -> Run calls
	block     bool           // Run waits for ctx
	leaseHeld int            // Run answers LEASE_HELD this many times first
	refuse    bool
}

func (f *fakeExec) Run(ctx context.Context, _ queue.Request, runID string) (engine.RunStatus, error) {
	f.mu.Lock()
	if f.runs == nil {
		f.runs = map[string]int{}
	}
	f.runs[runID]++
	if f.refuse {
		f.mu.Unlock()
		return "", engine.Errorf(engine.CodePlanHashMismatch, "changed")
	}
	if f.leaseHeld > 0 {
		f.leaseHeld--
		f.mu.Unlock()
		return "", engine.Errorf(engine.CodeLeaseHeld, "held")
	}
	block := f.block
	f.mu.Unlock()
	if block {
		<-ctx.Done()
		return engine.StatusRunning, ctx.Err()
	}
	return engine.StatusCompleted, nil
}

func setup(t *testing.T) (*sqlite.Store, *queue.Queue) {
	t.Helper()
	st := servicetest.OpenSQLite(t, filepath.Join(t.TempDir(), "state.db"))
	return st, &queue.Queue{Store: st, IDs: engine.IDFunc(uuid.NewString)}
}

func enqueue(t *testing.T, q *queue.Queue, id string) queue.Request {
	t.Helper()
	r, _, err := q.Enqueue(ctx, queue.Request{TenantID: "a", ProjectID: "p", EnvironmentID: "e", PlanID: "shop", PlanVersion: "1",
		RunRequestID: id, PlanPath: "plan.yaml", PlanSHA256: "ab"})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func newWorker(st *sqlite.Store, ex worker.Executor, id string) *worker.Worker {
	return &worker.Worker{Store: st, Exec: ex, ID: id, Slots: 2, HeartbeatTTL: time.Second, Poll: 20 * time.Millisecond,
		Grace: 200 * time.Millisecond, LeaseRetry: 20 * time.Millisecond, Clock: engine.ClockFunc(time.Now), Sleep: sleep,
		IDs:     engine.IDFunc(uuid.NewString),
		Metrics: &worker.Counters{}}
}

func states(t *testing.T, st *sqlite.Store) map[queue.State]int {
	t.Helper()
	list, err := st.ListRequests(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	out := map[queue.State]int{}
	for _, r := range list {
		out[r.State]++
	}
	return out
}

func TestWorkerRunsRequests(t *testing.T) {
	st, q := setup(t)
	for i := range 5 {
		enqueue(t, q, fmt.Sprint("r", i))
	}
	ex := &fakeExec{}
	w := newWorker(st, ex, "w1")
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	servicetest.WaitFor(t, "5 requests done", func() bool { return states(t, st)[queue.StateDone] == 5 })
	w.Stop()
	w.Stop() // double stop
	list, _ := st.ListRequests(ctx, true)
	for _, r := range list {
		if r.Outcome != "COMPLETED" || r.RunID == "" || ex.runs[r.RunID] != 1 {
			t.Fatalf("request %+v, runs %v", r, ex.runs)
		}
	}
	if m := w.Metrics.Snapshot(); m.Claims != 5 || m.Completed != 5 || m.Takeovers != 0 {
		t.Fatalf("metrics %+v", m)
	}
}

// Stop lets the grace period pass, interrupts the run, hands the request
// back and retires: another worker takes it over at once and resumes it.
func TestWorkerStopHandsBackAndAnotherResumes(t *testing.T) {
	st, q := setup(t)
	r := enqueue(t, q, "long")
	blocking := &fakeExec{block: true}
	w1 := newWorker(st, blocking, "w1")
	if err := w1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	servicetest.WaitFor(t, "the run to start", func() bool {
		got, _ := st.GetRequest(ctx, r.RequestID)
		return got.State == queue.StateRunning
	})
	w1.Stop()
	got, _ := st.GetRequest(ctx, r.RequestID)
	if got.State != queue.StateRunning || got.Owner != "" || got.RunID == "" {
		t.Fatalf("after stop: %+v", got)
	}
	ex := &fakeExec{leaseHeld: 2}
	w2 := newWorker(st, ex, "w2")
	if err := w2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	servicetest.WaitFor(t, "the takeover to finish", func() bool {
		got, _ := st.GetRequest(ctx, r.RequestID)
		return got.State == queue.StateDone
	})
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if len(ex.runs) != 1 || ex.runs[got.RunID] != 3 {
		t.Fatalf("runs %v, want run %s 3 times (2 refused by the lease)", ex.runs, got.RunID)
	}
	if done, _ := st.GetRequest(ctx, r.RequestID); done.RunID != got.RunID || done.Attempts != 2 {
		t.Fatalf("after the takeover: %+v", done)
	}
	if m := w2.Metrics.Snapshot(); m.Takeovers != 1 || m.Completed != 1 {
		t.Fatalf("metrics %+v", m)
	}
}

// A worker that dies (no Stop, heartbeat left to expire) loses its claim.
func TestTakeoverAfterHeartbeatExpiry(t *testing.T) {
	st, q := setup(t)
	r := enqueue(t, q, "orphan")
	if _, ok, err := st.ClaimRequest(ctx, "dead", time.Second, queue.ClaimLimits{}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := st.SetRequestRun(ctx, r.RequestID, "dead", "run-orphan"); err != nil {
		t.Fatal(err)
	}
	ex := &fakeExec{}
	w := newWorker(st, ex, "heir")
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	servicetest.WaitFor(t, "the takeover", func() bool {
		got, _ := st.GetRequest(ctx, r.RequestID)
		return got.State == queue.StateDone && got.Owner == "heir"
	})
	if len(ex.runs) != 1 || ex.runs["run-orphan"] != 1 {
		t.Fatalf("runs %v", ex.runs)
	}
}

func TestRefusedRequestIsFinished(t *testing.T) {
	st, q := setup(t)
	r := enqueue(t, q, "changed-plan")
	w := newWorker(st, &fakeExec{refuse: true}, "w1")
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	servicetest.WaitFor(t, "the refusal", func() bool {
		got, _ := st.GetRequest(ctx, r.RequestID)
		return got.State == queue.StateDone && got.Outcome == "REFUSED:PLAN_HASH_MISMATCH"
	})
}
