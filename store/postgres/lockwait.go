package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// A wait on another session's lock is bounded by the server (lock_timeout
// = Options.LockWait); what the Go side adds is the progress line, at
// engine.FirstWaitReport and then every engine.WaitReportEvery.

// watchLocks runs fn, which may wait for resource's lock, and while it runs
// past engine.FirstWaitReport reports the wait through Options.OnWait, naming the
// session that blocks backend pid (0: unknown) when the server says.
func (s *Store) watchLocks(ctx context.Context, resource, runID string, pid func() uint32, fn func() error) error {
	if s.opts.OnWait == nil {
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
			w := engine.LockWait{Resource: resource, RunID: runID, Waited: time.Since(start), Budget: s.opts.LockWait}
			if pid != nil {
				s.blocker(ctx, pid(), &w)
			}
			select {
			case <-done: // finished while the holder was looked up: no line
				return
			default:
			}
			s.opts.OnWait.Report(w)
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
func (s *Store) blocker(ctx context.Context, pid uint32, w *engine.LockWait) {
	if pid == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var holder int
	var app string
	var since *time.Time
	if err := s.db.QueryRowContext(ctx, s.q["lock_holder"], int64(pid)).Scan(&holder, &app, &since); err != nil {
		return
	}
	w.Holder = fmt.Sprintf("Postgres session %d (%s)", holder, app)
	if since != nil {
		w.Since = *since
	}
}
