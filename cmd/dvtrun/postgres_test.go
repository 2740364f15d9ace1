package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/postgres"
	"github.com/dvtrun/dvtrun/store/postgres/pgtest"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// TestMain stops the package's Postgres test server (pgtest), if a test
// started one, and removes the shared CLI binary when the tests end.
func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop()
	removeBinary()
	os.Exit(code)
}

// TestPostgresStoreFirstRun is README's first run and its look-around with
// --store postgres://…: the example plan builds (19 steps), and runs,
// status, events, export and verify --all read it back from Postgres. The
// URL carries a password (the test server trusts the socket, so it is not
// checked): no output ever shows it. The same database opens through a
// key=value DSN too.
func TestPostgresStoreFirstRun(t *testing.T) {
	t.Parallel()
	const password = "Pg-S3cret-pw"
	url := pgtest.URL(t)
	url = strings.Replace(url, "postgres://dvt@", "postgres://dvt:"+password+"@", 1)
	h := newHarness(t)
	h.env["DVT_STORE"] = url
	var all strings.Builder
	check := func(r result, args ...string) result {
		t.Helper()
		all.WriteString(r.stdout + r.stderr)
		if r.code != 0 {
			t.Fatalf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
		}
		return r
	}
	run := check(h.run("run", filepath.Join("..", "..", "plans", "shop", "plan.yaml")), "run")
	if !strings.Contains(run.stdout, "Done. PASS=19 WARN=0 ERROR=0 SKIP=0 TOTAL=19") {
		t.Fatalf("the example plan did not pass on the Postgres store:\n%s", run.stdout)
	}
	runID := runIDFrom(t, run.stdout)
	if r := check(h.run("runs"), "runs"); !strings.Contains(r.stdout, runID) {
		t.Errorf("runs does not list %s:\n%s", runID, r.stdout)
	}
	if r := check(h.run("status", runID), "status"); !strings.Contains(r.stdout, "COMPLETED") {
		t.Errorf("status of %s is not COMPLETED:\n%s", runID, r.stdout)
	}
	if r := check(h.run("events", runID, "--json"), "events"); strings.Count(r.stdout, `"eventType"`) < 40 {
		t.Errorf("events --json lists %d events, want 2 per step and more", strings.Count(r.stdout, `"eventType"`))
	}
	check(h.run("export", runID, "--format", "csv"), "export")
	if r := check(h.run("verify", "--all"), "verify"); !strings.Contains(r.stdout, "verified 1 runs") || !strings.Contains(r.stdout, "SQL projection == Go reducer") {
		t.Errorf("verify --all on Postgres:\n%s", r.stdout)
	}
	if r := check(h.run("--help"), "--help"); !strings.Contains(r.stdout, "dvt:***@") {
		t.Errorf("--help does not show the store URL redacted:\n%s", r.stdout)
	}
	if strings.Contains(all.String(), password) {
		t.Errorf("the Postgres password was printed")
	}

	// The same database through a key=value DSN.
	kv := "postgres:host=" + urlParam(url, "host") + " port=" + urlParam(url, "port") + " user=dvt password=" + password +
		" dbname=" + strings.TrimPrefix(url[strings.Index(url, "@/")+1:strings.Index(url, "?")], "/") + " sslmode=disable"
	h.env["DVT_STORE"] = kv
	if r := check(h.run("runs"), "runs (key=value)"); !strings.Contains(r.stdout, runID) || strings.Contains(r.stdout+r.stderr, password) {
		t.Errorf("runs through %q: %s %s", pgtestRedacted(kv, password), r.stdout, r.stderr)
	}
}

// TestPostgresStoreReadOfEmptyDatabase: a read command on a database
// without a state store is invalid input (exit 2) and creates nothing.
func TestPostgresStoreReadOfEmptyDatabase(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.env["DVT_STORE"] = pgtest.URL(t)
	wantError(t, h.run("runs"), exitUsage, "INVALID_ARGUMENT", "no state store")
	// Still nothing: a second read says the same.
	wantError(t, h.run("runs"), exitUsage, "INVALID_ARGUMENT", "no state store")
}

func urlParam(url, name string) string {
	i := strings.Index(url, name+"=")
	v := url[i+len(name)+1:]
	if j := strings.IndexByte(v, '&'); j >= 0 {
		v = v[:j]
	}
	return v
}

func pgtestRedacted(s, secret string) string { return strings.ReplaceAll(s, secret, "***") }

// TestProcessSchedulersAndWorkersPostgres is TestProcessSchedulersAndWorkers
// on the Postgres state store: two scheduler and two worker processes, a
// schedule every second for 20+ ticks, one request and one run per tick,
// every run COMPLETED (the warehouse is SQLite).
func TestProcessSchedulersAndWorkersPostgres(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dsn := pgtest.URL(t)
	st, err := postgres.Open(context.Background(), dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := newHarness(t)
	h.env["DVT_STORE"] = dsn
	schedulersAndWorkers(t, bin, h, st)
}

// TestProcessWorkerCrashTakeoverPostgres is TestProcessWorkerCrashTakeover
// on the Postgres state store: a worker SIGKILLed mid-run 20 times, another
// takes the run over once its heartbeat and lease expire; every run
// completes, every key is stored once, no step takes effect twice, and
// verify --all passes.
func TestProcessWorkerCrashTakeoverPostgres(t *testing.T) {
	t.Parallel()
	crashTakeover(t, func(t *testing.T) string { return pgtest.URL(t) })
}

// BenchmarkShopPostgresStore is the runner on the Postgres state store
// beside the SQLite store, measured in the same run: README's example plan
// (19 steps) on a SQLite warehouse, once with each store. Reported: the
// runner's steps per second with each (medians over b.N) and their ratio.
//
// Run it with: go test -run '^$' -bench ShopPostgresStore -benchtime 5x ./cmd/dvtrun/
func BenchmarkShopPostgresStore(b *testing.B) {
	plan := filepath.Join(repoRoot(b), "plans", "shop", "plan.yaml")
	b.Chdir(b.TempDir()) // the CLI writes run artifacts under .dvt/ of its directory
	ctx := context.Background()
	const steps = 19
	var pgRate, liteRate, ratio []float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// Both stores exist and are migrated before the clock runs: what is
		// measured is the run's appends, leases and claims.
		dir := b.TempDir()
		url, litePath := pgtest.URL(b), filepath.Join(dir, "state.db")
		for _, open := range []func() (interface{ Close() error }, error){
			func() (interface{ Close() error }, error) { return postgres.Open(ctx, url, postgres.Options{}) },
			func() (interface{ Close() error }, error) { return sqlite.Open(ctx, litePath, sqlite.Options{}) },
		} {
			st, err := open()
			if err != nil {
				b.Fatal(err)
			}
			st.Close()
		}
		b.StartTimer()
		pg := timeRun(b, ctx, plan, map[string]string{"DVT_STORE": url, "DVT_WAREHOUSE": "sqlite:" + filepath.Join(dir, "wh-pg.db")})
		lite := timeRun(b, ctx, plan, map[string]string{"DVT_STORE": "sqlite:" + litePath, "DVT_WAREHOUSE": "sqlite:" + filepath.Join(dir, "wh-lite.db")})
		pgRate = append(pgRate, steps/pg.Seconds())
		liteRate = append(liteRate, steps/lite.Seconds())
		ratio = append(ratio, float64(pg)/float64(lite))
	}
	b.ReportMetric(median(pgRate), "pg-steps/s")
	b.ReportMetric(median(liteRate), "sqlite-steps/s")
	b.ReportMetric(median(ratio), "time-ratio")
}

// TestPostgresFollowWokenByNotify: `status --follow` on Postgres sees a
// run end as soon as the ending is appended, woken by NOTIFY, although its
// poll interval is an hour.
func TestPostgresFollowWokenByNotify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	st, err := postgres.Open(ctx, url, postgres.Options{PollOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f := storetest.NewFixture()
	f.Bootstrap(t, st)
	h := newHarness(t)
	h.env["DVT_STORE"] = url
	done := make(chan result, 1)
	go func() {
		done <- h.run("--tenant", f.Meta.TenantID, "--project", f.Meta.ProjectID, "--environment", f.Meta.EnvironmentID,
			"status", f.Meta.RunID, "--follow", "--interval", "1h")
	}()
	// The follower subscribes before its LISTEN connection opens; once the
	// LISTEN has run (the session is idle after it), an append wakes it.
	waitUntil(t, "the follower's LISTEN connection", func() bool {
		select {
		case r := <-done:
			t.Fatalf("status --follow ended before the run did: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		default:
		}
		var n int
		err := st.DB().QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'LISTEN dvt_%' AND state = 'idle'`).Scan(&n)
		return err == nil && n == 1
	})
	if _, err := st.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{f.Event(engine.RunCompleted, "", 1)}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.code != exitOK || !strings.Contains(r.stdout, "COMPLETED") {
			t.Fatalf("follow: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("status --follow did not see the run end within 30s of its append (its interval is 1h)")
	}
}
