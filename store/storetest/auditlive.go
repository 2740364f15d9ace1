package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/audit"
)

// LiveVerifications is how many times testVerifyLive verifies while the
// store is written to.
const LiveVerifications = 30

// testVerifyLive verifies a store again and again while runs are started,
// appended to and ended and a checkpointer indexes and signs beside it, as
// `audit verify --all` from cron beside serve: no verification may report a
// break (an append between two of its reads is not one), and a tamper made
// under the same load is still found.
//
// Without snapshot the same must hold by the order of verify's reads
// (Snowflake's case, tried on every backend by hiding its snapshots).
func testVerifyLive(t *testing.T, b AuditBackend, snapshot bool) {
	st := b.Fresh(t)
	f := SeedAudit(t, st)
	var s AuditStore = st // what is verified
	if !snapshot {
		s = noSnapshot{st}
	}
	stop, pause := load(t, st)
	o := audit.VerifyOptions{PublicKey: TestPublicKey, External: f.Checkpoint.Note}
	var breaks []string
	var seen int64 // the most runs a verification saw
	passes := 0    // verifications that read the store more than once
	var newRuns, appended int64
	for range LiveVerifications {
		rep := verify(t, s, o)
		if rep.Problem != nil {
			breaks = append(breaks, rep.Problem.Error())
		}
		seen = max(seen, rep.Runs)
		if rep.Passes > 1 {
			passes++
		}
		newRuns, appended = newRuns+rep.NewRuns, appended+rep.Appended
	}
	t.Logf("%d of %d verifications read the store more than once (a problem in the first pass, not found again); %d runs and %d events appended while they read", passes, LiveVerifications, newRuns, appended)
	if len(breaks) > 0 {
		t.Errorf("%d of %d verifications under load reported a break in an untouched store; the first: %s", len(breaks), LiveVerifications, breaks[0])
	}
	// The load must have written while it was verified: a verification
	// saw more than the seed's three runs.
	if seen <= 3 {
		t.Errorf("the verifications saw at most %d runs: the load wrote nothing while verifying", seen)
	}
	// A chained event forged after A's terminal event, under the same load.
	// The writers wait while it is made: an SQLite DDL statement (the
	// tamper drops the guard triggers) cannot wait out a concurrent commit.
	resume := pause()
	b.Tamper(t, st, forgeEvent(t, st, f.A)...)
	resume()
	for i := range 3 {
		if rep := verify(t, s, o); rep.Problem == nil || rep.Problem.RunID != f.A {
			t.Errorf("verification %d under load after a forged event in %s: %v, want the forged event named (%+v)", i+1, f.A, rep.Problem, rep)
		}
	}
	stop()
}

// noSnapshot is a store whose reads are not one snapshot: it hides the
// backend's audit.Snapshotter.
type noSnapshot struct{ AuditStore }

// flaky is a store whose global log loses its last entry on the reads
// listed in short (1 is the first): a race that shows once, or a break
// that stays.
type flaky struct {
	noSnapshot
	short map[int]bool
	reads int
}

func (f *flaky) LogEntries(ctx context.Context, from int64) ([]audit.LogEntry, error) {
	e, err := f.noSnapshot.LogEntries(ctx, from)
	f.reads++
	if f.short[f.reads] && len(e) > 0 {
		e = e[:len(e)-1]
	}
	return e, err
}

// testVerifyPasses checks the rule of verify without a snapshot: a clean
// pass is clean, a problem is reported when two passes find it.
func testVerifyPasses(t *testing.T, b AuditBackend) {
	s := b.Fresh(t)
	SeedAudit(t, s)
	o := audit.VerifyOptions{PublicKey: TestPublicKey}
	if rep := verify(t, &flaky{noSnapshot: noSnapshot{s}, short: map[int]bool{1: true}}, o); rep.Problem != nil || rep.Passes != 2 || rep.Snapshot {
		t.Errorf("a log short once: %v after %d passes, want clean after 2", rep.Problem, rep.Passes)
	}
	rep := verify(t, &flaky{noSnapshot: noSnapshot{s}, short: map[int]bool{1: true, 2: true, 3: true}}, o)
	if rep.Problem == nil || rep.Passes != 2 || !strings.Contains(rep.Problem.What, "events were removed") {
		t.Errorf("a log short every time: %v after %d passes, want its problem after 2", rep.Problem, rep.Passes)
	}
	if rep := verify(t, s, o); rep.Problem != nil || rep.Passes != 1 {
		t.Errorf("the store itself: %v after %d passes, want clean after 1", rep.Problem, rep.Passes)
	}
}

// load starts the writers of a live store: runs bootstrapped, appended to
// one event at a time and ended (completed or failed), a run kept open that
// grows, and a checkpointer indexing and signing. stop ends them and fails
// t with the errors they met; pause holds them between two writes until
// the function it returns is called.
func load(t *testing.T, s AuditStore) (stop func(), pause func() (resume func())) {
	t.Helper()
	done := make(chan struct{})
	var held sync.RWMutex // each write holds it for reading
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	running := func() bool {
		select {
		case <-done:
			return false
		default:
			return true
		}
	}
	open := NewFixture()
	open.Bootstrap(t, s)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; running(); i++ {
			r := NewFixture()
			held.RLock()
			_, err := s.BootstrapRun(ctx, r.Meta, []engine.RunEventWrite{r.Event(engine.RunQueued, "", 1)})
			held.RUnlock()
			if err != nil {
				fail(err)
				return
			}
			end := engine.RunCompleted
			if i%2 == 1 {
				end = engine.RunFailed
			}
			for _, e := range []engine.RunEventWrite{r.Event(engine.RunStarted, "", 1), open.Event(engine.StepStarted, fmt.Sprintf("model.open%d", i), 1),
				r.Event(engine.StepStarted, "model.x", 1), r.Event(engine.StepCompleted, "model.x", 1), r.Event(end, "", 1)} {
				held.RLock()
				_, err := s.AppendAndEnqueue(ctx, e.RunID, []engine.RunEventWrite{e})
				held.RUnlock()
				if err != nil {
					fail(err)
					return
				}
			}
		}
	}()
	go func() {
		defer wg.Done()
		c := &audit.Checkpointer{Log: s, SigningKey: TestKey, Now: func() time.Time { return time.Date(2026, 4, 1, 12, 0, 0, 0, time.UTC) }}
		for running() {
			held.RLock()
			_, _, err := c.Checkpoint(ctx)
			held.RUnlock()
			if err != nil {
				fail(err)
				return
			}
		}
	}()
	stop = func() {
		close(done)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Errorf("the load: %v", err)
		}
	}
	pause = func() func() {
		held.Lock()
		return held.Unlock
	}
	return stop, pause
}
