package runner_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/runner"
)

// memSpool is an in-memory runner.Spool that counts what it was given. It
// refuses what engine/spool refuses: an event of another run, or one
// lacking its eventId, eventType or idempotencyKey.
type memSpool struct {
	mu      sync.Mutex
	pending map[string][]engine.RunEventWrite
	put     []engine.RunEventWrite // everything ever put
}

func (s *memSpool) Put(runID string, evs []engine.RunEventWrite) error {
	for _, e := range evs {
		if e.RunID != runID || e.EventID == "" || e.EventType == "" || e.IdempotencyKey == "" {
			return engine.Errorf(engine.CodeInvalidArgument, "spool: event %+v is not whole or not of run %s", e, runID)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		s.pending = map[string][]engine.RunEventWrite{}
	}
	s.pending[runID] = append(s.pending[runID], evs...)
	s.put = append(s.put, evs...)
	return nil
}

func (s *memSpool) Pending(runID string) ([]engine.RunEventWrite, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.pending[runID]), nil
}

func (s *memSpool) Clear(runID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pending, runID)
	return nil
}

func (s *memSpool) holds(t engine.EventType, step string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.put, func(e engine.RunEventWrite) bool { return e.EventType == t && e.StepID == step })
}

// holdAppends makes the store hold every append for which match is true
// until release closes or the append's context ends (as a request to a
// stalled store does); held reports each hold.
func holdAppends(l *countingLog, match func([]engine.RunEventWrite) bool) (held <-chan struct{}, release func()) {
	h, rel := make(chan struct{}, 100), make(chan struct{})
	var once sync.Once
	l.hold.Store(&appendHold{match: match, held: h, release: rel})
	return h, func() { once.Do(func() { close(rel) }) }
}

func has(evs []engine.RunEventWrite, t engine.EventType, step string) bool {
	return slices.ContainsFunc(evs, func(e engine.RunEventWrite) bool { return e.EventType == t && e.StepID == step })
}

// checkStartedFirst asserts that each step's StepStarted precedes its
// outcome in runSeq order.
func checkStartedFirst(t *testing.T, evs []engine.RunEventRecord) {
	t.Helper()
	started := map[string]bool{}
	for _, e := range evs {
		switch e.EventType {
		case engine.StepStarted:
			started[e.StepID] = true
		case engine.StepCompleted, engine.StepFailed:
			if !started[e.StepID] {
				t.Errorf("%s of %s (seq %d) comes before its StepStarted", e.EventType, e.StepID, e.RunSeq)
			}
		}
	}
}

// TestStepDoesNotWaitForItsStepStarted: the store holds the append that
// carries b's StepStarted until b's SQL has started. A runner that waited
// for that round trip would never start b.
func TestStepDoesNotWaitForItsStepStarted(t *testing.T) {
	h := newHarness(t)
	h.rn.Config.Threads = 1
	p := chain([]string{"a", "b"}, map[string][]string{"b": {"a"}})
	bStarted := make(chan struct{})
	h.wh.set("b", func(context.Context, engine.StepRequest, int) (engine.StepResult, error) {
		close(bStarted)
		return engine.StepResult{RowsAffected: 1}, nil
	})
	held, release := holdAppends(h.log, func(evs []engine.RunEventWrite) bool { return has(evs, engine.StepStarted, "b") })
	runID := h.start(p)
	done := h.execAsync(h.ctx, runID, p)
	<-held
	select {
	case <-bStarted:
	case <-time.After(10 * time.Second):
		t.Fatal("b's SQL did not start while its StepStarted was being appended")
	}
	release()
	_, evs := h.finished(runID, h.wait(done))
	checkStartedFirst(t, evs)
}

// TestGroupCommit: while one append is in flight, everything the run emits
// waits and goes into the next append, in emission order.
func TestGroupCommit(t *testing.T) {
	h := newHarness(t)
	h.rn.Config.Threads = 4
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	p := chain(ids, nil)
	// The first append (RunStarted and four StepStarted) is held until
	// all four steps have finished: their outcomes and the next four
	// starts pile up behind it.
	var finished sync.WaitGroup
	finished.Add(4)
	for _, id := range ids[:4] {
		h.wh.set(id, func(context.Context, engine.StepRequest, int) (engine.StepResult, error) {
			finished.Done()
			return engine.StepResult{RowsAffected: 1}, nil
		})
	}
	held, release := holdAppends(h.log, func(evs []engine.RunEventWrite) bool { return has(evs, engine.StepStarted, "a") })
	runID := h.start(p)
	done := h.execAsync(h.ctx, runID, p)
	<-held
	finished.Wait()
	// The next four started once the first four's outcomes were handed
	// over (launch follows the hand-over).
	waitUntil(t, "all eight started", func() bool { return len(h.progress.phase(runner.PhaseStepStarted)) == 8 })
	release()
	snap, evs := h.finished(runID, h.wait(done))
	if snap.Status != engine.StatusCompleted {
		t.Fatalf("run %s", snap.Status)
	}
	checkStartedFirst(t, evs)
	// 8 steps emit 16 step events and the run 2; one append per event
	// batch of the loop would be 10 or more.
	h.log.mu.Lock()
	batches := slices.Clone(h.log.batches)
	h.log.mu.Unlock()
	if len(batches) > 5 {
		t.Errorf("%d appends for %d events, want the held ones joined", len(batches), len(evs))
	}
	// What was handed over while the append of a's StepStarted was held
	// (the first four outcomes, the next four starts) went into it, when
	// the writer took it late, or into the next append: never later.
	heldAt := slices.IndexFunc(batches, func(b []engine.RunEventWrite) bool { return has(b, engine.StepStarted, "a") })
	for _, x := range []struct {
		t   engine.EventType
		ids []string
	}{{engine.StepCompleted, ids[:4]}, {engine.StepStarted, ids[4:]}} {
		for _, id := range x.ids {
			at := slices.IndexFunc(batches, func(b []engine.RunEventWrite) bool { return has(b, x.t, id) })
			if at < 0 || at > heldAt+1 {
				t.Errorf("%s of %s went into append %d, want the held append %d or the next", x.t, id, at, heldAt)
			}
		}
	}
}

// TestSlowStoreSpoolsStepStarted: the store takes longer than the budget
// for the run's first append (a store warehouse resuming from suspend):
// RunStarted and the StepStarted fail open into the spool, the step runs
// meanwhile, and once the store answers again they land, in order, before
// the step's StepCompleted; the spool is cleared.
func TestSlowStoreSpoolsStepStarted(t *testing.T) {
	h := newHarness(t)
	// The held append ends each time its context's budget (real time)
	// runs out and is tried again; only the test's Advance makes the
	// events overdue, so a's StepCompleted never is however slow the
	// machine (it cannot fail open, and would stop the run). The budget
	// is the default 3s: the run's closing flush has twice that, in real
	// time, to store what is left (200ms ran out under -race and load).
	h.clock.onlyAdvanced()
	sp := &memSpool{}
	h.rn.Spool = sp
	h.rn.Config.WriteBudget = 3 * time.Second
	h.rn.Config.LeaseTTL = time.Hour // the clock jumps past the budget, not past the lease
	p := chain([]string{"a"}, nil)
	h.wh.set("a", func(context.Context, engine.StepRequest, int) (engine.StepResult, error) {
		waitUntil(t, "a's StepStarted spooled", func() bool { return sp.holds(engine.StepStarted, "a") })
		return engine.StepResult{RowsAffected: 1}, nil
	})
	held, release := holdAppends(h.log, func(evs []engine.RunEventWrite) bool { return has(evs, engine.StepStarted, "a") })
	runID := h.start(p)
	done := h.execAsync(h.ctx, runID, p)
	<-held
	h.clock.Advance(time.Minute) // the budget passed
	waitUntil(t, "a's StepStarted spooled", func() bool { return sp.holds(engine.StepStarted, "a") })
	release()
	snap, evs := h.finished(runID, h.wait(done))
	if snap.Status != engine.StatusCompleted {
		t.Fatalf("run %s", snap.Status)
	}
	checkStartedFirst(t, evs)
	// The spool is a prefix of what the run emitted: its events landed in
	// the order they were put.
	seq := map[string]int64{}
	for _, e := range evs {
		seq[e.IdempotencyKey] = e.RunSeq
	}
	sp.mu.Lock()
	put := slices.Clone(sp.put)
	sp.mu.Unlock()
	for i := 1; i < len(put); i++ {
		if seq[put[i-1].IdempotencyKey] >= seq[put[i].IdempotencyKey] {
			t.Errorf("spooled %s landed at seq %d, after the next spooled %s at %d", put[i-1].EventType, seq[put[i-1].IdempotencyKey], put[i].EventType, seq[put[i].IdempotencyKey])
		}
	}
	if left, _ := sp.Pending(runID); len(left) != 0 {
		t.Errorf("%d events left in the spool after they were stored", len(left))
	}
}

// TestStoreGoneStopsResumable: the store is away from the run's start for
// longer than the budget. RunStarted and a's StepStarted fail open into
// the spool and a runs (its work commits with a ledger row); a's outcome
// cannot fail open, so the run stops with STORE_UNAVAILABLE, resumable.
// Once the store is back, a resume appends the spool first, completes a
// from the ledger without running it again, and finishes the run with
// every idempotency key once.
func TestStoreGoneStopsResumable(t *testing.T) {
	h := newHarness(t)
	sp := &memSpool{}
	h.rn.Spool = sp
	h.rn.Config.Threads = 1
	h.rn.Config.WriteBudget = 200 * time.Millisecond
	p := chain([]string{"a", "b"}, map[string][]string{"b": {"a"}})
	h.wh.set("a", func(_ context.Context, req engine.StepRequest, _ int) (engine.StepResult, error) {
		waitUntil(t, "a's StepStarted spooled", func() bool { return sp.holds(engine.StepStarted, "a") })
		res := engine.StepResult{RowsAffected: 7}
		h.wh.commit(engine.LedgerEntry{RunID: req.RunID, StepID: "a", LogicalAttempt: 1, EngineAttempt: 1, Fence: req.Fence, Result: res})
		return res, nil
	})
	runID := h.start(p)
	h.log.down.Store(true)
	snap, err := h.rn.Execute(h.ctx, runID, p, h.wh)
	if engine.CodeOf(err) != engine.CodeStoreUnavailable {
		t.Fatalf("Execute returned %v, want STORE_UNAVAILABLE", err)
	}
	if snap.Status != engine.StatusQueued {
		t.Errorf("snapshot after the failure: %s, want the log's QUEUED", snap.Status)
	}
	if sp.holds(engine.StepCompleted, "a") {
		t.Error("a's outcome went to the spool: outcomes never fail open")
	}
	if n := len(h.events(runID)); n != 1 {
		t.Fatalf("%d events stored while the store was down", n)
	}

	h.log.down.Store(false)
	snap, evs := h.finish(runID, p, h.rn.Resume)
	if snap.Status != engine.StatusCompleted {
		t.Fatalf("resumed run %s", snap.Status)
	}
	checkStartedFirst(t, evs)
	if left, _ := sp.Pending(runID); len(left) != 0 {
		t.Errorf("%d events left in the spool after the resume", len(left))
	}
	for _, id := range []string{"a", "b"} {
		if got := types(evs, id); !slices.Equal(got, []engine.EventType{engine.StepStarted, engine.StepCompleted}) {
			t.Errorf("%s's events %v", id, got)
		}
	}
	if n := len(h.wh.requests("a")); n != 1 {
		t.Errorf("a ran %d times, want once (the resume finds it in the ledger)", n)
	}
	done := ofType(evs, engine.StepCompleted)
	if len(done) == 0 || done[0].StepID != "a" || payloadOf(t, done[0])["rowsAffected"] != float64(7) {
		t.Errorf("a's StepCompleted %v, want the ledger's result (7 rows)", done)
	}
}
