package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/queue"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
)

// targetsProject writes proj/dvtrun.yaml with dev and prod targets whose
// SQLite paths are relative to the file, and returns proj and a directory
// below it to run commands from.
func targetsProject(t *testing.T, h *harness, extra string) (proj, sub string) {
	t.Helper()
	proj = filepath.Join(h.dir, "proj")
	sub = filepath.Join(proj, "deep", "er")
	mkdirs(t, proj, "deep/er")
	cfg := `target: dev
targets:
  dev:  {store: "sqlite:.dvt/state.db", warehouse: "sqlite:.dvt/dev.db", environment: development}
  prod: {store: "sqlite:.dvt/state.db", warehouse: "sqlite:.dvt/prod.db", environment: production, threads: 2}
` + extra
	if err := os.WriteFile(filepath.Join(proj, configFileName), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return proj, sub
}

func tableCount(t *testing.T, path, table string) int {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		return -1
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil {
		return -1
	}
	return n
}

// dvtrun.yaml is found in a parent directory; its target's relative
// paths are the file's, wherever the command runs; --target and
// DVT_TARGET pick another target; a flag still wins; the file and target
// are named on stderr and never in --json output; status shows the target.
func TestTargetsAndConfigDiscovery(t *testing.T) {
	// Not parallel: it changes the working directory (t.Chdir).
	h := newHarness(t) // DVT_STORE and DVT_WAREHOUSE are set: the target wins over them
	proj, sub := targetsProject(t, h, "")
	okPlan := filepath.Join(h.dir, "plan")
	if err := os.CopyFS(okPlan, os.DirFS(fixture("ok"))); err != nil {
		t.Fatal(err)
	}
	t.Chdir(sub)
	cfgPath := filepath.Join(proj, configFileName)
	dev, prod := filepath.Join(proj, ".dvt", "dev.db"), filepath.Join(proj, ".dvt", "prod.db")

	r := h.run("run", filepath.Join(okPlan, "plan.yaml"))
	if r.code != 0 {
		t.Fatalf("run on the default target: %+v", r)
	}
	if want := "dvtrun: config " + cfgPath + ", target dev\n"; !strings.HasPrefix(r.stderr, want) {
		t.Errorf("stderr %q does not start with %q", r.stderr, want)
	}
	if tableCount(t, dev, "customers") != 3 || tableCount(t, prod, "customers") != -1 {
		t.Fatalf("dev run: dev has %d customers, prod %d", tableCount(t, dev, "customers"), tableCount(t, prod, "customers"))
	}
	if _, err := os.Stat(h.statePath()); err == nil {
		t.Errorf("the environment's DVT_STORE %s was used instead of the target's", h.statePath())
	}

	r = h.run("--target", "prod", "run", filepath.Join(okPlan, "plan.yaml"))
	if r.code != 0 || !strings.Contains(r.stdout, "Concurrency: 2 threads") {
		t.Fatalf("run --target prod (threads 2 from the target): %+v", r)
	}
	if tableCount(t, prod, "customers") != 3 {
		t.Fatalf("prod run: prod has %d customers", tableCount(t, prod, "customers"))
	}

	// The run records its target; status shows it (JSON on stdout alone).
	r = h.run("--target", "prod", "status", "last", "--json")
	var st struct {
		Run struct {
			EnvironmentID string `json:"environmentId"`
		} `json:"run"`
		Context struct {
			Target string `json:"target"`
		} `json:"context"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &st) != nil || st.Context.Target != "prod" || st.Run.EnvironmentID != "production" {
		t.Fatalf("status --json: %+v %+v", r, st)
	}
	if !strings.Contains(r.stderr, "target prod") {
		t.Errorf("stderr names no target: %q", r.stderr)
	}
	h.env["DVT_TARGET"] = "prod"
	if r := h.run("status", "last"); r.code != 0 || !strings.Contains(r.stdout, "Target:") || !strings.Contains(r.stdout, "prod") {
		t.Fatalf("status with DVT_TARGET=prod: %+v", r)
	}
	delete(h.env, "DVT_TARGET")

	// runs --target filters by the recorded target (on its store).
	if got := listed(t, h.run("runs", "--target", "prod", "--json")); len(got) != 1 {
		t.Errorf("runs --target prod: %v, want the one prod run", got)
	}
	if got := listed(t, h.run("runs", "--target", "gone", "--json")); len(got) != 0 {
		t.Errorf("runs --target gone: %v, want none", got)
	}

	// An explicit --warehouse wins over the target's.
	other := filepath.Join(h.dir, "other.db")
	if r := h.run("run", filepath.Join(okPlan, "plan.yaml"), "--warehouse", "sqlite:"+other); r.code != 0 || tableCount(t, other, "customers") != 3 {
		t.Fatalf("run --warehouse: %+v", r)
	}

	wantError(t, h.run("--target", "qa", "queue"), 2, "CONFIG_INVALID", "--target \"qa\" is not one of the targets", "dev, prod")
}

func TestTargetErrors(t *testing.T) {
	// Not parallel: it changes the working directory (t.Chdir).
	h := newHarness(t)
	// Explicit --config without targets: --target is refused, no line.
	cfg := h.writeConfig("sinks: []\n")
	wantError(t, h.run("--config", cfg, "--target", "prod", "queue"), 2, "CONFIG_INVALID", "has no targets")
	// Two targets on one warehouse, named by the key.
	bad := h.writeConfig("targets:\n  dev: {store: 'sqlite:s.db', warehouse: 'sqlite:w.db'}\n  prod: {store: 'sqlite:s.db', warehouse: 'sqlite:./w.db'}\n")
	wantError(t, h.run("--config", bad, "queue"), 2, "CONFIG_INVALID", "targets.prod.warehouse: is the warehouse of target dev too")
	conductor := h.writeConfig("targets:\n  tmp: {store: 'sqlite:s.db', warehouse: 'sqlite:w.db', engine: conductor}\n")
	wantError(t, h.run("--config", conductor, "--target", "tmp", "queue"), 2, "CONFIG_INVALID", `targets.tmp.engine: "conductor": want local or temporal`)
	noDefault := h.writeConfig("targets:\n  dev: {store: 'sqlite:s.db', warehouse: 'sqlite:w.db'}\n")
	wantError(t, h.run("--config", noDefault, "queue"), 2, "CONFIG_INVALID", "no default target")
	// No file anywhere up the tree.
	t.Chdir(t.TempDir())
	wantError(t, h.run("--target", "prod", "queue"), 2, "CONFIG_INVALID", "no configuration file")
}

// workUntilDone runs an in-process worker (with args before the command)
// until every request of the store is finished, and returns them.
func workUntilDone(t *testing.T, h *harness, global ...string) []queue.Request {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() { done <- h.runCtx(ctx, append(global, "worker", "--poll", "100ms")...) }()
	var rows []queue.Request
	waitUntil(t, "every request to finish", func() bool {
		r := h.run(append(global, "queue", "--all", "--json")...)
		if json.Unmarshal([]byte(r.stdout), &rows) != nil || len(rows) == 0 {
			return false
		}
		for _, q := range rows {
			if q.State != queue.StateDone {
				return false
			}
		}
		return true
	})
	cancel()
	if r := <-done; r.code != 0 {
		t.Fatalf("worker exit %d: %s", r.code, r.stderr)
	}
	return rows
}

// enqueue's --target --select --exclude --vars --full-refresh become the
// run's RunQueued when a worker runs the request; retry reuses the run's
// target, vars and interval (--vars overrides), on the target's warehouse
// even from the default target; an explicit other --target is refused.
func TestEnqueueCarriesTheRunShape(t *testing.T) {
	// Not parallel: it changes the working directory (t.Chdir).
	h := newHarness(t)
	proj, sub := targetsProject(t, h, "")
	for _, name := range []string{"ok", "gate"} {
		if err := os.CopyFS(filepath.Join(h.dir, name), os.DirFS(fixture(name))); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(sub)
	// The targets' store, for the test's own reads (h.events).
	h.env["DVT_STORE"] = "sqlite:" + filepath.Join(proj, ".dvt", "state.db")
	prod := filepath.Join(proj, ".dvt", "prod.db")

	r := h.run("--target", "prod", "enqueue", filepath.Join(h.dir, "ok", "plan.yaml"), "--select", "+stg_customers", "--exclude", "test.short_names",
		"--vars", `{"region": "eu", "days": 7}`, "--full-refresh", "--request-id", "shaped")
	if r.code != 0 {
		t.Fatalf("enqueue: %+v", r)
	}
	wantError(t, h.run("enqueue", filepath.Join(h.dir, "ok", "plan.yaml"), "--vars", "[1, 2]"), 2, "INVALID_ARGUMENT", "--vars")
	wantError(t, h.run("enqueue", filepath.Join(h.dir, "ok", "plan.yaml"), "--select", "nothing_here"), 2, "INVALID_ARGUMENT", "selects no step")
	if r := h.run("--target", "prod", "enqueue", filepath.Join(h.dir, "gate", "plan.yaml"), "--vars", "region: us", "--request-id", "gate"); r.code != 0 {
		t.Fatalf("enqueue gate: %+v", r)
	}
	rows := workUntilDone(t, h, "--target", "prod")
	var shaped, gate queue.Request
	for _, q := range rows {
		switch q.RunRequestID {
		case "shaped":
			shaped = q
		case "gate":
			gate = q
		}
	}
	if shaped.Outcome != "COMPLETED" || gate.Outcome != "FAILED" || shaped.EnvironmentID != "production" {
		t.Fatalf("outcomes: shaped %+v, gate %+v", shaped, gate)
	}
	q := queuedOf(t, h, shaped.RunID)
	if q.Target != "prod" || !q.FullRefresh || q.Vars["region"] != "eu" || fmt.Sprint(q.Vars["days"]) != "7" || q.Selection == nil ||
		strings.Join(q.Selection.Steps, ",") != "seed.customers,model.stg_customers,test.not_null_stg_customers_id" {
		t.Fatalf("RunQueued of the shaped run: %+v (selection %+v)", q, q.Selection)
	}
	// The selection ran on prod's warehouse: the view was not selected.
	if tableCount(t, prod, "stg_customers") != 3 || tableCount(t, prod, "customer_names") != -1 {
		t.Fatalf("prod warehouse: stg_customers %d, customer_names %d", tableCount(t, prod, "stg_customers"), tableCount(t, prod, "customer_names"))
	}

	// What the gate plan needs, made in prod's warehouse only.
	db, err := sql.Open("sqlite", prod)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE gate (open INTEGER); INSERT INTO gate VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	// dev's environment does not have prod's runs.
	wantError(t, h.run("retry", gate.RunID), 2, "RUN_NOT_FOUND", "environment development", "(config "+filepath.Join(proj, configFileName)+", target dev)")
	wantError(t, h.run("--target", "dev", "--environment", "production", "retry", gate.RunID), 2, "INVALID_ARGUMENT", "ran on target prod")
	// From the default target (dev) in prod's environment, the retry
	// still runs on prod's warehouse.
	r = h.run("--environment", "production", "retry", gate.RunID)
	if r.code != 0 || !strings.Contains(r.stdout, "Retrying 1 step(s)") {
		t.Fatalf("retry: %+v", r)
	}
	r = h.run("--target", "prod", "retry", gate.RunID, "--vars", `{"region": "ap"}`)
	if r.code != 0 {
		t.Fatalf("retry --vars: %+v", r)
	}
	retries := listed(t, h.run("--target", "prod", "runs", "--trigger", "retry", "--json"))
	if len(retries) != 2 {
		t.Fatalf("retries: %v", retries)
	}
	// runs lists newest first.
	if q := queuedOf(t, h, retries[1]); q.Target != "prod" || q.Vars["region"] != "us" || q.ParentRunID != gate.RunID {
		t.Errorf("retry's RunQueued: %+v, want target prod, the run's vars", q)
	}
	if q := queuedOf(t, h, retries[0]); q.Target != "prod" || q.Vars["region"] != "ap" {
		t.Errorf("retry --vars RunQueued: %+v, want the new vars", q)
	}
	if n := tableCount(t, filepath.Join(proj, ".dvt", "dev.db"), "gated"); n != -1 {
		t.Errorf("dev's warehouse got the retry's table (%d rows)", n)
	}
}

// A schedule's target, selection and vars ride on its requests, and
// `schedule backfill` gives each of seven daily ticks its own interval,
// recorded in each run's RunQueued.
func TestBackfillIntervalsReachTheRuns(t *testing.T) {
	// Not parallel: it changes the working directory (t.Chdir).
	h := newHarness(t)
	proj, sub := targetsProject(t, h, `schedules:
  - {name: shop-nightly, cron: "0 3 * * *", timezone: Europe/Berlin, plan: ../ok/plan.yaml, target: prod, select: "+stg_customers", vars: {region: eu}}
`)
	if err := os.CopyFS(filepath.Join(h.dir, "ok"), os.DirFS(fixture("ok"))); err != nil {
		t.Fatal(err)
	}
	t.Chdir(sub)
	h.env["DVT_STORE"] = "sqlite:" + filepath.Join(proj, ".dvt", "state.db") // for h.events
	// From the default target (dev): both targets keep their runs in one
	// store, so the prod schedule's requests are made here, in prod's
	// environment.
	r := h.run("schedule", "backfill", "shop-nightly", "--from", "2026-03-25T00:00:00Z", "--to", "2026-03-31T23:59:59Z")
	if r.code != 0 || !strings.Contains(r.stdout, "7 tick(s)") {
		t.Fatalf("backfill: %+v", r)
	}
	rows := workUntilDone(t, h, "--target", "prod")
	if len(rows) != 7 {
		t.Fatalf("%d requests", len(rows))
	}
	seen := map[string]bool{}
	for _, req := range rows {
		q := queuedOf(t, h, req.RunID)
		di := q.DataInterval
		if req.Outcome != "COMPLETED" || req.EnvironmentID != "production" || q.Target != "prod" || q.Vars["region"] != "eu" || q.Selection == nil || di == nil || di.Timezone != "Europe/Berlin" {
			t.Fatalf("request %s: %+v; RunQueued %+v", req.RunRequestID, req, q)
		}
		start, _ := time.Parse(engine.TimeFormat, di.Start)
		end, _ := time.Parse(engine.TimeFormat, di.End)
		if d := end.Sub(start); d != 24*time.Hour && d != 23*time.Hour { // 03-29 springs forward
			t.Errorf("interval %s..%s is %s", di.Start, di.End, d)
		}
		seen[di.Start] = true
	}
	if len(seen) != 7 {
		t.Errorf("%d distinct intervals, want 7", len(seen))
	}
	if r := h.run("--target", "prod", "status", rows[0].RunID); !strings.Contains(r.stdout, "Interval:") || !strings.Contains(r.stdout, "Europe/Berlin") || !strings.Contains(r.stdout, `{"region":"eu"}`) {
		t.Errorf("status shows no interval or vars:\n%s", r.stdout)
	}
}

// Two targets on the Snowflake test server: the same plan run with
// --target dev and --target prod lands in the DEV and PROD schemas of one
// database, each run recorded with its target in one Snowflake store.
func TestTwoTargetsOnSnowflake(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a Snowflake-protocol test server")
	}
	srv := sftest.Start(t)
	h := newHarness(t)
	h.env["DVT_TARGET_PATH"] = filepath.Join(h.dir, "target")
	cfg := fmt.Sprintf(`target: dev
targets:
  dev:  {store: "snowflake://%s", warehouse: "snowflake://%s", environment: dev}
  prod: {store: "snowflake://%s", warehouse: "snowflake://%s", environment: prod, threads: 8}
`, srv.DSN("DVT", "PUBLIC"), srv.DSN("ANALYTICS", "DEV"), srv.DSN("DVT", "PUBLIC"), srv.DSN("ANALYTICS", "PROD"))
	cfgPath := h.writeConfig(cfg)
	plan := filepath.Join(h.dir, "ok")
	if err := os.CopyFS(plan, os.DirFS(fixture("ok"))); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"dev", "prod"} {
		if r := h.run("--config", cfgPath, "--target", target, "run", filepath.Join(plan, "plan.yaml")); r.code != 0 {
			t.Fatalf("run --target %s: %+v", target, r)
		}
	}
	// Only prod's schema has the second seed row added after the dev run.
	f, err := os.OpenFile(filepath.Join(plan, "customers.csv"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("99,Zed,NZ\n")
	f.Close()
	if r := h.run("--config", cfgPath, "--target", "prod", "run", filepath.Join(plan, "plan.yaml")); r.code != 0 {
		t.Fatalf("second prod run: %+v", r)
	}
	count := func(schema string) int {
		var n int
		if err := srv.OpenDB(t, "ANALYTICS", schema).QueryRow("select count(*) from stg_customers").Scan(&n); err != nil {
			t.Fatalf("%s.stg_customers: %v", schema, err)
		}
		return n
	}
	if dev, prod := count("DEV"), count("PROD"); dev != 3 || prod != 4 {
		t.Errorf("stg_customers: DEV %d rows, PROD %d, want 3 and 4", dev, prod)
	}
	for target, want := range map[string]int{"dev": 1, "prod": 2} {
		if got := listed(t, h.run("--config", cfgPath, "--target", target, "runs", "--json")); len(got) != want {
			t.Errorf("runs of target %s: %v, want %d", target, got, want)
		}
	}
}

// A schedule whose target keeps its runs in another store is fired by
// that target's commands only: from another target, trigger says to add
// --target; with it, the request lands in that target's store.
func TestScheduleOfAnotherStoresTarget(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	plan := filepath.Join(h.dir, "ok")
	if err := os.CopyFS(plan, os.DirFS(fixture("ok"))); err != nil {
		t.Fatal(err)
	}
	cfg := h.writeConfig(`target: dev
targets:
  dev:  {store: "sqlite:dev-state.db", warehouse: "sqlite:dev.db"}
  prod: {store: "sqlite:prod-state.db", warehouse: "sqlite:prod.db"}
schedules:
  - {name: nightly, cron: "0 3 * * *", plan: ok/plan.yaml, target: prod}
`)
	wantError(t, h.run("--config", cfg, "schedule", "trigger", "nightly"), 2, "INVALID_ARGUMENT", "add --target prod")
	if r := h.run("--config", cfg, "--target", "prod", "schedule", "trigger", "nightly"); r.code != 0 {
		t.Fatalf("trigger on prod: %+v", r)
	}
	h.env["DVT_STORE"] = "sqlite:" + filepath.Join(h.dir, "prod-state.db")
	st := openTestStore(t, h)
	list, err := st.ListRequests(context.Background(), true)
	if err != nil || len(list) != 1 || list[0].Shape.Target != "prod" || list[0].EnvironmentID != "prod" || list[0].Shape.DataInterval == nil {
		t.Fatalf("prod's store: %+v %v", list, err)
	}
	dev := &harness{t: t, dir: h.dir, env: map[string]string{"DVT_STORE": "sqlite:" + filepath.Join(h.dir, "dev-state.db")}}
	if l, err := openTestStore(t, dev).ListRequests(context.Background(), true); err != nil || len(l) != 0 {
		t.Errorf("dev's store got %d requests (%v)", len(l), err)
	}
}

// A worker runs a request of another target of its store on that
// target's warehouse; a worker whose configuration lacks the request's
// target never runs it on its own warehouse: it hands the request back
// (another worker may know the target) until its attempts are spent.
func TestWorkerRunsARequestOnItsTarget(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	plan := filepath.Join(h.dir, "ok")
	if err := os.CopyFS(plan, os.DirFS(fixture("ok"))); err != nil {
		t.Fatal(err)
	}
	both := h.writeConfig(`target: dev
targets:
  dev: {store: "sqlite:state.db", warehouse: "sqlite:dev.db", environment: shared}
  qa:  {store: "sqlite:state.db", warehouse: "sqlite:qa.db", environment: shared}
`)
	onlyDev := filepath.Join(h.dir, "only-dev.yaml")
	if err := os.WriteFile(onlyDev, []byte("target: dev\ntargets:\n  dev: {store: \"sqlite:state.db\", warehouse: \"sqlite:dev.db\", environment: shared}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := h.run("--config", both, "--target", "qa", "enqueue", filepath.Join(plan, "plan.yaml"), "--request-id", "first"); r.code != 0 {
		t.Fatalf("enqueue: %+v", r)
	}
	rows := workUntilDone(t, h, "--config", onlyDev)
	if len(rows) != 1 || rows[0].Outcome != "FAILED" || rows[0].Attempts < 2 {
		t.Fatalf("a worker without target qa: %+v", rows)
	}
	if n := tableCount(t, filepath.Join(h.dir, "dev.db"), "customers"); n != -1 {
		t.Fatalf("the request ran on dev's warehouse (%d customers)", n)
	}
	if r := h.run("--config", both, "--target", "qa", "enqueue", filepath.Join(plan, "plan.yaml"), "--request-id", "second"); r.code != 0 {
		t.Fatalf("enqueue: %+v", r)
	}
	rows = workUntilDone(t, h, "--config", both) // on dev, its default
	for _, q := range rows {
		if q.RunRequestID == "second" && q.Outcome != "COMPLETED" {
			t.Fatalf("the dev worker on qa's request: %+v", q)
		}
	}
	if qa, dev := tableCount(t, filepath.Join(h.dir, "qa.db"), "customers"), tableCount(t, filepath.Join(h.dir, "dev.db"), "customers"); qa != 3 || dev != -1 {
		t.Errorf("customers: qa %d, dev %d; want 3 and none", qa, dev)
	}
}

// A local worker leaves the requests of a target on Temporal alone (a
// worker of that target starts their workflows): they are handed back,
// never run on the local runner, and the target's warehouse is untouched.
func TestLocalWorkerLeavesTemporalTargets(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	plan := filepath.Join(h.dir, "ok")
	if err := os.CopyFS(plan, os.DirFS(fixture("ok"))); err != nil {
		t.Fatal(err)
	}
	cfg := h.writeConfig(`target: dev
targets:
  dev: {store: "sqlite:state.db", warehouse: "sqlite:dev.db", environment: shared}
  tmp: {store: "sqlite:state.db", warehouse: "sqlite:tmp.db", environment: shared, engine: temporal}
`)
	if r := h.run("--config", cfg, "--target", "tmp", "enqueue", filepath.Join(plan, "plan.yaml")); r.code != 0 {
		t.Fatalf("enqueue: %+v", r)
	}
	rows := workUntilDone(t, h, "--config", cfg) // on dev, local
	if len(rows) != 1 || rows[0].Outcome != "FAILED" || rows[0].Attempts < 2 {
		t.Fatalf("the dev worker on tmp's request: %+v", rows)
	}
	if n := tableCount(t, filepath.Join(h.dir, "tmp.db"), "customers"); n != -1 {
		t.Fatalf("the request ran locally on tmp's warehouse (%d customers)", n)
	}
}

// resume continues a run on its recorded target's warehouse, even when
// the command's default target is another; an explicit other --target is
// refused.
func TestResumeOnTheRecordedTarget(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	cfg := h.writeConfig(`target: dev
targets:
  dev: {store: "sqlite:state.db", warehouse: "sqlite:dev.db", environment: shared}
  qa:  {store: "sqlite:state.db", warehouse: "sqlite:qa.db", environment: shared}
`)
	h.env["DVT_STORE"] = "sqlite:" + filepath.Join(h.dir, "state.db") // for queuedOf
	planFile := fixture("ok", "plan.yaml")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &cancelAfter{n: 2, cancel: cancel}
	var errb bytes.Buffer
	code := run(ctx, []string{"--config", cfg, "--target", "qa", "run", "--threads", "1", planFile}, out, &errb, func(k string) string { return h.env[k] })
	if code != exitInterrupted || !strings.Contains(errb.String(), "INTERRUPTED") {
		t.Fatalf("interrupted run: exit %d, %q", code, errb.String())
	}
	ids := listed(t, h.run("--config", cfg, "runs", "--json"))
	if len(ids) != 1 {
		t.Fatalf("runs: %v", ids)
	}
	runID := ids[0]
	wantError(t, h.run("--config", cfg, "--target", "dev", "resume", runID), 2, "INVALID_ARGUMENT", "ran on target qa")
	if r := h.run("--config", cfg, "resume", runID); r.code != 0 || !strings.Contains(r.stderr, "target qa") {
		t.Fatalf("resume on the default target: %+v", r)
	}
	if qa, dev := tableCount(t, filepath.Join(h.dir, "qa.db"), "stg_customers"), tableCount(t, filepath.Join(h.dir, "dev.db"), "stg_customers"); qa != 3 || dev != -1 {
		t.Errorf("stg_customers: qa %d, dev %d; want 3 and none", qa, dev)
	}
	if q := queuedOf(t, h, runID); q.Target != "qa" {
		t.Errorf("RunQueued target %q", q.Target)
	}
}
