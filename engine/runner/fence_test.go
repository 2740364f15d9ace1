package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// TestRerunCommittedStepCompletesFromLedger: a step the log shows RUNNING
// whose logical attempt the warehouse's ledger holds is completed with the
// recorded result, and the warehouse never runs it again.
func TestRerunCommittedStepCompletesFromLedger(t *testing.T) {
	h := newHarness(t)
	p := chain([]string{"a", "b"}, map[string][]string{"b": {"a"}})
	started := make(chan string, 1)
	h.wh.set("a", func(ctx context.Context, req engine.StepRequest, call int) (engine.StepResult, error) {
		if req.LogicalAttempt != 1 || req.Fence != 1 || req.EngineAttempt != 1 {
			t.Errorf("request %+v: want logical attempt 1, fence 1, engine attempt 1", req)
		}
		// The work commits in the warehouse; then the runner dies before
		// StepCompleted is stored.
		h.wh.commit(engine.LedgerEntry{RunID: req.RunID, StepID: "a", LogicalAttempt: 1, EngineAttempt: 1, Fence: req.Fence,
			Result: engine.StepResult{RowsAffected: 7, QueryIDs: []string{"q-1"}}, CommittedAt: time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)})
		return blockUntilDone(started)(ctx, req, call)
	})
	runID := h.start(p)
	ctx, crash := context.WithCancel(h.ctx)
	done := h.execAsync(ctx, runID, p)
	recv(t, started)
	crash()
	h.wait(done)

	snap, evs := h.finish(runID, p, h.rn.Resume)
	if snap.Status != engine.StatusCompleted {
		t.Fatalf("run %s", snap.Status)
	}
	if n := len(h.wh.requests("a")); n != 1 {
		t.Fatalf("a ran %d times, want 1: its commit is in the ledger", n)
	}
	var pl struct {
		RowsAffected int64    `json:"rowsAffected"`
		QueryIDs     []string `json:"queryIds"`
		Ledger       *struct {
			EngineAttempt int   `json:"engineAttempt"`
			Fence         int64 `json:"fence"`
		} `json:"ledger"`
	}
	completed := ofType(evs, engine.StepCompleted)
	i := slices.IndexFunc(completed, func(e engine.RunEventRecord) bool { return e.StepID == "a" })
	if i < 0 {
		t.Fatal("no StepCompleted of a")
	}
	if err := json.Unmarshal(completed[i].Payload, &pl); err != nil {
		t.Fatal(err)
	}
	if pl.RowsAffected != 7 || !slices.Equal(pl.QueryIDs, []string{"q-1"}) || pl.Ledger == nil || pl.Ledger.Fence != 1 {
		t.Fatalf("StepCompleted payload %s, want the recorded result and its ledger reference", completed[i].Payload)
	}
}

// TestWarehouseFenceStopsRunner: a warehouse that refuses the step with
// LEASE_LOST (a newer runner committed for the run) stops this runner at
// once; the step's outcome is not recorded.
func TestWarehouseFenceStopsRunner(t *testing.T) {
	h := newHarness(t)
	p := chain([]string{"a", "b"}, map[string][]string{"b": {"a"}})
	h.wh.set("a", func(context.Context, engine.StepRequest, int) (engine.StepResult, error) {
		return engine.StepResult{}, engine.Errorf(engine.CodeLeaseLost, "run has committed work under a newer lease")
	})
	runID := h.start(p)
	_, err := h.rn.Execute(h.ctx, runID, p, h.wh)
	if !errors.Is(err, engine.ErrLeaseLost) {
		t.Fatalf("Execute returned %v, want LEASE_LOST", err)
	}
	if got := types(h.events(runID), "a"); !slices.Equal(got, []engine.EventType{engine.StepStarted}) {
		t.Fatalf("a's events %v, want StepStarted only", got)
	}
	if n := len(h.wh.requests("a")); n != 1 {
		t.Fatalf("a ran %d times: LEASE_LOST is not retried", n)
	}
}

// TestWarehouseUnavailableLeavesRunResumable: a warehouse that fails with
// STORE_UNAVAILABLE (disk full, read-only, gone) stops the run instead of
// failing the step; resume then finishes it.
func TestWarehouseUnavailableLeavesRunResumable(t *testing.T) {
	h := newHarness(t)
	p := chain([]string{"a", "b"}, map[string][]string{"b": {"a"}})
	h.wh.set("a", func(_ context.Context, _ engine.StepRequest, call int) (engine.StepResult, error) {
		if call == 1 {
			return engine.StepResult{}, engine.Errorf(engine.CodeStoreUnavailable, "cannot use the warehouse: disk full")
		}
		return engine.StepResult{RowsAffected: 1}, nil
	})
	runID := h.start(p)
	snap, err := h.rn.Execute(h.ctx, runID, p, h.wh)
	if engine.CodeOf(err) != engine.CodeStoreUnavailable {
		t.Fatalf("Execute returned %v, want STORE_UNAVAILABLE", err)
	}
	if snap.Status != engine.StatusRunning || stepOf(snap, "a").Status != engine.StepStatusRunning {
		t.Fatalf("after the outage: run %s, a %s; want both RUNNING (resumable)", snap.Status, stepOf(snap, "a").Status)
	}
	snap, err = h.rn.Resume(h.ctx, runID, p, h.wh)
	if err != nil {
		t.Fatal(err)
	}
	if snap = checkLog(t, h.events(runID), snap); snap.Status != engine.StatusCompleted {
		t.Fatalf("after resume: %s", snap.Status)
	}
}

// failingRenewals is a log whose lease renewals fail (the store is
// stalled) after the first acquire: its pulses fail too.
type failingRenewals struct {
	*countingLog
	acquired bool
}

func (l *failingRenewals) Pulse(context.Context, string, time.Duration, []engine.PulseRun) (engine.PulseResult, error) {
	return engine.PulseResult{}, engine.MarkTransient(engine.Errorf(engine.CodeStoreUnavailable, "state store is busy"))
}

func (l *failingRenewals) AcquireFencedLease(ctx context.Context, runID, owner string, ttl time.Duration) (engine.Lease, error) {
	if l.acquired {
		return engine.Lease{}, engine.MarkTransient(engine.Errorf(engine.CodeStoreUnavailable, "state store is busy"))
	}
	l.acquired = true
	return l.countingLog.AcquireFencedLease(ctx, runID, owner, ttl)
}

// TestSelfFencingAfterFailedRenewals: when renewals have failed for longer
// than the TTL (by the runner's own clock), the runner starts no step and
// stops with LEASE_LOST, whatever the store would say.
func TestSelfFencingAfterFailedRenewals(t *testing.T) {
	h := newHarness(t)
	h.rn.Log = &failingRenewals{countingLog: h.log}
	h.rn.Config.LeaseTTL = 30 * time.Second
	p := chain([]string{"a", "b"}, map[string][]string{"b": {"a"}})
	release := make(chan struct{})
	started := make(chan string, 1)
	h.wh.set("a", blockUntilReleased(started, release))
	runID := h.start(p)
	done := h.execAsync(h.ctx, runID, p)
	recv(t, started)
	// a's StepStarted is stored (steps do not wait for it) before the
	// clock jumps: what is tested is the lease, not the write budget.
	waitUntil(t, "a's StepStarted stored", func() bool { return len(types(h.events(runID), "a")) == 1 })
	h.clock.Advance(31 * time.Second) // no renewal landed within the TTL
	close(release)
	res := h.wait(done)
	if !errors.Is(res.err, engine.ErrLeaseLost) {
		t.Fatalf("Execute returned %v, want LEASE_LOST", res.err)
	}
	if n := len(h.wh.requests("b")); n != 0 {
		t.Fatal("b started after the lease's deadline passed")
	}
}

// TestLeaseReleasedOnlyWhenTheRunGoesOn: a runner that stored the run's
// end leaves its lease to expire (nobody takes over an ended run, and the
// release would cost a round trip); a runner that stops before the end
// releases it, so that another may take over at once.
func TestLeaseReleasedOnlyWhenTheRunGoesOn(t *testing.T) {
	for _, tc := range []struct {
		name      string
		interrupt bool
		wantHeld  bool
	}{
		{"run ended", false, true},
		{"run interrupted", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			p := chain([]string{"a"}, nil)
			started := make(chan string, 1)
			if tc.interrupt {
				h.wh.set("a", blockUntilDone(started))
			}
			runID := h.start(p)
			ctx, stop := context.WithCancel(h.ctx)
			defer stop()
			done := h.execAsync(ctx, runID, p)
			if tc.interrupt {
				recv(t, started)
				stop()
			}
			res := h.wait(done)
			if (res.err != nil) != tc.interrupt {
				t.Fatalf("Execute returned %v", res.err)
			}
			l, held, err := h.store.GetLease(h.ctx, runID)
			if err != nil {
				t.Fatal(err)
			}
			if held != tc.wantHeld || (held && l.Owner != "runner-a") {
				t.Errorf("after the runner returned the lease is %+v (held %v), want held %v", l, held, tc.wantHeld)
			}
		})
	}
}

// TestLockWaitExceededIsNotRetried: a warehouse whose wait for another
// process's lock ran out of its budget (LockWait.Exceeded) has spent the
// step's whole budget: the runner stops the run resumable at once instead
// of retrying the step into a new wait per engine attempt.
func TestLockWaitExceededIsNotRetried(t *testing.T) {
	h := newHarness(t)
	p := chain([]string{"a"}, nil)
	calls := 0
	h.wh.set("a", func(_ context.Context, _ engine.StepRequest, call int) (engine.StepResult, error) {
		calls = call
		return engine.StepResult{}, engine.LockWait{Resource: "warehouse w.db", Budget: time.Minute, Waited: time.Minute}.Exceeded()
	})
	runID := h.start(p)
	snap, err := h.rn.Execute(h.ctx, runID, p, h.wh)
	if engine.CodeOf(err) != engine.CodeStoreUnavailable || !strings.Contains(err.Error(), "not released within 1m0s") {
		t.Fatalf("Execute returned %v, want the lock wait's STORE_UNAVAILABLE", err)
	}
	if calls != 1 {
		t.Errorf("the warehouse was asked %d times, want once: step retries multiply the lock-wait budget", calls)
	}
	if snap.Status != engine.StatusRunning {
		t.Errorf("the run is %s, want RUNNING (resumable)", snap.Status)
	}
}

// enderWarehouse is a fake warehouse that implements runner.StaleTxEnder
// and records, in order, its calls and the steps it ran.
type enderWarehouse struct {
	*fakeWarehouse
	err   error
	mu    sync.Mutex
	trace []string
}

func (w *enderWarehouse) EndStaleTransactions(_ context.Context, runID string) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.trace = append(w.trace, "end "+runID)
	return 1, w.err
}

func (w *enderWarehouse) RunStep(ctx context.Context, req engine.StepRequest) (engine.StepResult, error) {
	w.mu.Lock()
	w.trace = append(w.trace, "step "+req.StepID)
	w.mu.Unlock()
	return w.fakeWarehouse.RunStep(ctx, req)
}

// TestResumeEndsStaleTransactions: a runner that continues a run it did not
// start ends the transactions the run's dead runner left open before its
// first step, once; a runner that starts a queued run does not; and a
// warehouse that cannot end them does not stop the run (a step meeting the
// lock waits for it, bounded).
func TestResumeEndsStaleTransactions(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"ended", nil},
		{"refused", engine.Errorf(engine.CodeStoreUnavailable, "SHOW LOCKS: insufficient privileges")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			wh := &enderWarehouse{fakeWarehouse: h.wh, err: tc.err}
			p := chain([]string{"a", "b"}, map[string][]string{"b": {"a"}})
			started := make(chan string, 1)
			h.wh.set("a", func(ctx context.Context, req engine.StepRequest, call int) (engine.StepResult, error) {
				if call == 1 {
					return blockUntilDone(started)(ctx, req, call)
				}
				return engine.StepResult{RowsAffected: 1}, nil
			})
			runID := h.start(p)
			ctx, crash := context.WithCancel(h.ctx)
			done := make(chan execResult, 1)
			go func() {
				s, err := h.rn.Execute(ctx, runID, p, wh)
				done <- execResult{s, err}
			}()
			recv(t, started)
			crash()
			h.wait(done)
			wh.mu.Lock()
			first := slices.Clone(wh.trace)
			wh.trace = nil
			wh.mu.Unlock()
			if !slices.Equal(first, []string{"step a"}) {
				t.Fatalf("the runner that started the run: %v, want only step a (nothing to end)", first)
			}

			snap, _ := h.finish(runID, p, func(ctx context.Context, id string, p *plan.Plan, _ engine.Warehouse) (engine.Snapshot, error) {
				return h.rn.Resume(ctx, id, p, wh)
			})
			if snap.Status != engine.StatusCompleted {
				t.Fatalf("resumed run %s", snap.Status)
			}
			wh.mu.Lock()
			defer wh.mu.Unlock()
			if want := []string{"end " + runID, "step a", "step b"}; !slices.Equal(wh.trace, want) {
				t.Fatalf("resume: %v, want %v", wh.trace, want)
			}
		})
	}
}
