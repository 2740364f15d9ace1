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
	started   []string
	executed  map[string][]bool // runID -> resume flags
	block     bool              // Execute waits for ctx
	leaseHeld int               // Execute answers LEASE_HELD this many times first
}

func (f *fakeExec) Start(_ context.Context, r queue.Request) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started = append(f.started, r.RequestID)
	return "run-" + r.RunRequestID, nil
}

func (f *fakeExec) Execute(ctx context.Context, _ queue.Request, runID string, resume bool) (engine.RunStatus, error) {
	f.mu.Lock()
	if f.executed == nil {
		f.executed = map[string][]bool{}
	}
	f.executed[runID] = append(f.executed[runID], resume)
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
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "state.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
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
		Metrics: &worker.Counters{}}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	waitFor(t, "5 requests done", func() bool { return states(t, st)[queue.StateDone] == 5 })
	w.Stop()
	w.Stop() // double stop
	list, _ := st.ListRequests(ctx, true)
	for _, r := range list {
		if r.Outcome != "COMPLETED" || r.RunID != "run-"+r.RunRequestID {
			t.Fatalf("request %+v", r)
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
	waitFor(t, "the run to start", func() bool {
		got, _ := st.GetRequest(ctx, r.RequestID)
		return got.State == queue.StateRunning
	})
	w1.Stop()
	got, _ := st.GetRequest(ctx, r.RequestID)
	if got.State != queue.StateRunning || got.Owner != "" || got.RunID != "run-long" {
		t.Fatalf("after stop: %+v", got)
	}
	ex := &fakeExec{leaseHeld: 2}
	w2 := newWorker(st, ex, "w2")
	if err := w2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	waitFor(t, "the takeover to finish", func() bool {
		got, _ := st.GetRequest(ctx, r.RequestID)
		return got.State == queue.StateDone
	})
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if len(ex.started) != 0 {
		t.Fatalf("the takeover started a new run: %v", ex.started)
	}
	if flags := ex.executed["run-long"]; len(flags) != 3 || !flags[0] || !flags[2] {
		t.Fatalf("resume calls %v, want 3 resumes (2 refused by the lease)", flags)
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
	waitFor(t, "the takeover", func() bool {
		got, _ := st.GetRequest(ctx, r.RequestID)
		return got.State == queue.StateDone && got.Owner == "heir"
	})
	if flags := ex.executed["run-orphan"]; len(flags) != 1 || !flags[0] {
		t.Fatalf("executions %v", ex.executed)
	}
}
