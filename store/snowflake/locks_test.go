package snowflake_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snowflakedb/gosnowflake"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// errKilled is what a killed process's requests get: nothing reaches the
// server any more.
var errKilled = errors.New("test: the process was killed")

// killTransport is a process that is SIGKILLed right after the server
// executed one of its query requests: that request's answer is lost and no
// later request (ROLLBACK, session close, lease renewal) is ever sent, so
// its session stays open on the server with whatever it held.
type killTransport struct {
	sftest.CountingTransport
	// kill says whether the n-th query request (from 1) with this body is
	// the last one the process sends.
	kill   func(n int64, body []byte) bool
	n      atomic.Int64
	dead   atomic.Bool
	killed chan struct{}
	once   sync.Once
}

func newKillTransport(kill func(n int64, body []byte) bool) *killTransport {
	return &killTransport{kill: kill, killed: make(chan struct{})}
}

func (k *killTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if k.dead.Load() {
		return nil, errKilled
	}
	if r.Body == nil || !strings.HasSuffix(r.URL.Path, "/query-request") {
		return k.CountingTransport.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if !k.kill(k.n.Add(1), body) {
		return k.CountingTransport.RoundTrip(r)
	}
	k.dead.Store(true)
	// Executed to the end on a context of its own: the process dies after
	// the server ran the request, before the answer arrives.
	r2 := r.Clone(context.WithoutCancel(r.Context()))
	r2.Body = io.NopCloser(bytes.NewReader(body))
	if resp, err := k.CountingTransport.RoundTrip(r2); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	k.once.Do(func() { close(k.killed) })
	return nil, errKilled
}

// quietDriver keeps gosnowflake from logging the killed processes' failed
// requests to stderr for the test.
func quietDriver(t *testing.T) {
	gosnowflake.GetLogger().SetOutput(io.Discard)
	t.Cleanup(func() { gosnowflake.GetLogger().SetOutput(os.Stderr) })
}

// openKilledAt opens a store (opts, one attempt per operation) in a process
// that is killed right after the server ran its first query request whose
// SQL contains marker.
func openKilledAt(t *testing.T, dsn string, opts snowflake.Options, marker string) (*snowflake.Store, *killTransport) {
	t.Helper()
	killer := newKillTransport(func(_ int64, body []byte) bool { return bytes.Contains(body, []byte(marker)) })
	opts.Transporter, opts.MaxAttempts = killer, 1
	return openStore(t, dsn, opts), killer
}

// waitLines collects a store's progress lines.
type waitLines struct {
	mu    sync.Mutex
	lines []string
}

func (w *waitLines) report(l engine.LockWait) {
	w.mu.Lock()
	w.lines = append(w.lines, l.String())
	w.mu.Unlock()
}

func (w *waitLines) get() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.lines...)
}

// TestDeadClientLockOnDVTLocks: a worker killed inside a queue transaction
// (BEGIN and the DVT_LOCKS lock row's UPDATE sent, nothing after) leaves its
// transaction holding DVT_LOCKS' table lock; the test server, like
// Snowflake, would abort it only after 5 idle minutes. The next store
// operation ends it itself once it has held the lock for StaleLockAge
// (SHOW LOCKS, SYSTEM$ABORT_TRANSACTION), reporting progress meanwhile; a
// holder younger than that is waited for, with progress lines, until
// LockWait, then STORE_UNAVAILABLE.
func TestDeadClientLockOnDVTLocks(t *testing.T) {
	quietDriver(t)
	cases := []struct {
		name      string
		stale     time.Duration // StaleLockAge
		lockWait  time.Duration
		wantAbort bool // the dead holder is ended and the operation succeeds
	}{
		{name: "dead holder older than StaleLockAge: ended", stale: 2 * time.Second, lockWait: 20 * time.Second, wantAbort: true},
		{name: "holder younger than StaleLockAge: waited for, then STORE_UNAVAILABLE", stale: time.Minute, lockWait: 3 * time.Second},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := sftest.Start(t)
			dsn := srv.DSN("dvt", fmt.Sprintf("dead_locks_%d", i))
			opts := snowflake.Options{LockTimeout: time.Second, StaleLockAge: c.stale, LockWait: c.lockWait}
			openStore(t, dsn, opts).Close() // migrated

			worker, killer := openKilledAt(t, dsn, opts, "lock_name = 'queue'")
			defer worker.Close()
			// The killed worker's call never returns to anyone; its
			// replacement starts right away.
			wctx, kill := context.WithCancel(ctx)
			killedDone := make(chan error, 1)
			go func() { killedDone <- worker.Heartbeat(wctx, "dead-worker", time.Minute) }()
			select {
			case <-killer.killed:
			case err := <-killedDone:
				t.Fatalf("the worker was not killed inside its queue transaction: %v", err)
			}
			kill()
			defer func() {
				select {
				case <-killedDone:
				case <-time.After(time.Minute):
					t.Error("the killed worker's heartbeat did not return within a minute of its cancellation")
				}
			}()

			lines := &waitLines{}
			live := opts
			live.OnWait = lines.report
			next := openStore(t, dsn, live)
			defer next.Close()
			// The queue's lock has a table of its own: a run's start does
			// not wait for the dead worker at all.
			f := storetest.NewFixture()
			bctx, cancel := context.WithTimeout(ctx, 2*opts.LockTimeout)
			_, err := next.BootstrapRun(bctx, f.Meta, []engine.RunEventWrite{f.Event(engine.RunQueued, "", 1)})
			cancel()
			if err != nil {
				t.Fatalf("a run's bootstrap behind a dead worker's queue transaction: %v, want it to pass at once", err)
			}
			start := time.Now()
			err = next.Heartbeat(ctx, "next-worker", time.Minute)
			took := time.Since(start)
			got := lines.get()
			t.Logf("waited %v: %q; %v", took, got, err)
			if len(got) == 0 {
				t.Errorf("no progress line while waiting %v", took)
			}
			for _, l := range got {
				if !strings.Contains(l, "DVT_QUEUE_LOCK") || !strings.Contains(l, "held by transaction") {
					t.Errorf("progress line %q does not name DVT_QUEUE_LOCK and its holder", l)
				}
			}
			if c.wantAbort {
				if err != nil {
					t.Fatalf("the next worker's heartbeat: %v", err)
				}
				if limit := c.stale + 2*opts.LockTimeout + 3*time.Second; took > limit {
					t.Errorf("the next worker waited %v, want under %v (StaleLockAge %v)", took, limit, c.stale)
				}
				return
			}
			if !errors.Is(err, engine.ErrStoreUnavailable) {
				t.Fatalf("heartbeat behind a live holder: %v, want STORE_UNAVAILABLE", err)
			}
			if !strings.Contains(err.Error(), "DVT_QUEUE_LOCK") || !strings.Contains(err.Error(), "was not released within") {
				t.Errorf("error %q does not say which lock was waited for", err)
			}
			if took < c.lockWait || took > c.lockWait+2*opts.LockTimeout+3*time.Second {
				t.Errorf("gave up after %v, want about LockWait %v", took, c.lockWait)
			}
		})
	}
}

// TestLockOfAnotherUser: SHOW LOCKS lists only the store user's own
// transactions (SHOW LOCKS: "For all other roles, the function only shows
// locks across all sessions for the current user"), and
// SYSTEM$ABORT_TRANSACTION ends only those. A lock another user's
// transaction holds is never broken, however old: it is waited for, with
// progress lines naming the table, until LockWait, then STORE_UNAVAILABLE.
func TestLockOfAnotherUser(t *testing.T) {
	srv := sftest.Start(t)
	dsn := srv.DSN("dvt", "other_user")
	opts := snowflake.Options{LockTimeout: time.Second, StaleLockAge: time.Millisecond, LockWait: 3 * time.Second}
	openStore(t, dsn, opts).Close() // migrated
	cfg := srv.Config("dvt", "other_user")
	cfg.User = "someone_else"
	other, err := sql.OpenDB(gosnowflake.NewConnector(gosnowflake.SnowflakeDriver{}, *cfg)).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for _, q := range []string{"BEGIN", "UPDATE dvt_queue_lock SET owner = owner WHERE lock_name = 'queue'"} {
		if _, err := other.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	lines := &waitLines{}
	live := opts
	live.OnWait = lines.report
	s := openStore(t, dsn, live)
	defer s.Close()
	err = s.Heartbeat(ctx, "worker", time.Minute)
	if !errors.Is(err, engine.ErrStoreUnavailable) || !strings.Contains(err.Error(), "DVT_QUEUE_LOCK") {
		t.Fatalf("heartbeat behind another user's lock: %v, want STORE_UNAVAILABLE naming DVT_QUEUE_LOCK", err)
	}
	got := lines.get()
	if len(got) == 0 {
		t.Error("no progress line")
	}
	for _, l := range got {
		if !strings.Contains(l, "DVT_QUEUE_LOCK") || strings.Contains(l, "held by") {
			t.Errorf("progress line %q: want the table, and no holder (another user's is not listed)", l)
		}
	}
	if _, err := other.ExecContext(ctx, "COMMIT"); err != nil {
		t.Errorf("the other user's transaction was ended: COMMIT %v", err)
	}
}

// TestMigrationKilledAtRandomPoints: a process SIGKILLed at a random request
// of the first Open of a fresh schema (the answer to that request lost, no
// request after it sent: its migration lease is neither renewed nor
// released) is followed by an Open that succeeds within the lease's TTL
// plus its budget, with a progress line while it waits for the lease, and
// leaves a complete schema: every migration recorded once, every lock row
// once (the taker re-applies the migration the dead one was in).
func TestMigrationKilledAtRandomPoints(t *testing.T) {
	quietDriver(t)
	const trials = 10
	srv := sftest.Start(t)
	// How many query requests a whole first Open sends.
	count := newKillTransport(func(int64, []byte) bool { return false })
	openStore(t, srv.DSN("dvt", "migrate_count"), snowflake.Options{Transporter: count}).Close()
	total := count.n.Load()
	if total < 10 {
		t.Fatalf("a first Open sent %d query requests; the trials need its migration", total)
	}
	const ttl = time.Second
	sawWait := false
	var killedOpens []chan struct{}
	for trial := range trials {
		schema := fmt.Sprintf("migrate_kill_%d", trial)
		dsn := srv.DSN("dvt", schema)
		at := 1 + rand.Int64N(total)
		killer := newKillTransport(func(n int64, _ []byte) bool { return n == at })
		// The killed process does not finish its Open: the next one starts
		// right after the kill, as a supervisor's restart would.
		kctx, kill := context.WithCancel(ctx)
		killedDone := make(chan struct{})
		go func() {
			defer close(killedDone)
			if s, err := snowflake.Open(kctx, dsn, snowflake.Options{Transporter: killer, MaxAttempts: 1, MigrateLeaseTTL: ttl}); err == nil {
				s.Close()
			}
		}()
		select {
		case <-killer.killed:
		case <-killedDone:
			t.Fatalf("trial %d: the Open to kill at request %d of %d finished without being killed", trial, at, total)
		}
		kill()
		lines := &waitLines{}
		budget := 10 * time.Second
		start := time.Now()
		s, err := snowflake.Open(ctx, dsn, snowflake.Options{MigrateLeaseTTL: ttl, LockWait: budget, OnWait: lines.report})
		took := time.Since(start)
		if err != nil {
			t.Fatalf("trial %d (killed at request %d of %d): the next Open: %v", trial, at, total, err)
		}
		if took > ttl+budget {
			t.Errorf("trial %d: the next Open took %v, over TTL + budget", trial, took)
		}
		for _, l := range lines.get() {
			sawWait = true
			if !strings.Contains(l, "schema migration lease") {
				t.Errorf("trial %d: progress line %q does not name the migration lease", trial, l)
			}
		}
		checkSchemaComplete(t, s, fmt.Sprintf("trial %d (killed at request %d of %d)", trial, at, total))
		s.Close()
		t.Logf("trial %d: killed at request %d of %d; the next Open took %v, %d progress lines", trial, at, total, took, len(lines.get()))
		killedOpens = append(killedOpens, killedDone)
	}
	for i, done := range killedOpens {
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("trial %d: the killed Open did not return within a minute of its cancellation", i)
		}
	}
	if !sawWait {
		t.Errorf("no trial reported waiting for the lease of the killed process")
	}
}

// checkSchemaComplete fails unless every migration is recorded once and
// every lock row exists once.
func checkSchemaComplete(t *testing.T, s *snowflake.Store, what string) {
	t.Helper()
	var versions, distinct int
	if err := s.DB().QueryRowContext(ctx, "SELECT COUNT(*), COUNT(DISTINCT version) FROM dvt_schema_version").Scan(&versions, &distinct); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if versions != distinct || versions < 9 {
		t.Errorf("%s: %d versions recorded, %d distinct; want each of the migrations once", what, versions, distinct)
	}
	for lock, table := range map[string]string{"migrate": "dvt_locks", "bootstrap": "dvt_locks", "deliveries": "dvt_locks", "queue": "dvt_queue_lock"} {
		var n int
		if err := s.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table+" WHERE lock_name = ?", lock).Scan(&n); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n != 1 {
			t.Errorf("%s: %d '%s' lock rows, want 1", what, n, lock)
		}
	}
	var transitions int
	if err := s.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM dvt_transitions").Scan(&transitions); err != nil || transitions != len(engine.Transitions) {
		t.Errorf("%s: %d transitions (%v), want %d", what, transitions, err, len(engine.Transitions))
	}
}
