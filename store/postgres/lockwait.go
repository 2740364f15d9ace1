package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// A wait on another session's lock is bounded by the server (lock_timeout
// = the lock-wait budget); what the Go side adds is the progress line, at
// engine.FirstWaitReport and then every engine.WaitReportEvery.

// lockWatch is what a progress line needs: where to ask who blocks a
// session (holderQuery: lock_holder of store.sql or warehouse.sql), whom
// to tell and the budget.
type lockWatch struct {
	db interface {
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
	holderQuery string
	onWait      engine.WaitFunc
	budget      time.Duration
}

// watchLocks runs fn, which may wait for resource's lock, and while it runs
// past engine.FirstWaitReport reports the wait through Options.OnWait, naming the
// session that blocks backend pid (0: unknown) when the server says.
func (s *Store) watchLocks(ctx context.Context, resource, runID string, pid func() uint32, fn func() error) error {
	return lockWatch{db: s.db, holderQuery: s.q["lock_holder"], onWait: s.opts.OnWait, budget: s.opts.LockWait}.
		watch(ctx, resource, runID, pid, fn)
}

func (lw lockWatch) watch(ctx context.Context, resource, runID string, pid func() uint32, fn func() error) error {
	if lw.onWait == nil {
		return fn()
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		start := time.Now()
		next := time.NewTimer(engine.FirstWaitReport)
		defer next.Stop()
		for {
			select {
			case <-done:
				return
			case <-next.C:
			}
			w := engine.LockWait{Resource: resource, RunID: runID, Waited: time.Since(start), Budget: lw.budget}
			if pid != nil {
				lw.blocker(ctx, pid(), &w)
			}
			select {
			case <-done: // finished while the holder was looked up: no line
				return
			default:
			}
			lw.onWait.Report(w)
			next.Reset(engine.WaitReportEvery)
		}
	}()
	err := fn()
	close(done)
	<-stopped
	return err
}

// blocker fills in the session that blocks backend pid: its pid, client
// and transaction start. A failed look-up leaves w as it is: the line is
// still worth printing.
func (lw lockWatch) blocker(ctx context.Context, pid uint32, w *engine.LockWait) {
	if pid == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var holder int
	var app string
	var since *time.Time
	if err := lw.db.QueryRowContext(ctx, lw.holderQuery, int64(pid)).Scan(&holder, &app, &since); err != nil {
		return
	}
	w.Holder = fmt.Sprintf("Postgres session %d (%s)", holder, app)
	if since != nil {
		w.Since = *since
	}
}
