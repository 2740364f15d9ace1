package engine

import (
	"fmt"
	"strings"
	"time"
)

// DefaultLockWait is how long a store or warehouse waits for a lock that
// another process holds before it gives up with STORE_UNAVAILABLE (the
// CLI's --lock-wait). It bounds every such wait; step retries do not
// multiply it.
const DefaultLockWait = 60 * time.Second

// Progress reports of a lock wait, the same on every backend: the first
// after FirstWaitReport (a lock held a moment by a neighbouring run is not
// news), then one every WaitReportEvery.
const (
	FirstWaitReport = time.Second
	WaitReportEvery = 5 * time.Second
)

// LockWait describes one wait for a lock another process holds: what the
// progress line names while waiting, and what the error says when the
// budget runs out.
type LockWait struct {
	Resource string        // what is waited for: "table DVT_LOCKS", "warehouse .dvt/warehouse.db"
	RunID    string        // the run the lock belongs to, when known
	Holder   string        // who holds it, when known: an owner id, a session or transaction
	Since    time.Time     // when the holder took it, when known
	Waited   time.Duration // so far
	Budget   time.Duration // the most that will be waited
}

// String is the progress line: what is waited for, held by whom since
// when, and how much of the budget is spent.
func (w LockWait) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "waiting for the lock on %s", w.Resource)
	w.describeHolder(&b)
	fmt.Fprintf(&b, ": %s of %s", w.Waited.Round(time.Second), w.Budget)
	return b.String()
}

func (w LockWait) describeHolder(b *strings.Builder) {
	if w.RunID != "" {
		fmt.Fprintf(b, " (run %s)", w.RunID)
	}
	if w.Holder != "" {
		fmt.Fprintf(b, " held by %s", w.Holder)
	}
	if !w.Since.IsZero() {
		fmt.Fprintf(b, " since %s", w.Since.UTC().Format(time.RFC3339))
	}
}

// Exceeded is the error of a wait that ran out of budget: STORE_UNAVAILABLE,
// which leaves a run resumable (exit 4).
func (w LockWait) Exceeded() error {
	var b strings.Builder
	fmt.Fprintf(&b, "the lock on %s", w.Resource)
	w.describeHolder(&b)
	fmt.Fprintf(&b, " was not released within %s (--lock-wait); try again once its holder is gone", w.Budget)
	return &Error{Code: CodeStoreUnavailable, Msg: b.String()}
}

// WaitFunc receives a progress report while a lock is waited for, about
// every few seconds. nil reports nothing.
type WaitFunc func(LockWait)

// Report calls f with w when f is set.
func (f WaitFunc) Report(w LockWait) {
	if f != nil {
		f(w)
	}
}
