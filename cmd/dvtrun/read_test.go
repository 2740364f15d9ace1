package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// fixedRunID names the seeded run, so that exports can be golden files.
const fixedRunID = "0b6f3f5e-8d3a-4c55-9d38-2a9d6c1e7a01"

// seedFailedRun writes, through the store API, a run in which step a
// succeeded, b failed and c was skipped: the read commands are checked
// against it without depending on the runner.
func seedFailedRun(t *testing.T, path string) {
	t.Helper()
	seedRun(t, path, fixedRunID, "default", "default", "dev", func(f *storetest.Fixture) []engine.RunEventWrite {
		return []engine.RunEventWrite{
			f.Event(engine.StepStarted, "model.a", 1),
			f.Event(engine.StepCompleted, "model.a", 1),
			f.Event(engine.StepStarted, "model.b", 1),
			f.Event(engine.StepFailed, "model.b", 1),
			f.Event(engine.StepSkipped, "model.c", 1),
			f.Event(engine.RunFailed, "", 1),
		}
	})
}

// seedRun bootstraps a run in the given scope and appends the events
// events returns.
func seedRun(t *testing.T, path, runID, tenant, project, env string, events func(f *storetest.Fixture) []engine.RunEventWrite) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f := storetest.NewFixture()
	f.Meta.RunID = runID
	f.Meta.TenantID, f.Meta.ProjectID, f.Meta.EnvironmentID = tenant, project, env
	f.Bootstrap(t, st)
	if _, err := st.AppendAndEnqueue(ctx, runID, events(f)); err != nil {
		t.Fatal(err)
	}
}

func countRuns(t *testing.T, path string) int {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	runs, err := st.ListRuns(context.Background(), store.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return len(runs)
}

func TestStatus(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	seedFailedRun(t, h.statePath())

	r := h.run("status", fixedRunID)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"Status:", "FAILED", "model.a", "SUCCESS", "model.b", "STEP_FAILED", "model.c", "SKIPPED", "dependency failed", "shop_plan@7"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status does not show %q:\n%s", want, r.stdout)
		}
	}
	if regexp.MustCompile(`(?m)^line 2`).MatchString(r.stdout) {
		t.Errorf("a multi-line error message broke the step table:\n%s", r.stdout)
	}

	r = h.run("status", "--json", fixedRunID)
	var got struct {
		Run      engine.RunMetadata
		Snapshot engine.Snapshot
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	if got.Snapshot.Status != engine.StatusFailed || len(got.Snapshot.Steps) != 3 || got.Run.PlanID != "shop_plan" {
		t.Errorf("status --json: %+v", got)
	}
	wantSteps := map[string]engine.StepStatus{"model.a": engine.StepStatusSuccess, "model.b": engine.StepStatusFailed, "model.c": engine.StepStatusSkipped}
	for _, s := range got.Snapshot.Steps {
		if wantSteps[s.StepID] != s.Status {
			t.Errorf("step %s is %s, want %s", s.StepID, s.Status, wantSteps[s.StepID])
		}
	}
}

func TestEventsAndRuns(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	seedFailedRun(t, h.statePath())
	cases := []struct {
		args     []string
		wantSeqs []int64
	}{
		{[]string{"events", "--json", fixedRunID}, []int64{1, 2, 3, 4, 5, 6, 7, 8}},
		{[]string{"events", fixedRunID, "--json", "--after", "6"}, []int64{7, 8}},
		{[]string{"events", "--after", "2", "--limit", "2", "--json", fixedRunID}, []int64{3, 4}},
		{[]string{"events", "--after", "8", "--json", fixedRunID}, []int64{}},
	}
	for _, c := range cases {
		r := h.run(c.args...)
		var evs []engine.RunEventRecord
		if err := json.Unmarshal([]byte(r.stdout), &evs); err != nil || r.code != 0 {
			t.Fatalf("%v: exit %d, %v\n%s%s", c.args, r.code, err, r.stdout, r.stderr)
		}
		var seqs []int64
		for _, e := range evs {
			seqs = append(seqs, e.RunSeq)
		}
		if len(seqs) != len(c.wantSeqs) || (len(seqs) > 0 && (seqs[0] != c.wantSeqs[0] || seqs[len(seqs)-1] != c.wantSeqs[len(c.wantSeqs)-1])) {
			t.Errorf("%v: seqs %v, want %v", c.args, seqs, c.wantSeqs)
		}
	}
	r := h.run("events", fixedRunID)
	if lines := strings.Count(r.stdout, "\n"); r.code != 0 || lines != 9 || !strings.Contains(r.stdout, "StepSkipped") {
		t.Errorf("events (table): exit %d, %d lines:\n%s", r.code, lines, r.stdout)
	}

	r = h.run("runs")
	if r.code != 0 || !regexp.MustCompile(fixedRunID+` +shop_plan@7 +FAILED +1/3 +0\.007s `).MatchString(r.stdout) {
		t.Errorf("runs: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = h.run("runs", "--json", "--limit", "5")
	var rows []struct {
		RunID  string `json:"runId"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || len(rows) != 1 || rows[0].RunID != fixedRunID || rows[0].Status != "FAILED" {
		t.Errorf("runs --json: %v %+v", err, rows)
	}
	// Every read is scoped: another tenant does not see the run.
	r = h.run("--tenant", "other", "runs", "--json")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("runs for another tenant: %q", r.stdout)
	}
}

func TestExport(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	seedFailedRun(t, h.statePath())
	for _, format := range []string{"json", "csv"} {
		t.Run(format, func(t *testing.T) {
			r := h.run("export", fixedRunID, "--format", format)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			golden := fixture("export", "failed_run."+format)
			if *update {
				if err := os.WriteFile(golden, []byte(r.stdout), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if r.stdout != string(want) {
				t.Errorf("export differs from %s:\n%s", golden, r.stdout)
			}
			out := filepath.Join(h.dir, "audit."+format)
			if r := h.run("export", fixedRunID, "--format", format, "-o", out); r.code != 0 || r.stdout != "" {
				t.Fatalf("-o: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
			if got, _ := os.ReadFile(out); string(got) != string(want) {
				t.Errorf("-o %s wrote something else than stdout", out)
			}
		})
	}
	// The CSV columns are the contract's, in its order, one row per step.
	f, err := os.Open(fixture("export", "failed_run.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := "run_id,workflow_name,run_status,run_started_at,run_finished_at,run_duration_ms,step_index,step_name,step_status,step_started_at,step_finished_at,step_duration_ms,step_error_code,step_error_message,step_metrics_json"
	if strings.Join(recs[0], ",") != want || len(recs) != 4 {
		t.Errorf("CSV header %v and %d rows", recs[0], len(recs)-1)
	}
}

func TestExportWritesNothingOnError(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	seedFailedRun(t, h.statePath())
	out := filepath.Join(h.dir, "audit.json")
	r := h.run("export", "11111111-2222-4333-8444-555555555555", "-o", out)
	wantError(t, r, exitUsage, "RUN_NOT_FOUND")
	if _, err := os.Stat(out); err == nil {
		t.Error("a failed export left a file")
	}
}

// TestStoreErrors covers what can be wrong with the state store a command
// is pointed at.
func TestStoreErrors(t *testing.T) {
	t.Parallel()
	unknown := "11111111-2222-4333-8444-555555555555"
	readCmds := [][]string{
		{"runs"}, {"status", unknown}, {"events", unknown}, {"export", unknown},
		{"cancel", unknown}, {"signal", unknown, "pause"}, {"verify", "--all"},
		{"resume", unknown, fixture("ok", "plan.yaml")},
	}
	for _, args := range readCmds {
		t.Run("missing database/"+args[0], func(t *testing.T) {
			h := newHarness(t)
			h.env["DVT_STORE"] = "sqlite:" + filepath.Join(h.dir, "sub", "state.db")
			r := h.run(args...)
			wantError(t, r, exitUsage, "INVALID_ARGUMENT", "no state store")
			if _, err := os.Stat(filepath.Join(h.dir, "sub")); err == nil {
				t.Error("a read command created the store's directory")
			}
		})
		t.Run("corrupt database/"+args[0], func(t *testing.T) {
			h := newHarness(t)
			garbage := strings.Repeat("this is not an SQLite database\n", 200)
			if err := os.WriteFile(h.statePath(), []byte(garbage), 0o644); err != nil {
				t.Fatal(err)
			}
			r := h.run(args...)
			wantError(t, r, exitFailed, "STORE_CORRUPT")
			if got, _ := os.ReadFile(h.statePath()); string(got) != garbage {
				t.Error("the corrupt file was modified")
			}
		})
	}
	for _, args := range readCmds[1:6] {
		t.Run("unknown run/"+args[0], func(t *testing.T) {
			h := newHarness(t)
			seedFailedRun(t, h.statePath())
			wantError(t, h.run(args...), exitUsage, "RUN_NOT_FOUND", unknown)
		})
	}
	odd := []struct {
		name  string
		setup func(path string) error
		exit  int
		code  string
	}{
		// A database without tables is a store whose creation never
		// finished: readers complete it as writers do (issue 16), and find
		// no such run in it.
		{"empty file", func(p string) error { return os.WriteFile(p, nil, 0o644) }, exitUsage, "RUN_NOT_FOUND"},
		{"a directory", func(p string) error { return os.Mkdir(p, 0o755) }, exitUnavailable, "STORE_UNAVAILABLE"},
	}
	for _, o := range odd {
		t.Run(o.name, func(t *testing.T) {
			h := newHarness(t)
			if err := o.setup(h.statePath()); err != nil {
				t.Fatal(err)
			}
			wantError(t, h.run("status", unknown), o.exit, o.code)
		})
	}
	t.Run("run of another tenant", func(t *testing.T) {
		h := newHarness(t)
		seedFailedRun(t, h.statePath())
		wantError(t, h.run("--tenant", "acme", "status", fixedRunID), exitUsage, "RUN_NOT_FOUND")
	})
	t.Run("unwritable store directory", func(t *testing.T) {
		h := newHarness(t)
		// A regular file where a directory should be: unwritable even for root.
		blocker := filepath.Join(h.dir, "blocker")
		if err := os.WriteFile(blocker, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		r := h.run("run", "--store", "sqlite:"+filepath.Join(blocker, "state.db"), fixture("ok", "plan.yaml"))
		wantError(t, r, exitUnavailable, "STORE_UNAVAILABLE", "blocker")
	})
	t.Run("signal to a finished run", func(t *testing.T) {
		h := newHarness(t)
		seedFailedRun(t, h.statePath())
		wantError(t, h.run("cancel", fixedRunID), exitUsage, "INVALID_ARGUMENT", "already FAILED")
	})
}

// TestInvalidPlans: a plan that fails validation is refused with exit 2
// before anything is written — no run row, no store created.
func TestInvalidPlans(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, plan string
		extra      []string
		code       string
		msgs       []string
	}{
		{"cycle", "cycle", nil, "PLAN_INVALID", []string{"dependency cycle: model.a -> model.c -> model.b -> model.a"}},
		{"unknown dependency", "unknowndep", nil, "PLAN_INVALID", []string{"step model.a", "unknown step model.ghost"}},
		{"duplicate id", "duplicate", nil, "PLAN_INVALID", []string{"step model.a: duplicate id"}},
		{"missing CSV", "missingcsv", nil, "PLAN_INVALID", []string{"step seed.customers", "customers.csv", "no such file"}},
		{"malformed CSV", "badcsv", nil, "PLAN_INVALID", []string{"step seed.customers", "customers.csv", "fields"}},
		{"missing plan file", "nope", nil, "PLAN_INVALID", []string{"nope"}},
		{"sha256 mismatch", "ok", []string{"--plan-sha256", strings.Repeat("0", 64)}, "PLAN_HASH_MISMATCH", []string{strings.Repeat("0", 64)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plan := fixture(c.plan, "plan.yaml")
			h := newHarness(t)
			// A fresh directory: the refused run must not even create the store.
			args := append([]string{"run"}, c.extra...)
			wantError(t, h.run(append(args, plan)...), exitUsage, c.code, c.msgs...)
			if _, err := os.Stat(h.statePath()); err == nil {
				t.Error("a refused plan created the state store")
			}
			// An existing store: no run row is added.
			seedFailedRun(t, h.statePath())
			wantError(t, h.run(append(args, plan)...), exitUsage, c.code, c.msgs...)
			if n := countRuns(t, h.statePath()); n != 1 {
				t.Errorf("%d runs recorded, want the seeded one only", n)
			}
			args = append([]string{"plan", "validate"}, c.extra...)
			wantError(t, h.run(append(args, plan)...), exitUsage, c.code, c.msgs...)
		})
	}
	t.Run("problems as JSON", func(t *testing.T) {
		h := newHarness(t)
		r := h.run("plan", "validate", "--json", fixture("unknowndep", "plan.yaml"))
		wantError(t, r, exitUsage, "PLAN_INVALID")
		var v planVerdict
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
			t.Fatal(err)
		}
		if v.Valid || v.Code != engine.CodePlanInvalid || len(v.Problems) != 1 || v.Problems[0] != "step model.a: depends on unknown step model.ghost" {
			t.Errorf("verdict %+v", v)
		}
	})
	t.Run("valid", func(t *testing.T) {
		r := newHarness(t).run("plan", "validate", fixture("ok", "plan.yaml"))
		if r.code != 0 || !strings.Contains(r.stdout, "OK") || !strings.Contains(r.stdout, "5 steps") {
			t.Errorf("exit %d: %s%s", r.code, r.stdout, r.stderr)
		}
	})
}

// TestInconsistentRun: a log with an invalid transition (written with the
// store's append-time check off) is shown as INCONSISTENT with the ignored
// event, and both projections agree on it.
func TestInconsistentRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	st, err := sqlite.Open(ctx, h.statePath(), sqlite.Options{DisableTransitionChecks: true})
	if err != nil {
		t.Fatal(err)
	}
	f := storetest.NewFixture()
	f.Meta.TenantID, f.Meta.ProjectID, f.Meta.EnvironmentID = "default", "default", "dev"
	f.Bootstrap(t, st)
	// model.x completes without having started: Policy A ignores it.
	if _, err := st.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{f.Event(engine.StepCompleted, "model.x", 1)}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	r := h.run("status", f.Meta.RunID)
	for _, want := range []string{"INCONSISTENT", "StepCompleted", "SEQ", "3 "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status does not show %q:\n%s", want, r.stdout)
		}
	}
	// Policy A (issue 8, Found 7): the invalid event creates no step.
	if regexp.MustCompile(`(?m)^model\.x`).MatchString(r.stdout) {
		t.Errorf("status lists model.x as a step:\n%s", r.stdout)
	}
	if r := h.run("runs"); !strings.Contains(r.stdout, "RUNNING (INCONSISTENT)") || !regexp.MustCompile(`INCONSISTENT\)\s+0/0\s`).MatchString(r.stdout) {
		t.Errorf("runs does not flag the run with 0/0 steps:\n%s", r.stdout)
	}
	if r := h.run("export", f.Meta.RunID, "--format", "csv"); r.code != 0 || strings.Contains(r.stdout, "model.x") || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("CSV export has a row for model.x:\n%s", r.stdout)
	}
	if r := h.run("verify", f.Meta.RunID); r.code != 0 {
		t.Errorf("verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Read commands never write (issue 8, Found 8): no alert was recorded.
	for _, args := range [][]string{{"status", f.Meta.RunID, "--json"}, {"events", f.Meta.RunID}, {"export", f.Meta.RunID}, {"verify", "--all"}} {
		h.run(args...)
	}
	st, err = sqlite.Open(ctx, h.statePath(), sqlite.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if alerts, err := st.ListAlerts(ctx, ""); err != nil || len(alerts) != 0 {
		t.Errorf("read commands recorded %d alerts (%v)", len(alerts), err)
	}
}

// TestRefusedByTheAdapter: a valid plan the local adapter cannot run is
// refused with exit 2 and no run row.
func TestRefusedByTheAdapter(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	wantError(t, h.run("run", fixture("adapter", "plan.yaml")), exitUsage, "TARGET_ADAPTER_MISMATCH", "airflow")
	// plan validate makes every check run makes before writing.
	wantError(t, h.run("plan", "validate", fixture("adapter", "plan.yaml")), exitUsage, "TARGET_ADAPTER_MISMATCH", "airflow")
	if n := countRuns(t, h.statePath()); n != 0 {
		t.Errorf("%d runs recorded", n)
	}
}
