package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
)

// A wait on another session's lock is bounded by the server (lock_timeout
// = the lock-wait budget); what the Go side adds is the progress line. It
// says what is true: the session is looked at (lock_wait of
// sql/postgres/lockwait.sql) from engine.FirstWaitReport on, every
// lockPoll, and a line is printed only while the server shows it waiting
// for a lock (wait_event_type Lock), naming what it waits for and the
// session that blocks it, then again every engine.WaitReportEvery of the
// wait. A statement that is only slow (a long query, pg_sleep) prints
// nothing.

// lockPoll is how often a watched session is looked at after the first
// engine.FirstWaitReport: one small catalog query.
const lockPoll = time.Second

// minLockWait is the shortest wait worth a line: a lock held a moment by a
// neighbour, caught by a poll, is not news.
const minLockWait = 200 * time.Millisecond

var lockWaitQuery = sync.OnceValues(func() (string, error) {
	q, err := sqlfiles.Queries(sqlfiles.Postgres, "lockwait.sql")
	return q["lock_wait"], err
})

// lockWatch is what a progress line needs: where to look at the waiting
// session, whom to tell, the budget, and how to name what is locked.
type lockWatch struct {
	db interface {
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
	onWait engine.WaitFunc
	budget time.Duration
	// where names the database and step for a lock the server describes
	// (" in the Postgres warehouse …"); "" keeps the caller's resource.
	where string
}

// watchLocks runs fn, which may wait for resource's lock, and reports the
// waits of backend pid through Options.OnWait while it runs.
func (s *Store) watchLocks(ctx context.Context, resource, runID string, pid func() uint32, fn func() error) error {
	return lockWatch{db: s.db, onWait: s.opts.OnWait, budget: s.opts.LockWait}.watch(ctx, resource, runID, pid, fn)
}

// watch runs fn and, while it runs past engine.FirstWaitReport, reports
// the lock waits the server shows for backend pid (0 or nil: unknown, no
// report).
func (lw lockWatch) watch(ctx context.Context, resource, runID string, pid func() uint32, fn func() error) error {
	if lw.onWait == nil || pid == nil {
		return fn()
	}
	query, err := lockWaitQuery()
	if err != nil {
		return err
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		next := time.NewTimer(engine.FirstWaitReport)
		defer next.Stop()
		var reported time.Time
		for {
			select {
			case <-done:
				return
			case <-next.C:
			}
			next.Reset(lockPoll)
			w, waiting, err := lw.lookup(ctx, query, pid())
			if err != nil {
				return // an older server or a lost connection: no lines, the wait stays bounded
			}
			if !waiting || w.Waited < minLockWait || (!reported.IsZero() && time.Since(reported) < engine.WaitReportEvery) {
				continue
			}
			if w.Resource == "" || lw.where == "" {
				w.Resource = resource
			} else {
				w.Resource += lw.where
			}
			w.RunID, w.Budget = runID, lw.budget
			select {
			case <-done: // finished while the server was asked: no line
				return
			default:
			}
			lw.onWait.Report(w)
			reported = time.Now()
		}
	}()
	err = fn()
	close(done)
	<-stopped
	return err
}

// lookup asks the server whether backend pid waits for a lock: for how
// long, on what, and who blocks it.
func (lw lockWatch) lookup(ctx context.Context, query string, pid uint32) (engine.LockWait, bool, error) {
	if pid == 0 {
		return engine.LockWait{}, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var (
		waited        float64
		locktype, rel string
		holder        int
		app           string
		since         *time.Time
	)
	err := lw.db.QueryRowContext(ctx, query, int64(pid)).Scan(&waited, &locktype, &rel, &holder, &app, &since)
	if err == sql.ErrNoRows {
		return engine.LockWait{}, false, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return engine.LockWait{}, false, nil // a slow answer: try at the next poll
		}
		return engine.LockWait{}, false, err
	}
	w := engine.LockWait{Waited: time.Duration(waited * float64(time.Second)), Resource: lockedWhat(locktype, rel)}
	if holder != 0 {
		w.Holder = fmt.Sprintf("Postgres session %d (%s)", holder, app)
	}
	if since != nil {
		w.Since = *since
	}
	return w, true, nil
}

// lockedWhat names a lock pg_locks shows: a table, a row, or an advisory
// lock (dvtrun's builders of one relation or runners of one step attempt
// take turns on those).
func lockedWhat(locktype, relation string) string {
	switch {
	case locktype == "relation" && relation != "":
		return "table " + relation
	case locktype == "tuple" && relation != "":
		return "a row of table " + relation
	case locktype == "transactionid":
		return "a row another transaction is writing"
	case locktype == "advisory":
		return "an advisory lock"
	case relation != "":
		return locktype + " of " + relation
	default:
		return locktype
	}
}
