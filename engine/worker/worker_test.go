package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/queue"
	"github.com/dvtrun/dvtrun/engine/service/servicetest"
	"github.com/dvtrun/dvtrun/engine/wake"
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

// syncBuffer is a log destination the worker's goroutines share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// claimLogs are the worker's "claimed" log records.
func (s *syncBuffer) claimLogs(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for line := range strings.Lines(s.b.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == "claimed" {
			out = append(out, rec)
		}
	}
	return out
}

// A worker that dies (no Stop, heartbeat left to expire) loses its claim,
// and the claim that takes it says so (log "takeover": true, the
// takeovers metric) whether or not the dead worker recorded the run's id
// first; a request handed back before its run was recorded is PENDING
// again, and claiming it is no takeover.
func TestTakeoverAfterHeartbeatExpiry(t *testing.T) {
	cases := []struct {
		name     string
		prev     func(t *testing.T, st *sqlite.Store, id string) // the previous owner's doing
		takeover bool
		attempt  float64
		runID    string // the run the heir runs; "" for a fresh one
	}{
		{"fresh request", func(*testing.T, *sqlite.Store, string) {}, false, 1, ""},
		{"dead before recording the run id", func(t *testing.T, st *sqlite.Store, _ string) {}, true, 2, ""},
		{"dead after recording the run id", func(t *testing.T, st *sqlite.Store, id string) {
			if err := st.SetRequestRun(ctx, id, "dead", "run-orphan"); err != nil {
				t.Fatal(err)
			}
		}, true, 2, "run-orphan"},
		{"handed back before its run", func(t *testing.T, st *sqlite.Store, id string) {
			if err := st.ReleaseRequest(ctx, id, "dead"); err != nil {
				t.Fatal(err)
			}
		}, false, 2, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, q := setup(t)
			r := enqueue(t, q, "orphan")
			if c.attempt > 1 {
				if _, ok, err := st.ClaimRequest(ctx, "dead", time.Second, queue.ClaimLimits{}); !ok || err != nil {
					t.Fatal(ok, err)
				}
			}
			c.prev(t, st, r.RequestID)
			ex := &fakeExec{}
			w := newWorker(st, ex, "heir")
			var logs syncBuffer
			w.Log = slog.New(slog.NewJSONHandler(&logs, nil))
			if err := w.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			servicetest.WaitFor(t, "the heir to finish the request", func() bool {
				got, _ := st.GetRequest(ctx, r.RequestID)
				return got.State == queue.StateDone && got.Owner == "heir"
			})
			ex.mu.Lock()
			defer ex.mu.Unlock()
			if len(ex.runs) != 1 || c.runID != "" && ex.runs[c.runID] != 1 {
				t.Fatalf("runs %v, want one run (%q)", ex.runs, c.runID)
			}
			claims := logs.claimLogs(t)
			if len(claims) != 1 || claims[0]["takeover"] != c.takeover || claims[0]["attempt"] != c.attempt {
				t.Fatalf("claim log %v, want one with takeover %v, attempt %v", claims, c.takeover, c.attempt)
			}
			want := int64(0)
			if c.takeover {
				want = 1
			}
			if m := w.Metrics.Snapshot(); m.Takeovers != want {
				t.Fatalf("takeovers metric %d, want %d", m.Takeovers, want)
			}
		})
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

// TestWorkerWokenBeforeItsPoll: with wake-ups a worker claims a new request
// when woken, long before its poll interval (an hour here) would have it
// look again.
func TestWorkerWokenBeforeItsPoll(t *testing.T) {
	st, q := setup(t)
	hub := &wake.Hub{}
	w := newWorker(st, &fakeExec{}, "w1")
	w.Poll, w.Wakeups = time.Hour, hub
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// Let the worker find the queue empty and start its pause.
	servicetest.WaitFor(t, "a first claim attempt", func() bool { return w.Metrics.Snapshot().Heartbeats > 0 })
	time.Sleep(50 * time.Millisecond)
	r := enqueue(t, q, "woken")
	servicetest.WaitFor(t, "the request done after a wake-up", func() bool {
		hub.Publish(wake.Queue, r.RequestID) // the store's NOTIFY, until the worker subscribed
		return states(t, st)[queue.StateDone] == 1
	})
}
