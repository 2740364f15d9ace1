package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/store/postgres"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

// repoRoot is the module root (the directory holding go.mod).
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}

// statusOf returns the run's metadata and snapshot through `status --json`.
func (h *harness) statusOf(runID string) engine.Snapshot {
	h.t.Helper()
	r := h.run("status", "--json", runID)
	var got struct{ Snapshot engine.Snapshot }
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 0 {
		h.t.Fatalf("status --json %s: exit %d, %v: %s", runID, r.code, err, r.stderr)
	}
	return got.Snapshot
}

// onlyRun returns the id of the single run in the store.
func (h *harness) onlyRun() string {
	h.t.Helper()
	r := h.run("runs", "--json")
	var rows []struct {
		RunID string `json:"runId"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || len(rows) != 1 {
		h.t.Fatalf("runs --json: %v, %q %q", err, r.stdout, r.stderr)
	}
	return rows[0].RunID
}

// events returns the run's log straight from the store.
func (h *harness) events(runID string) []engine.RunEventRecord {
	h.t.Helper()
	var st interface {
		ListEvents(context.Context, string, int64, int) ([]engine.RunEventRecord, error)
		Close() error
	}
	var err error
	if dsn, ok := strings.CutPrefix(h.env["DVT_STORE"], "snowflake://"); ok {
		st, err = snowflake.Open(context.Background(), dsn, snowflake.Options{})
	} else if strings.HasPrefix(h.env["DVT_STORE"], "postgres") {
		st, err = postgres.Open(context.Background(), h.env["DVT_STORE"], postgres.Options{MustExist: true})
	} else {
		st, err = sqlite.Open(context.Background(), h.statePath(), sqlite.Options{MustExist: true})
	}
	if err != nil {
		h.t.Fatal(err)
	}
	defer st.Close()
	evs, err := st.ListEvents(context.Background(), runID, 0, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	return evs
}

// checkLog asserts what every finished run's log must satisfy: the Go
// reducer finds no invalid transition, and no step completed twice.
func (h *harness) checkLog(runID string) engine.Snapshot {
	h.t.Helper()
	evs := h.events(runID)
	snap := engine.Project(runID, evs)
	if snap.Inconsistent || len(snap.Violations) > 0 {
		h.t.Errorf("run %s: the reducer found invalid transitions: %+v", runID, snap.Violations)
	}
	completed := map[string]int{}
	for _, e := range evs {
		if e.EventType == engine.StepCompleted {
			completed[e.StepID]++
		}
	}
	for id, n := range completed {
		if n > 1 {
			h.t.Errorf("step %s completed %d times", id, n)
		}
	}
	return snap
}

func TestRunShopPlan(t *testing.T) {
	t.Parallel()
	planFile := filepath.Join(repoRoot(t), "plans", "shop", "plan.yaml")
	p, _, err := plan.Load(osSource{}, planFile)
	if err != nil {
		t.Fatalf("the example plan: %v", err)
	}
	h := newHarness(t)
	r := h.run("run", planFile)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, re := range []string{
		`Concurrency: 4 threads \(adapter='sqlite'\)`,
		`(?m)^1 of \d+ START `,
		`(?m)^\d+ of \d+ OK created sql (table|view) model \S+ \.{3,} \[OK in \d+\.\d\ds\]$`,
		`(?m)^\d+ of \d+ OK loaded seed file \S+ \.{3,} \[INSERT \d+ in \d+\.\d\ds\]$`,
		`(?m)^\d+ of \d+ PASS \S+ \.{3,} \[PASS in \d+\.\d\ds\]$`,
		`Finished running \d+ steps in \d+\.\d\ds\.`,
		`Done\. PASS=\d+ WARN=\d+ ERROR=0 SKIP=0 TOTAL=` + strconv.Itoa(len(p.Steps)),
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("output does not match %s:\n%s", re, r.stdout)
		}
	}
	runID := h.onlyRun()
	if !strings.Contains(r.stdout, runID) {
		t.Errorf("the output does not name run %s", runID)
	}
	snap := h.statusOf(runID)
	if snap.Status != engine.StatusCompleted || len(snap.Steps) != len(p.Steps) {
		t.Errorf("run %s, %d steps of %d", snap.Status, len(snap.Steps), len(p.Steps))
	}
	for _, s := range snap.Steps {
		if s.Status != engine.StepStatusSuccess {
			t.Errorf("step %s is %s", s.StepID, s.Status)
		}
	}
	h.checkLog(runID)
	if r := h.run("verify", "--all"); r.code != 0 || !strings.Contains(r.stdout, "verified 1 runs") {
		t.Errorf("verify --all: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestRunConsoleOutput(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// The bundle's sha256 is sha256sum's output for the plan and the
	// files it references, hashed again.
	manifest := ""
	for _, name := range []string{"plan.yaml", "customers.csv"} {
		data, err := os.ReadFile(fixture("ok", name))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		manifest += hex.EncodeToString(sum[:]) + "  " + name + "\n"
	}
	sum := sha256.Sum256([]byte(manifest))
	r := h.run("run", "--threads", "2", "--run-request-id", "req-42", "--plan-sha256", hex.EncodeToString(sum[:]), fixture("ok", "plan.yaml"))
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, re := range []string{
		`Concurrency: 2 threads \(adapter='sqlite'\)`,
		`(?m)^\d of 5 START seed file customers \.+ \[RUN\]$`,
		`(?m)^\d of 5 OK loaded seed file customers \.+ \[INSERT 3 in \d+\.\d\ds\]$`,
		`(?m)^\d of 5 OK created sql table model stg_customers \.+ \[OK in \d+\.\d\ds\]$`,
		`(?m)^\d of 5 OK created sql view model customer_names \.+ \[OK in \d+\.\d\ds\]$`,
		`(?m)^\d of 5 PASS not_null_stg_customers_id \.+ \[PASS in \d+\.\d\ds\]$`,
		`(?m)^\d of 5 WARN 1 short_names \.+ \[WARN 1 in \d+\.\d\ds\]$`,
		`(?m)^Done\. PASS=4 WARN=1 ERROR=0 SKIP=0 TOTAL=5$`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("output does not match %s:\n%s", re, r.stdout)
		}
	}
	runID := h.onlyRun()
	if s := h.statusOf(runID); s.Status != engine.StatusCompleted {
		t.Errorf("run is %s", s.Status)
	}
	if r := h.run("runs", "--json"); !strings.Contains(r.stdout, `"runRequestId": "req-42"`) || !strings.Contains(r.stdout, hex.EncodeToString(sum[:])) {
		t.Errorf("the run request id or the plan sha256 was not recorded:\n%s", r.stdout)
	}
	h.checkLog(runID)
}

func TestRunFailingModel(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		flags []string
		// model.independent is last in plan order: with one thread it runs
		// after model.broken failed, unless --fail-fast stopped scheduling.
		wantIndependent bool
	}{
		{"dependents skipped, others run", nil, true},
		{"fail-fast stops scheduling", []string{"--fail-fast"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			args := append([]string{"run", "--threads", "1"}, c.flags...)
			r := h.run(append(args, fixture("failing", "plan.yaml"))...)
			wantError(t, r, exitFailed, "STEP_FAILED", "model.broken")
			for _, re := range []string{
				`(?m)^\d of 5 ERROR creating sql table model broken \.+ \[ERROR in \d+\.\d\ds\]$`,
				`(?m)^(\d of 5 )?SKIP relation downstream.* \[SKIP\]$`,
				`(?m)^Done\. PASS=\d WARN=0 ERROR=1 SKIP=\d TOTAL=\d$`,
			} {
				if !regexp.MustCompile(re).MatchString(r.stdout) {
					t.Errorf("output does not match %s:\n%s", re, r.stdout)
				}
			}
			runID := h.onlyRun()
			snap := h.statusOf(runID)
			if snap.Status != engine.StatusFailed {
				t.Errorf("run is %s, want FAILED", snap.Status)
			}
			steps := map[string]engine.StepSnapshot{}
			for _, s := range snap.Steps {
				steps[s.StepID] = s
			}
			if s := steps["model.broken"]; s.Status != engine.StepStatusFailed || s.Error == nil {
				t.Errorf("model.broken: %+v", s)
			}
			for _, id := range []string{"model.downstream", "test.not_null_downstream_id"} {
				if s := steps[id]; s.Status != engine.StepStatusSkipped || s.SkipReason == "" {
					t.Errorf("%s: %s with reason %q, want SKIPPED with a reason", id, s.Status, s.SkipReason)
				}
			}
			ind := steps["model.independent"]
			if got := ind.Status == engine.StepStatusSuccess; got != c.wantIndependent {
				t.Errorf("model.independent is %q (reason %q)", ind.Status, ind.SkipReason)
			}
			h.checkLog(runID)
		})
	}
}

func TestRunSQLSyntaxError(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.run("run", fixture("syntax", "plan.yaml"))
	wantError(t, r, exitFailed, "STEP_FAILED", "model.typo")
	if !strings.Contains(r.stdout, "ERROR creating sql view model typo") {
		t.Errorf("output:\n%s", r.stdout)
	}
	snap := h.checkLog(h.onlyRun())
	if snap.Status != engine.StatusFailed || len(snap.Steps) != 1 || snap.Steps[0].Error == nil {
		t.Errorf("snapshot %+v", snap)
	}
}

const secretValue = "s3cr3t-T0ken-value"

func TestSecretsNeverLeak(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		setup func(h *harness) []string // returns extra run flags
	}{
		{"environment", func(h *harness) []string {
			h.env["DVT_SECRET_API_TOKEN"] = secretValue
			return nil
		}},
		{"secrets file", func(h *harness) []string {
			return []string{"--secrets-file", fixture("secret", "secrets.env")}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			args := append([]string{"run"}, c.setup(h)...)
			r := h.run(append(args, fixture("secret", "plan.yaml"))...)
			if r.code != 0 {
				t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
			}
			runID := h.onlyRun()
			outputs := map[string]string{"stdout": r.stdout, "stderr": r.stderr}
			for _, f := range []string{"json", "csv"} {
				e := h.run("export", runID, "--format", f)
				outputs["export "+f] = e.stdout + e.stderr
			}
			e := h.run("events", runID, "--json")
			outputs["events"] = e.stdout
			for name, out := range outputs {
				if strings.Contains(out, secretValue) {
					t.Errorf("%s contains the secret", name)
				}
			}
			// The log itself, queried in SQL.
			db, err := sql.Open("sqlite", "file:"+h.statePath()+"?mode=ro")
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var n int
			if err := db.QueryRow(`SELECT COUNT(*) FROM dvt_run_events WHERE instr(payload, ?) > 0 OR instr(idempotency_key, ?) > 0`, secretValue, secretValue).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("%d rows of dvt_run_events contain the secret", n)
			}
			// And every byte of the state store's files.
			files, _ := filepath.Glob(h.statePath() + "*")
			for _, f := range files {
				b, _ := os.ReadFile(f)
				if bytes.Contains(b, []byte(secretValue)) {
					t.Errorf("%s contains the secret", f)
				}
			}
		})
	}
	t.Run("missing secret", func(t *testing.T) {
		// Refused before the run is recorded (see
		// TestSecretsResolvedBeforeAnythingIsWritten), naming the secret
		// and the step.
		h := newHarness(t)
		r := h.run("run", fixture("secret", "plan.yaml"))
		wantError(t, r, exitUsage, "SECRET_NOT_FOUND", "API_TOKEN", "test.token_is_set")
	})
}

// cancelAfter is a stdout that cancels the run once the console has printed
// n finished steps: an interrupt at a known point, in-process.
type cancelAfter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	n      int
	cancel context.CancelFunc
}

var doneLineRE = regexp.MustCompile(`(?m)^\d+ of \d+ (OK|PASS|WARN)`)

func (w *cancelAfter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if len(doneLineRE.FindAllIndex(w.buf.Bytes(), -1)) >= w.n {
		w.cancel()
	}
	return len(p), nil
}

func TestInterruptAndResume(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	planFile := fixture("ok", "plan.yaml")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &cancelAfter{n: 2, cancel: cancel}
	var errb bytes.Buffer
	code := run(ctx, []string{"run", "--threads", "1", planFile}, out, &errb, func(k string) string { return h.env[k] })
	r := result{code, out.buf.String(), errb.String()}
	wantError(t, r, exitInterrupted, "INTERRUPTED", "dvtrun resume")
	runID := h.onlyRun()
	before := h.statusOf(runID)
	if before.Status.Terminal() {
		t.Fatalf("an interrupted run is %s: it could not be resumed", before.Status)
	}
	done := map[string]bool{}
	for _, s := range before.Steps {
		if s.Status == engine.StepStatusSuccess {
			done[s.StepID] = true
		}
	}
	if len(done) < 2 {
		t.Fatalf("%d steps succeeded before the interrupt, want at least 2", len(done))
	}

	r = h.run("resume", runID, planFile)
	if r.code != 0 {
		t.Fatalf("resume: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if again := h.run("resume", runID, planFile); again.code != 0 || !strings.Contains(again.stdout, "already COMPLETED") {
		t.Errorf("resuming a completed run: exit %d, %q %q", again.code, again.stdout, again.stderr)
	}
	after := h.checkLog(runID)
	if after.Status != engine.StatusCompleted || len(after.Steps) != 5 {
		t.Errorf("after resume: %s with %d steps", after.Status, len(after.Steps))
	}
	for _, s := range after.Steps {
		if s.Status != engine.StepStatusSuccess {
			t.Errorf("step %s is %s", s.StepID, s.Status)
		}
	}
	for id := range done {
		p, _, _ := plan.Load(osSource{}, planFile)
		st, _ := p.Step(id)
		if strings.Contains(r.stdout, "START "+describe(st)+" ") {
			t.Errorf("resume ran %s again", id)
		}
	}
}

func TestResumeRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	seedFailedRun(t, h.statePath())
	wantError(t, h.run("resume", fixedRunID, fixture("ok", "plan.yaml")), exitUsage, "PLAN_HASH_MISMATCH", fixedRunID)

	r := h.run("run", fixture("syntax", "plan.yaml"))
	if r.code != exitFailed {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var failed string
	for _, line := range strings.Split(r.stdout, "\n") {
		if id, ok := strings.CutPrefix(line, "Run "); ok && strings.HasSuffix(id, " FAILED") {
			failed = strings.TrimSuffix(id, " FAILED")
		}
	}
	n := len(h.events(failed))
	wantError(t, h.run("resume", failed, fixture("syntax", "plan.yaml")), exitUsage, "INVALID_ARGUMENT", "already FAILED")
	if got := len(h.events(failed)); got != n {
		t.Errorf("a refused resume appended %d events", got-n)
	}
}

func TestRunFailingTest(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.run("run", "--threads", "1", fixture("testfail", "plan.yaml"))
	wantError(t, r, exitFailed, "STEP_FAILED", "test.no_short_names")
	for _, re := range []string{
		`(?m)^2 of 3 FAIL 3 no_short_names \.+ \[FAIL 3 in \d+\.\d\ds\]$`,
		`(?m)^3 of 3 WARN 3 few_short_names \.+ \[WARN 3 in \d+\.\d\ds\]$`,
		`(?m)^Done\. PASS=1 WARN=1 ERROR=1 SKIP=0 TOTAL=3$`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("output does not match %s:\n%s", re, r.stdout)
		}
	}
	snap := h.checkLog(h.onlyRun())
	if snap.Status != engine.StatusFailed {
		t.Errorf("run is %s", snap.Status)
	}
}
