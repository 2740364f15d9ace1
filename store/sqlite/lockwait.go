package sqlite

import (
	"context"
	"errors"
	"sync"
	"time"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/dvtrun/dvtrun/engine"
)

// busySlice is how long one try waits in SQLite's own busy handler (the
// connection's busy_timeout) before lockWaiter checks its budget, the
// context and whether to report: SQLite's handler sees neither.
const busySlice = 250 * time.Millisecond

// streakGap: a busy answer within this long of the previous one continues
// the same wait. The runner's retry backoff is shorter, and a step queued
// behind another of this process's tries as soon as that one gives up, so
// neither retries nor parallel steps multiply the budget; a busy answer
// after a longer quiet spell starts a new wait with the whole budget.
const streakGap = 10 * time.Second

// lockWaiter bounds the waits of one database handle for the write lock
// another process holds: one budget for a streak of busy answers, however
// many transactions, steps or engine attempts try during it, with a
// progress report every few seconds, then STORE_UNAVAILABLE.
type lockWaiter struct {
	resource string // "warehouse PATH", "state store PATH"
	budget   time.Duration
	onWait   engine.WaitFunc
	holder   func(*engine.LockWait) // fills in who probably holds the lock; may be nil

	mu    sync.Mutex
	since time.Time // the start of the current streak; zero: the last try got the lock
	last  time.Time // the latest busy answer
}

// newLockWaiter: a budget of 0 is engine.DefaultLockWait. Waits are timed
// by the wall clock: they are about another process, not the store's
// clock.
func newLockWaiter(resource string, budget time.Duration, onWait engine.WaitFunc, holder func(*engine.LockWait)) *lockWaiter {
	if budget <= 0 {
		budget = engine.DefaultLockWait
	}
	return &lockWaiter{resource: resource, budget: budget, onWait: onWait, holder: holder}
}

// slice is the busy_timeout of the handle's connections.
func (l *lockWaiter) slice() time.Duration { return min(busySlice, l.budget) }

// wait calls try until it answers other than busy, the streak's budget is
// spent (the error is LockWait.Exceeded, wrapping the busy error), or ctx
// ends.
func (l *lockWaiter) wait(ctx context.Context, try func() error) error {
	start := time.Now()
	next := engine.FirstWaitReport
	for {
		err := try()
		if !isBusy(err) {
			if err == nil {
				l.mu.Lock()
				l.since = time.Time{}
				l.mu.Unlock()
			}
			return err
		}
		w := l.busy(start)
		if w.Waited >= l.budget {
			ex := w.Exceeded()
			var e *engine.Error
			if errors.As(ex, &e) {
				e.Err = err // the driver's busy error, for errors.As
			}
			return ex
		}
		if w.Waited >= next {
			l.onWait.Report(w)
			next = w.Waited + engine.WaitReportEvery
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
	}
}

// busy records a busy answer to a wait that started at start and
// describes the wait.
func (l *lockWaiter) busy(start time.Time) engine.LockWait {
	now := time.Now()
	l.mu.Lock()
	if l.since.IsZero() || now.Sub(l.last) > streakGap {
		l.since = start
	}
	l.last = now
	since := l.since
	l.mu.Unlock()
	w := engine.LockWait{Resource: l.resource, Since: since, Waited: now.Sub(since), Budget: l.budget}
	if l.holder != nil {
		l.holder(&w)
	}
	return w
}

// isBusy: another connection holds the lock SQLite needed.
func isBusy(err error) bool {
	var se *msqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}
