package postgres_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store"
	"github.com/dvtrun/dvtrun/store/postgres"
	"github.com/dvtrun/dvtrun/store/postgres/pgtest"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// TestLockWaitRunsOut: an append behind another session's lock on the run
// (a transaction holding its dvt_run_seq row) waits --lock-wait, saying so
// after a second with the holder's session, then fails with a transient
// STORE_UNAVAILABLE that names the wait, and writes nothing; once the
// holder is gone the same append succeeds.
func TestLockWaitRunsOut(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	const wait = 1500 * time.Millisecond
	var mu sync.Mutex
	var reports []engine.LockWait
	s, err := postgres.Open(ctx, dsn, postgres.Options{LockWait: wait, OnWait: func(w engine.LockWait) {
		mu.Lock()
		reports = append(reports, w)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f := storetest.NewFixture()
	f.Bootstrap(t, s)
	holder, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, `SELECT 1 FROM dvt_run_seq WHERE run_id = $1 FOR UPDATE`, f.Meta.RunID); err != nil {
		t.Fatal(err)
	}
	ev := f.Event(engine.StepStarted, "model.a", 1)
	start := time.Now()
	_, err = s.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{ev})
	waited := time.Since(start)
	if engine.CodeOf(err) != engine.CodeStoreUnavailable || !engine.IsTransient(err) || !strings.Contains(err.Error(), "--lock-wait") ||
		strings.Count(err.Error(), "STORE_UNAVAILABLE") != 1 {
		t.Fatalf("append behind a held lock: %v, want a transient STORE_UNAVAILABLE naming --lock-wait", err)
	}
	if waited < wait || waited > wait+5*time.Second {
		t.Errorf("waited %s, want about the lock-wait budget %s", waited, wait)
	}
	// One progress line after a second of waiting, naming the run and the
	// session that holds its row.
	mu.Lock()
	if len(reports) != 1 || reports[0].RunID != f.Meta.RunID || !strings.Contains(reports[0].Holder, "Postgres session") || reports[0].Since.IsZero() {
		t.Errorf("progress reports %+v, want one naming run %s and the holding session", reports, f.Meta.RunID)
	} else {
		t.Logf("progress line: %s", reports[0])
	}
	mu.Unlock()
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	res, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{ev})
	if err != nil || len(res.Appended) != 1 {
		t.Fatalf("the append after the holder left: %+v, %v (the failed one must have written nothing)", res, err)
	}
}

// TestOpenErrors: a server that is not there, refuses, or accepts and
// never answers (no connect_timeout in the DSN: the default bound) is a
// transient STORE_UNAVAILABLE, for the store and the warehouse alike; a
// database the server does not have is CONFIG_INVALID (the DSN is wrong,
// no wait mends it); a DSN that does not parse INVALID_ARGUMENT; and no
// error shows the password.
func TestOpenErrors(t *testing.T) {
	const password = "N0t-Sh0wn"
	refused, silent := sftest.Unreachable(t)
	refusedHost, refusedPort, _ := net.SplitHostPort(refused)
	silentHost, silentPort, _ := net.SplitHostPort(silent.Addr)
	cases := []struct {
		name, dsn string
		code      engine.Code
		transient bool
		says      string
	}{
		{"no server", "postgres://dvt:" + password + "@/dvt?host=" + t.TempDir() + "&connect_timeout=5", engine.CodeStoreUnavailable, true, "cannot reach"},
		{"refused", "postgres://dvt:" + password + "@" + refusedHost + ":" + refusedPort + "/dvt?sslmode=disable", engine.CodeStoreUnavailable, true, refusedPort},
		{"accepts and never answers", "postgres://dvt:" + password + "@" + silentHost + ":" + silentPort + "/dvt?sslmode=disable", engine.CodeStoreUnavailable, true, silentPort},
		{"accepts and never answers (key=value)", "host=" + silentHost + " port=" + silentPort + " user=dvt password=" + password + " dbname=dvt sslmode=disable", engine.CodeStoreUnavailable, true, silentPort},
		{"bad DSN", "postgres://dvt:" + password + "@host:notaport/dvt", engine.CodeInvalidArgument, false, "does not parse"},
	}
	if srv := pgtest.Get(t); srv != nil {
		cases = append(cases, struct {
			name, dsn string
			code      engine.Code
			transient bool
			says      string
		}{"no such database", srv.URL("no_such_db"), engine.CodeConfigInvalid, false, `"no_such_db" does not exist`})
	}
	open := map[string]func(dsn string) error{
		"store": func(dsn string) error {
			s, err := postgres.Open(context.Background(), dsn, postgres.Options{})
			if err == nil {
				s.Close()
			}
			return err
		},
		"warehouse": func(dsn string) error {
			w, err := postgres.OpenWarehouse(context.Background(), dsn, postgres.WarehouseOptions{})
			if err == nil {
				w.Close()
			}
			return err
		},
	}
	for _, c := range cases {
		for what, fn := range open {
			t.Run(c.name+"/"+what, func(t *testing.T) {
				t.Parallel()
				start := time.Now()
				err := fn(c.dsn)
				took := time.Since(start)
				t.Logf("after %s: %v", took.Round(time.Millisecond), err)
				if engine.CodeOf(err) != c.code || engine.IsTransient(err) != c.transient || !strings.Contains(err.Error(), c.says) {
					t.Fatalf("open: %v, want %s (transient %v) saying %q", err, c.code, c.transient, c.says)
				}
				if strings.Contains(err.Error(), password) {
					t.Errorf("the error shows the password: %v", err)
				}
				// Bounded by the default connect timeout, with a margin for
				// a loaded machine: before, a silent server held it forever.
				if took > postgres.DefaultConnectTimeout+20*time.Second {
					t.Errorf("failed after %s, want within the %s connect timeout", took, postgres.DefaultConnectTimeout)
				}
			})
		}
	}
}

// TestConcurrentFirstOpens: processes that start together on an empty
// database migrate it once; every one of them opens a usable store.
func TestConcurrentFirstOpens(t *testing.T) {
	dsn := pgtest.DSN(t)
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := postgres.Open(context.Background(), dsn, postgres.Options{})
			if err == nil {
				_, err = s.ListRuns(context.Background(), storeFilter())
				s.Close()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent first open: %v", err)
		}
	}
}

func storeFilter() store.RunFilter { return store.RunFilter{} }

// TestRedact: every DSN form loses its password, also one that does not
// parse, and keeps the rest.
func TestRedact(t *testing.T) {
	cases := []struct{ dsn, want string }{
		{"postgres://ann:s3cret@db:5432/dvt", "postgres://ann:***@db:5432/dvt"},
		{"postgresql://ann:p%40ss@db/dvt?sslmode=require", "postgresql://ann:***@db/dvt?sslmode=require"},
		{"postgres://ann:s3cret@db:notaport/dvt", "postgres://ann:***@db:notaport/dvt"},
		{"host=db dbname=dvt password=s3cret user=ann", "host=db dbname=dvt password=*** user=ann"},
		{"host=db password='two words' dbname=dvt", "host=db password='***' dbname=dvt"},
		{"postgres://db/dvt?password=s3cret&sslmode=disable", "postgres://db/dvt?password=***&sslmode=disable"},
		{"postgres://ann@db/dvt", "postgres://ann@db/dvt"},
	}
	for _, c := range cases {
		if got := postgres.Redact(c.dsn); got != c.want {
			t.Errorf("Redact(%q) = %q, want %q", c.dsn, got, c.want)
		}
	}
}

// TestTakeoverQueuesBehindAppend: AcquireFencedLease takes the run's
// dvt_run_seq row lock, the one an append holds, so a takeover can never
// land between an append's fence check and its commit: with the row held,
// the takeover waits (here until the lock-wait budget runs out).
func TestTakeoverQueuesBehindAppend(t *testing.T) {
	ctx := context.Background()
	s, err := postgres.Open(ctx, pgtest.DSN(t), postgres.Options{LockWait: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f := storetest.NewFixture()
	f.Bootstrap(t, s)
	holder, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, `SELECT 1 FROM dvt_run_seq WHERE run_id = $1 FOR UPDATE`, f.Meta.RunID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireFencedLease(ctx, f.Meta.RunID, "heir", time.Minute); engine.CodeOf(err) != engine.CodeStoreUnavailable {
		t.Fatalf("takeover while an append holds the run's row: %v, want it to wait (then STORE_UNAVAILABLE)", err)
	}
	holder.Rollback()
	if _, err := s.AcquireFencedLease(ctx, f.Meta.RunID, "heir", time.Minute); err != nil {
		t.Fatalf("takeover once the row is free: %v", err)
	}
}

// TestSessionsEndedByTheServer: the server ends every session of the store
// (pg_terminate_backend, as a restart or a failover does) between
// operations; each operation then meets a lost connection and runs again
// on a new one instead of failing the run with STORE_UNAVAILABLE.
func TestSessionsEndedByTheServer(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	admin, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	f := storetest.NewFixture()
	f.Bootstrap(t, s)
	run := f.Meta.RunID
	var lease engine.Lease
	ops := []struct {
		name string
		op   func() error
	}{
		{"append", func() error {
			_, err := s.AppendAndEnqueue(ctx, run, []engine.RunEventWrite{f.Event(engine.StepStarted, "model.a", 1)})
			return err
		}},
		{"acquire lease", func() (err error) { lease, err = s.AcquireFencedLease(ctx, run, "w1", time.Minute); return err }},
		{"fenced append", func() error {
			_, err := s.AppendFenced(ctx, lease, []engine.RunEventWrite{f.Event(engine.StepCompleted, "model.a", 1)})
			return err
		}},
		{"list events", func() error { _, err := s.ListEvents(ctx, run, 0, 0); return err }},
		{"get run", func() error { _, err := s.GetRun(ctx, run); return err }},
		{"send signal", func() error {
			_, err := s.SendSignal(ctx, engine.Signal{SignalID: "sig-1", RunID: run, Type: engine.SignalPause})
			return err
		}},
		{"pulse", func() error {
			_, err := s.Pulse(ctx, "w1", time.Minute, []engine.PulseRun{{RunID: run, Fence: lease.Fence}})
			return err
		}},
		{"get lease", func() error { _, _, err := s.GetLease(ctx, run); return err }},
		{"project", func() error { _, err := s.ProjectSQL(ctx, run); return err }},
	}
	for _, o := range ops {
		var n int
		if err := admin.DB().QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("%s: no session of the store to end", o.name)
		}
		time.Sleep(50 * time.Millisecond) // the sessions are gone before the next statement
		if err := o.op(); err != nil {
			t.Errorf("%s after the server ended %d sessions: %v", o.name, n, err)
		}
	}
}

// TestStoppedHolderIsEnded: a session that sits idle in a transaction
// holding a run's row (its process stopped) is ended by the server after
// IdleInTransaction, and the run's next append goes through instead of
// waiting out the lock-wait budget.
func TestStoppedHolderIsEnded(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	stopped, err := postgres.Open(ctx, dsn, postgres.Options{IdleInTransaction: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer stopped.Close()
	s, err := postgres.Open(ctx, dsn, postgres.Options{LockWait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f := storetest.NewFixture()
	f.Bootstrap(t, s)
	holder, err := stopped.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, `SELECT 1 FROM dvt_run_seq WHERE run_id = $1 FOR UPDATE`, f.Meta.RunID); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{f.Event(engine.StepStarted, "model.a", 1)}); err != nil {
		t.Fatalf("append behind a stopped holder: %v", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("the append waited %s for a holder idle in its transaction for 300ms", waited)
	}
}
