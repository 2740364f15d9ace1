package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/store/postgres/pgtest"
)

// userShell runs the built dvtrun as a user in a terminal would: in a
// working directory, with the test's environment less DVT_* variables
// (doctestEnv) plus extra.
type userShell struct {
	t     *testing.T
	bin   string
	env   []string
	trace strings.Builder // every command and its output, for failures
}

func newUserShell(t *testing.T, extra ...string) *userShell {
	bin := buildBinary(t)
	return &userShell{t: t, bin: bin, env: append(doctestEnv(filepath.Dir(bin)), extra...)}
}

// run runs dvtrun args in dir and returns its result.
func (u *userShell) run(dir string, args ...string) result {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, u.bin, args...)
	cmd.Dir, cmd.Env = dir, u.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		u.t.Fatalf("dvtrun %s: %v", strings.Join(args, " "), err)
	}
	fmt.Fprintf(&u.trace, "$ dvtrun %s  # exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
	return result{code, out.String(), errb.String()}
}

// ok runs dvtrun args in dir and fails the test unless it exits 0.
func (u *userShell) ok(dir string, args ...string) result {
	u.t.Helper()
	r := u.run(dir, args...)
	if r.code != 0 {
		u.t.Fatalf("dvtrun %s: exit %d\nsession so far:\n%s", strings.Join(args, " "), r.code, u.trace.String())
	}
	return r
}

// scratchRepo is a directory holding a copy of plans/ and examples/, as
// the doc tests have it.
func scratchRepo(t *testing.T) string {
	t.Helper()
	root, dir := repoRoot(t), t.TempDir()
	for _, sub := range []string{"plans", "examples"} {
		if err := copyTree(filepath.Join(root, sub), filepath.Join(dir, sub)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestExampleDBTProject: the hand-made manifest of examples/dbt-project
// imports whole (every seed, model and test becomes a step) and its run
// passes every step; README.md's doc tests run the same commands.
func TestExampleDBTProject(t *testing.T) {
	u := newUserShell(t)
	dir := filepath.Join(scratchRepo(t), "examples", "dbt-project")
	r := u.ok(dir, "plan", "import-dbt", "target/manifest.json", "--project-dir", ".", "-o", "plan.yaml", "--strict")
	if !strings.Contains(r.stdout, "imported 8 steps from dbt manifest v12 into plan bakery@1") {
		t.Errorf("import-dbt: %s", r.stdout)
	}
	r = u.ok(dir, "run", "plan.yaml")
	if !strings.Contains(r.stdout, "Done. PASS=8 WARN=0 ERROR=0 SKIP=0 TOTAL=8") {
		t.Errorf("the bakery plan did not pass every step:\n%s", r.stdout)
	}
	r = u.ok(dir, "ls", "plan.yaml", "--select", "tag:nightly")
	if got := strings.Fields(r.stdout); strings.Join(got, " ") != "model.store_revenue test.unique_store_revenue_store_id" {
		t.Errorf("ls --select tag:nightly = %q, want the tagged model and its test", got)
	}
}

// TestExampleTwoTargets follows examples/two-targets/README.md: a run on
// each target lands in that target's store only; a backfill of the prod
// schedule enqueues 3 ticks in prod's queue, a worker on prod runs them,
// each with its tick's data interval, and both stores verify.
func TestExampleTwoTargets(t *testing.T) {
	u := newUserShell(t)
	dir := filepath.Join(scratchRepo(t), "examples", "two-targets")
	plan := filepath.Join("..", "..", "plans", "shop", "plan.yaml")
	u.ok(dir, "run", plan)
	u.ok(dir, "run", plan, "--target", "prod")
	for _, target := range []string{"dev", "prod"} {
		if runs := runsOf(t, u, dir, target); len(runs) != 1 || runs[0].Environment != target {
			t.Errorf("runs on %s after one run on each target: %+v", target, runs)
		}
	}

	r := u.ok(dir, "schedule", "backfill", "shop-daily", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-03T23:59:59Z", "--target", "prod")
	if !strings.Contains(r.stdout, "3 newly enqueued") {
		t.Fatalf("backfill: %s", r.stdout)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	worker := exec.CommandContext(ctx, u.bin, "worker", "--target", "prod", "--poll", "100ms")
	worker.Dir, worker.Env = dir, u.env
	var wout bytes.Buffer
	worker.Stdout, worker.Stderr = &wout, &wout
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	var runs []exampleRun
	for {
		runs = runsOf(t, u, dir, "prod")
		done := 0
		for _, r := range runs {
			if r.Status == "COMPLETED" {
				done++
			}
		}
		if done == 4 || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := worker.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := worker.Wait(); err != nil {
		t.Errorf("worker after SIGTERM: %v\n%s", err, wout.String())
	}
	var intervals []string
	for _, r := range runs {
		if r.Status != "COMPLETED" {
			t.Errorf("run %s on prod is %s\nworker:\n%s", r.RunID, r.Status, wout.String())
		}
		if r.Schedule == "shop-daily" {
			intervals = append(intervals, r.DataIntervalEnd[:10])
		}
	}
	slices.Sort(intervals)
	if strings.Join(intervals, " ") != "2026-01-01 2026-01-02 2026-01-03" {
		t.Errorf("the backfilled runs end their data intervals on %v, want the 3 ticks' days", intervals)
	}
	if dev := runsOf(t, u, dir, "dev"); len(dev) != 1 {
		t.Errorf("dev has %d runs after the prod backfill, want its 1", len(dev))
	}
	for _, target := range []string{"dev", "prod"} {
		u.ok(dir, "verify", "--all", "--target", target)
	}
}

// exampleRun is what these tests read of `dvtrun runs --json`.
type exampleRun struct {
	RunID           string `json:"runId"`
	Status          string `json:"status"`
	Environment     string `json:"environmentId"`
	Schedule        string `json:"schedule"`
	DataIntervalEnd string `json:"dataIntervalEnd"`
}

func runsOf(t *testing.T, u *userShell, dir, target string) []exampleRun {
	t.Helper()
	r := u.ok(dir, "runs", "--json", "--target", target)
	var runs []exampleRun
	if err := json.Unmarshal([]byte(r.stdout), &runs); err != nil {
		t.Fatalf("runs --json: %v\n%s", err, r.stdout)
	}
	return runs
}

// TestExamplePostgres follows examples/postgres/README.md against the
// test server: libpq's variables say where it is, the two databases the
// file names are created, and the shop plan runs, is listed and verifies.
func TestExamplePostgres(t *testing.T) {
	srv := pgtest.Get(t)
	admin, err := sql.Open("pgx", srv.KeyValueDSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, db := range []string{"dvtrun_state", "dvtrun_warehouse"} {
		for _, stmt := range []string{"DROP DATABASE IF EXISTS " + db + " WITH (FORCE)", "CREATE DATABASE " + db} {
			if _, err := admin.Exec(stmt); err != nil {
				t.Fatalf("%s: %v", stmt, err)
			}
		}
		t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS " + db + " WITH (FORCE)") })
	}
	u := newUserShell(t, "PGHOST="+srv.Dir, fmt.Sprintf("PGPORT=%d", srv.Port), "PGUSER=dvt")
	dir := filepath.Join(scratchRepo(t), "examples", "postgres")
	r := u.ok(dir, "run", filepath.Join("..", "..", "plans", "shop", "plan.yaml"))
	if !strings.Contains(r.stdout, "Done. PASS=19 WARN=0 ERROR=0 SKIP=0 TOTAL=19") {
		t.Fatalf("the shop plan on Postgres:\n%s", r.stdout)
	}
	runID := runIDFrom(t, r.stdout)
	if r := u.ok(dir, "runs"); !strings.Contains(r.stdout, runID) {
		t.Errorf("runs does not list %s:\n%s", runID, r.stdout)
	}
	u.ok(dir, "verify", "--all")
	if n := pgCount(t, srv.KeyValueDSN("dvtrun_warehouse"), "customer_summary"); n == 0 {
		t.Error("the warehouse database has no customer_summary rows")
	}
	if _, err := os.Stat(filepath.Join(dir, ".dvt", "state.db")); err == nil {
		t.Error("a SQLite state store appeared next to the Postgres example")
	}
}
