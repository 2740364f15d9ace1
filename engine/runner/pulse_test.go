package runner_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/pulse"
	"github.com/dvtrun/dvtrun/engine/service/servicetest"
)

// pulseLog counts what a process asks of the store for its leases and
// signals: Pulse calls (with the runs each carried), lease acquires and
// signal reads.
type pulseLog struct {
	*countingLog
	mu       sync.Mutex
	pulses   [][]string
	acquires int
	reads    int
}

func (l *pulseLog) Pulse(ctx context.Context, owner string, ttl time.Duration, runs []engine.PulseRun) (engine.PulseResult, error) {
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.RunID
	}
	slices.Sort(ids)
	l.mu.Lock()
	l.pulses = append(l.pulses, ids)
	l.mu.Unlock()
	return l.countingLog.Pulse(ctx, owner, ttl, runs)
}

func (l *pulseLog) AcquireFencedLease(ctx context.Context, runID, owner string, ttl time.Duration) (engine.Lease, error) {
	l.mu.Lock()
	l.acquires++
	l.mu.Unlock()
	return l.countingLog.AcquireFencedLease(ctx, runID, owner, ttl)
}

func (l *pulseLog) ListSignals(ctx context.Context, runID string, after int64) ([]engine.Signal, error) {
	l.mu.Lock()
	l.reads++
	l.mu.Unlock()
	return l.countingLog.ListSignals(ctx, runID, after)
}

// waitPulses waits (bounded) until the process has pulsed n more times:
// each pulse wakes the run's loop, which schedules steps at every round, so
// a step that should not start would have started by then.
func waitPulses(t *testing.T, l *pulseLog, n int) {
	t.Helper()
	from := len(l.calls())
	waitUntil(t, fmt.Sprintf("%d more pulses", n), func() bool { return len(l.calls()) >= from+n })
}

func (l *pulseLog) calls() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.pulses)
}

// TestRunsShareOnePulse: two runs executing in one process share its
// pulse: while both run, each interval costs ONE store Pulse call carrying
// both, no run reads its signals or renews its lease itself, and both
// handle their signals (one is paused and resumed, the other cancelled).
func TestRunsShareOnePulse(t *testing.T) {
	h := newHarness(t)
	log := &pulseLog{countingLog: h.log}
	h.rn.Log = log
	tick := servicetest.NewTicker()
	pl, err := pulse.New(pulse.Options{Store: log, Owner: "proc-1", TTL: time.Hour, Interval: time.Second, Clock: h.clock, Sleep: tick.Sleep})
	if err != nil {
		t.Fatal(err)
	}
	if err := pl.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	defer pl.Stop()
	h.rn.Pulse = pl
	h.rn.Config.Threads = 1

	p1 := chain([]string{"a", "b"}, nil)
	p2 := chain([]string{"x", "y"}, nil)
	p2.PlanID = "q"
	started := make(chan string, 2)
	release := make(chan struct{})
	h.wh.set("a", blockUntilReleased(started, release))
	h.wh.set("x", blockUntilDone(started))
	run1, run2 := h.start(p1), h.start(p2)
	done1 := h.execAsync(h.ctx, run1, p1)
	done2 := h.execAsync(h.ctx, run2, p2)
	for range 2 {
		recv(t, started)
	}
	both := []string{run1, run2}
	slices.Sort(both)
	beat := func() {
		t.Helper()
		n := len(log.calls())
		tick.Tick(t)
		waitUntil(t, "the pulse's call", func() bool { return len(log.calls()) > n })
	}
	beat() // both joined before this call was made
	before := len(log.calls())
	h.signal(run1, engine.SignalPause, "")
	h.signal(run2, engine.SignalCancel, "")
	beat()
	waitUntil(t, "run 1 PAUSED", func() bool { return h.status(run1).Status == engine.StatusPaused })
	res2 := h.wait(done2)
	if res2.err != nil || res2.snap.Status != engine.StatusCancelled {
		t.Fatalf("run 2 ended %s, %v; want CANCELLED", res2.snap.Status, res2.err)
	}
	if calls := log.calls(); len(calls) != before+1 || !slices.Equal(calls[before], both) {
		t.Fatalf("calls after the signals %v, want one carrying both runs %v", calls[before-1:], both)
	}
	// Run 2 left: the next calls carry run 1 alone.
	close(release)
	waitUntil(t, "a drained", func() bool { return stepOf(h.status(run1), "a").Status == engine.StepStatusSuccess })
	h.signal(run1, engine.SignalResume, "")
	n := len(log.calls())
	beat()
	snap, evs := h.finished(run1, h.wait(done1))
	if snap.Status != engine.StatusCompleted || len(ofType(evs, engine.RunResumed)) != 1 {
		t.Fatalf("run 1 %s, events %v", snap.Status, evTypes(evs))
	}
	if c := log.calls()[n]; !slices.Equal(c, []string{run1}) {
		t.Errorf("after run 2 ended the call carried %v, want run 1 alone", c)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if log.reads != 0 || log.acquires != 2 {
		t.Errorf("the runs read their signals %d times and acquired leases %d times; want 0 and one acquire each", log.reads, log.acquires)
	}
	for _, id := range both {
		rs := ofType(h.events(id), engine.RunStarted)
		if len(rs) != 1 || payloadOf(t, rs[0])["owner"] != "proc-1" {
			t.Errorf("run %s was not started by the pulse's owner: %v", id, rs)
		}
	}
}

// TestStalledPulseSelfFences: a run whose pulse never beats (its store
// calls hang, or it was never started) starts no step and, once its lease's
// TTL has passed by its own clock, stops with LEASE_LOST instead of waiting
// for the pulse forever.
func TestStalledPulseSelfFences(t *testing.T) {
	h := newHarness(t)
	h.rn.Config.LeaseTTL = 30 * time.Second
	pl, err := pulse.New(pulse.Options{Store: h.log, Owner: "proc-1", TTL: 30 * time.Second, Clock: h.clock})
	if err != nil {
		t.Fatal(err)
	}
	h.rn.Pulse = pl // never started
	p := chain([]string{"a"}, nil)
	runID := h.start(p)
	done := h.execAsync(h.ctx, runID, p)
	waitUntil(t, "the run started", func() bool { return len(ofType(h.events(runID), engine.RunStarted)) == 1 })
	h.clock.Advance(31 * time.Second)
	if res := h.wait(done); engine.CodeOf(res.err) != engine.CodeLeaseLost {
		t.Fatalf("Execute returned %v, want LEASE_LOST", res.err)
	}
	if n := len(h.wh.requests("a")); n != 0 {
		t.Fatalf("a ran %d times without a pulse", n)
	}
}
