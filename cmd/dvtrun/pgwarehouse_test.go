package main

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/store/postgres/pgtest"
)

// pgCount is count(*) of a relation in the Postgres database at url.
func pgCount(t *testing.T, url, relation string) int {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow("select count(*) from " + relation).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", relation, err)
	}
	return n
}

// TestPostgresWarehouseShopAndJaffle: README's example plan and dbt's
// jaffle_shop (the Postgres manifest of ../shared/reference, imported with
// --keep-schemas: every relation public.<name>) run with --store
// postgres://… --warehouse postgres://… (two databases of the test server,
// URLs with a password that is never printed; jaffle_shop's second run
// names the warehouse with a key=value DSN), twice each: the second run
// replaces every seed and model in place. Then verify --all.
func TestPostgresWarehouseShopAndJaffle(t *testing.T) {
	t.Parallel()
	ref, manifest := jaffleReference(t)
	const password = "Wh-S3cret-pw"
	withPassword := func(url string) string {
		return strings.Replace(url, "postgres://dvt@", "postgres://dvt:"+password+"@", 1)
	}
	storeURL, whURL := withPassword(pgtest.URL(t)), withPassword(pgtest.URL(t))
	h := newHarness(t)
	h.env["DVT_STORE"], h.env["DVT_WAREHOUSE"] = storeURL, whURL
	var all strings.Builder
	check := func(r result, args ...string) result {
		t.Helper()
		all.WriteString(r.stdout + r.stderr)
		if r.code != 0 {
			t.Fatalf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
		}
		return r
	}
	for range 2 {
		r := check(h.run("run", filepath.Join("..", "..", "plans", "shop", "plan.yaml")), "run shop")
		if !strings.Contains(r.stdout, "Done. PASS=19 WARN=0 ERROR=0 SKIP=0 TOTAL=19") {
			t.Fatalf("the example plan did not pass on the Postgres warehouse:\n%s", r.stdout)
		}
	}
	for rel, want := range map[string]int{"raw_customers": 30, "raw_products": 20, "raw_orders": 48, "stg_orders": 48,
		"orders_enriched": 48, "customer_summary": 30, "product_sales": 20} {
		if got := pgCount(t, whURL, rel); got != want {
			t.Errorf("shop: %s has %d rows, want %d", rel, got, want)
		}
	}

	plan := filepath.Join(h.dir, "jaffle_shop.yaml")
	check(h.run("plan", "import-dbt", manifest, "--project-dir", filepath.Join(ref, "jaffle_shop"), "--keep-schemas", "-o", plan), "import-dbt")
	text, err := os.ReadFile(plan)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), "name: public.customers") || !strings.Contains(string(text), `from "public"."stg_orders"`) || strings.Contains(string(text), `"postgres".`) {
		t.Fatalf("the imported plan does not keep schema-qualified names:\n%.2000s", text)
	}
	// The second run reaches the warehouse through a key=value DSN.
	kv := "postgres:host=" + urlParam(whURL, "host") + " port=" + urlParam(whURL, "port") + " user=dvt password=" + password +
		" dbname=" + strings.TrimPrefix(whURL[strings.Index(whURL, "@/")+1:strings.Index(whURL, "?")], "/") + " sslmode=disable"
	for _, wh := range []string{whURL, kv} {
		h.env["DVT_WAREHOUSE"] = wh
		r := check(h.run("run", plan), "run jaffle_shop")
		if !strings.Contains(r.stdout, "Done. PASS=28 WARN=0 ERROR=0 SKIP=0 TOTAL=28") {
			t.Fatalf("jaffle_shop did not pass on the Postgres warehouse:\n%s", r.stdout)
		}
	}
	for rel, want := range map[string]int{"public.customers": 100, "public.orders": 99, "public.raw_payments": 113, "public.stg_customers": 100} {
		if got := pgCount(t, whURL, rel); got != want {
			t.Errorf("jaffle_shop: %s has %d rows, want %d", rel, got, want)
		}
	}
	if r := check(h.run("verify", "--all"), "verify"); !strings.Contains(r.stdout, "verified 4 runs") {
		t.Errorf("verify --all:\n%s", r.stdout)
	}
	if strings.Contains(all.String(), password) {
		t.Errorf("the Postgres password was printed")
	}
}

// TestExactlyOncePostgresWarehouse is TestExactlyOnceProcesses's
// KilledBetweenCommitAndAppend on the Postgres warehouse (the state store
// stays SQLite, which the test holds locked to open the window): the
// runner is SIGKILLed after a step's transaction, ledger row included,
// committed in Postgres and before its StepCompleted is stored; resume
// completes the step from the ledger, and every effect happened once.
func TestExactlyOncePostgresWarehouse(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	plan, err := filepath.Abs(fixture("effects", "plan.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	killedBetweenCommitAndAppend(t, bin, plan, newSeed(t), func(t *testing.T) *harness {
		h := newHarness(t)
		h.env["DVT_WAREHOUSE"] = pgtest.URL(t)
		return h
	})
}

// BenchmarkShopPostgresWarehouse is the runner on the Postgres warehouse
// beside the SQLite warehouse, measured in the same run: README's example
// plan (19 steps) with a SQLite state store, once with each warehouse, each
// a fresh database. Reported: the runner's steps per second with each
// (medians over b.N) and their time ratio.
//
// Run it with: go test -run '^$' -bench ShopPostgresWarehouse -benchtime 5x ./cmd/dvtrun/
func BenchmarkShopPostgresWarehouse(b *testing.B) {
	plan := filepath.Join(repoRoot(b), "plans", "shop", "plan.yaml")
	b.Chdir(b.TempDir()) // the CLI writes run artifacts under .dvt/ of its directory
	ctx := context.Background()
	const steps = 19
	var pgRate, liteRate, ratio []float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := b.TempDir()
		url := pgtest.URL(b) // created before the clock runs
		b.StartTimer()
		pg := timeRun(b, ctx, plan, map[string]string{"DVT_STORE": "sqlite:" + filepath.Join(dir, "state-pg.db"), "DVT_WAREHOUSE": url})
		lite := timeRun(b, ctx, plan, map[string]string{"DVT_STORE": "sqlite:" + filepath.Join(dir, "state-lite.db"), "DVT_WAREHOUSE": "sqlite:" + filepath.Join(dir, "wh.db")})
		pgRate = append(pgRate, steps/pg.Seconds())
		liteRate = append(liteRate, steps/lite.Seconds())
		ratio = append(ratio, float64(pg)/float64(lite))
	}
	b.ReportMetric(median(pgRate), "pg-wh-steps/s")
	b.ReportMetric(median(liteRate), "sqlite-wh-steps/s")
	b.ReportMetric(median(ratio), "time-ratio")
}

// TestPostgresWarehouseUnusable: a Postgres warehouse that cannot be
// reached stops a run before it starts with STORE_UNAVAILABLE (exit 4),
// one line that never shows the password; a DSN that does not parse is
// invalid input (exit 2).
func TestPostgresWarehouseUnusable(t *testing.T) {
	t.Parallel()
	const password = "Unreach-pw-77"
	plan := filepath.Join("..", "..", "plans", "shop", "plan.yaml")
	for _, tc := range []struct {
		name, warehouse string
		exit            int
		code            string
	}{
		{"no server", "postgres://dvt:" + password + "@/db?host=" + filepath.Join(t.TempDir(), "no-socket") + "&connect_timeout=2", exitUnavailable, "STORE_UNAVAILABLE"},
		{"DSN does not parse", "postgres:host=x password=" + password + " port=notaport", exitUsage, "INVALID_ARGUMENT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.env["DVT_WAREHOUSE"] = tc.warehouse
			r := h.run("run", plan)
			wantError(t, r, tc.exit, tc.code)
			if strings.Contains(r.stdout+r.stderr, password) {
				t.Errorf("the password was printed: %s", r.stderr)
			}
		})
	}
}

// TestPostgresWarehouseKilledMidStep: a runner SIGKILLed while a table
// model's CREATE TABLE … AS runs leaves nothing in the warehouse — no
// table, no half-built temporary, no ledger row: the server rolls the
// step's transaction back — and the server stops the statement within
// seconds (client_connection_check_interval) instead of running it to its
// end. While it ran, pg_stat_activity named the run and the step
// (application_name).
func TestPostgresWarehouseKilledMidStep(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	h := newHarness(t)
	wh := pgtest.URL(t)
	h.env["DVT_WAREHOUSE"] = wh
	plan := filepath.Join(h.dir, "slow.yaml")
	if err := os.WriteFile(plan, []byte("planId: slow\nplanVersion: \"1\"\nsteps:\n"+
		"  - {id: model.slow, kind: model, materialized: table, sql: \"select 1 as x from pg_sleep(60)\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", wh)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	active := func() string {
		var app sql.NullString
		err := db.QueryRow("select application_name from pg_stat_activity where query like '%pg_sleep(60)%' and state = 'active' and pid <> pg_backend_pid()").Scan(&app)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Fatal(err)
		}
		return app.String
	}
	env := append(os.Environ(), "DVT_STORE="+h.env["DVT_STORE"], "DVT_WAREHOUSE="+wh)
	p := startProc(t, bin, env, "run", plan)
	waitUntil(t, "the model's statement running on the server", func() bool { return active() != "" })
	if app := active(); !strings.HasPrefix(app, "dvtrun ") || !strings.Contains(app, " model.slow #1") {
		t.Errorf("application_name of the step's session %q, want dvtrun <run> model.slow #1", app)
	}
	p.cmd.Process.Kill()
	p.wait(t)
	killed := time.Now()
	for active() != "" {
		if time.Since(killed) > 10*time.Second {
			t.Fatal("the killed runner's statement still runs on the server 10s later")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var left, ledger int
	if err := db.QueryRow("select count(*) from pg_class where relname in ('slow', 'dvt_tmp__slow')").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("select count(*) from dvt_step_ledger").Scan(&ledger); err != nil {
		t.Fatal(err)
	}
	if left != 0 || ledger != 0 {
		t.Errorf("after the kill: %d relations and %d ledger rows left, want none", left, ledger)
	}
}
