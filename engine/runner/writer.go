package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// maxAppend bounds the events of one append: a Snowflake append is one
// statement carrying its events as literals.
const maxAppend = 200

// writer is a run's one appender (group commit). The run loop prepares a
// batch (the Emitter's Layer 1 check) and hands it over without waiting;
// everything handed over while an append is in flight goes into the next
// append, in emission order. The log is therefore always a prefix of what
// the loop emitted: a step's StepStarted is stored before its
// StepCompleted, and runSeq follows emission order.
//
// The write-latency budget (ExecutionSemantics §5) lives here: an event
// that has waited Config.WriteBudget without being stored is, when it is a
// StepStarted, put in the Spool (fail open: it stays first in line and is
// appended before anything later of its run); so do the events before it
// that are not outcomes (RunStarted, StepSkipped, signal decisions), which
// keeps the spool a prefix of the run's emissions. An outcome —
// StepCompleted, StepFailed, the run's end — never fails open: when one
// waited longer than the budget the run stops, resumable.
type writer struct {
	em      *engine.Emitter
	clock   engine.Clock
	budget  time.Duration
	spool   Spool // nil: no event fails open
	runID   string
	backoff func(attempt int) time.Duration
	sleep   func(ctx context.Context, d time.Duration) error
	// stored receives the records of each append, in order, from the
	// writer's goroutine.
	stored func([]engine.RunEventRecord)
	// first runs once before the first append (what the run must have
	// written before its events, such as its reserved eventIds); a failure
	// is retried like an append.
	first func(ctx context.Context) error

	mu      sync.Mutex
	queue   []queued      // handed over, not stored yet, in emission order
	spooled bool          // the spool holds events of this run
	changed chan struct{} // closed and replaced whenever queue or err changes
	err     error         // set once: the writer stopped
	dead    chan struct{} // closed when err is set
	wake    chan struct{}
}

type queued struct {
	ev      engine.RunEventWrite
	at      time.Time // handed over (Clock)
	spooled bool
}

func newWriter(em *engine.Emitter, clock engine.Clock, runID string, budget time.Duration, spool Spool) *writer {
	return &writer{em: em, clock: clock, runID: runID, budget: budget, spool: spool,
		changed: make(chan struct{}), dead: make(chan struct{}), wake: make(chan struct{}, 1)}
}

// submit hands events over to be appended after everything handed over
// before them. It fails only when the writer has stopped.
func (w *writer) submit(events []engine.RunEventWrite) error {
	if len(events) == 0 {
		return nil
	}
	now := w.clock.Now()
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return err
	}
	for _, e := range events {
		w.queue = append(w.queue, queued{ev: e, at: now})
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return nil
}

// failed is closed when the writer stopped (failure says why).
func (w *writer) failed() <-chan struct{} { return w.dead }

// failure is the error that stopped the writer, or nil while it runs.
func (w *writer) failure() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *writer) notify() { // w.mu held
	close(w.changed)
	w.changed = make(chan struct{})
}

// flush waits until everything handed over is stored, the writer stopped
// (its error), or ctx ends.
func (w *writer) flush(ctx context.Context) error {
	for {
		w.mu.Lock()
		n, err, ch := len(w.queue), w.err, w.changed
		w.mu.Unlock()
		switch {
		case err != nil:
			return err
		case n == 0:
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// run appends until ctx ends or the writer fails. Cancelling ctx abandons
// an append in flight, whose outcome is then unknown: appending the same
// events again is safe.
func (w *writer) run(ctx context.Context) {
	firstDone := w.first == nil
	attempt := 0
	for {
		batch := w.next()
		if len(batch) == 0 {
			select {
			case <-w.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		if err := w.overdue(); err != nil {
			w.stop(err)
			return
		}
		actx, cancel := context.WithTimeout(ctx, w.timeout(batch))
		var recs []engine.RunEventRecord
		err := func() error {
			if !firstDone {
				if err := w.first(actx); err != nil {
					return err
				}
				firstDone = true
			}
			var err error
			recs, err = w.em.Append(actx, events(batch))
			return err
		}()
		// An attempt cut short by its own deadline failed with whatever the
		// driver made of the cancellation: it is retried like a timeout.
		timedOut := actx.Err() != nil
		cancel()
		if err == nil {
			attempt = 0
			w.done(len(batch), recs)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if !timedOut && !retryable(err) {
			code := engine.CodeOf(err)
			if code == "" {
				code = engine.CodeStoreUnavailable
			}
			w.stop(engine.Errorf(code, "run %s stopped: could not record %s: %w", w.runID, describeBatch(events(batch)), err))
			return
		}
		attempt++
		wait := w.backoff(attempt)
		if left := w.timeout(batch); wait > left {
			wait = left // wake up when the budget of the oldest event runs out
		}
		if err := w.sleep(ctx, wait); err != nil {
			return
		}
	}
}

// next is the head of the queue, up to one append.
func (w *writer) next() []queued {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.queue[:min(len(w.queue), maxAppend)])
}

// overdue applies the budget to the events that waited longer than it.
// The queue's prefix up to the last of them fails open into the spool, in
// order, when it holds no outcome; an outcome (StepCompleted, StepFailed,
// the run's end) never fails open, and stops the run instead.
func (w *writer) overdue() error {
	now := w.clock.Now()
	w.mu.Lock()
	last := -1
	for i, q := range w.queue {
		if !q.spooled && now.Sub(q.at) >= w.budget {
			last = i
		}
	}
	var late []engine.RunEventWrite
	for _, q := range w.queue[:last+1] {
		if q.spooled {
			continue
		}
		if neverFailsOpen(q.ev.EventType) || w.spool == nil {
			w.mu.Unlock()
			return engine.Errorf(engine.CodeStoreUnavailable, "run %s stopped: %s was not stored within the write-latency budget of %s (resume it once the state store is back)",
				w.runID, describeBatch([]engine.RunEventWrite{q.ev}), w.budget)
		}
		late = append(late, q.ev)
	}
	w.mu.Unlock()
	if len(late) == 0 {
		return nil
	}
	if err := w.put(late); err != nil {
		return engine.Errorf(engine.CodeStoreUnavailable, "run %s stopped: the state store took longer than the write-latency budget of %s and %s could not be spooled: %w",
			w.runID, w.budget, describeBatch(late), err)
	}
	return nil
}

// put spools events, the oldest not yet spooled ones of the queue, and
// marks them. Only the writer's goroutine removes from the queue, so they
// are still its first unspooled ones. Queued events have no eventId yet
// (Append takes it from the registry); a spool needs one.
func (w *writer) put(late []engine.RunEventWrite) error {
	if err := w.spool.Put(w.runID, w.em.WithEventIDs(late)); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(late)
	for i := range w.queue {
		if n == 0 {
			break
		}
		if !w.queue[i].spooled {
			w.queue[i].spooled = true
			n--
		}
	}
	w.spooled = true
	return nil
}

// neverFailsOpen reports whether events of type t are outcomes, which never fail open
// (ExecutionSemantics §5's neverFailOpen, and the run's end).
func neverFailsOpen(t engine.EventType) bool {
	switch t {
	case engine.StepCompleted, engine.StepFailed, engine.RunCompleted, engine.RunFailed, engine.RunCancelled:
		return true
	}
	return false
}

// timeout is how long an append of batch may take: until the budget of its
// oldest event not spooled runs out, and never more than the budget.
func (w *writer) timeout(batch []queued) time.Duration {
	now := w.clock.Now()
	d := w.budget
	for _, q := range batch {
		if !q.spooled {
			d = min(d, q.at.Add(w.budget).Sub(now))
		}
	}
	return max(d, time.Millisecond)
}

// done removes an appended batch from the queue and clears the spool once
// nothing spooled is left to store.
func (w *writer) done(n int, recs []engine.RunEventRecord) {
	w.stored(recs)
	w.mu.Lock()
	w.queue = slices.Delete(w.queue, 0, n)
	clear := w.spooled && !slices.ContainsFunc(w.queue, func(q queued) bool { return q.spooled })
	w.notify()
	w.mu.Unlock()
	if clear && w.spool.Clear(w.runID) == nil {
		w.mu.Lock()
		w.spooled = false
		w.mu.Unlock()
	}
}

func (w *writer) stop(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
		close(w.dead)
		w.notify()
	}
}

// spoolRest, when the run stops, spools the events still waiting before
// the first outcome, so that the next runner of the run on this machine
// appends them first. Outcomes, and what follows them, are dropped (never
// fail open): a resumed run finds those steps RUNNING or PENDING and asks
// the warehouse's ledger. The writer's goroutine must have ended.
func (w *writer) spoolRest() error {
	if w.spool == nil {
		return nil
	}
	w.mu.Lock()
	var rest []engine.RunEventWrite
	for _, q := range w.queue {
		if neverFailsOpen(q.ev.EventType) {
			break
		}
		if !q.spooled {
			rest = append(rest, q.ev)
		}
	}
	w.mu.Unlock()
	if len(rest) == 0 {
		return nil
	}
	return w.put(rest)
}

func events(batch []queued) []engine.RunEventWrite {
	out := make([]engine.RunEventWrite, len(batch))
	for i, q := range batch {
		out[i] = q.ev
	}
	return out
}

// retryable reports whether an append that failed with err may succeed if
// tried again: the store was briefly away, or the attempt ran out of time.
func retryable(err error) bool {
	return engine.IsTransient(err) || engine.CodeOf(err) == engine.CodeStoreUnavailable || errors.Is(err, context.DeadlineExceeded)
}

func describeBatch(events []engine.RunEventWrite) string {
	parts := make([]string, 0, min(len(events), 4))
	for i, e := range events {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("and %d more", len(events)-3))
			break
		}
		if e.StepID != "" {
			parts = append(parts, string(e.EventType)+" of "+e.StepID)
		} else {
			parts = append(parts, string(e.EventType))
		}
	}
	return strings.Join(parts, ", ")
}
