package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// executions reads the side-effect table of testdata/retry: one row per
// run of each sql step.
func (h *harness) executions() map[string]int {
	return h.rowsPerStep(`select step, count(*) from executions group by step`)
}

// retryFixture copies testdata/retry to a directory of its own (the test
// edits the plan) and returns the plan's path.
func retryFixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"plan.yaml", "customers.csv"} {
		b, err := os.ReadFile(fixture("retry", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "plan.yaml")
}

// fixRetryFixture is the analyst's fix: model.flaky reads a table that
// exists.
func fixRetryFixture(t *testing.T, planFile string) {
	t.Helper()
	b, err := os.ReadFile(planFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(planFile, []byte(strings.Replace(string(b), "select id from not_built_yet", "select id from customers", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRetry: a run fails at model.flaky; after the SQL is fixed, `retry`
// starts a new run of only the failed and skipped steps (the executions
// table shows sql.setup and sql.independent did not run again), says the
// plan changed, links the runs with parentRunId, and its log verifies.
// Retrying the retry finds nothing to do.
func TestRetry(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	planFile := retryFixture(t)
	r := h.run("run", "--threads", "1", planFile)
	wantError(t, r, exitFailed, "STEP_FAILED", "model.flaky")
	parent := runIDFrom(t, r.stdout)
	if got := h.executions(); got["setup"] != 1 || got["independent"] != 1 || got["after_flaky"] != 0 {
		t.Fatalf("after the failed run, executions %v", got)
	}

	// Retrying before the fix fails the same way, in a run of its own.
	wantError(t, h.run("retry", parent), exitFailed, "STEP_FAILED", "model.flaky")

	// Without PLAN, retry runs the stored bundle: the fix is passed as PLAN.
	fixRetryFixture(t, planFile)
	r = h.run("retry", parent, planFile)
	if r.code != 0 {
		t.Fatalf("retry: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		"plan changed since run " + parent + `: the plan file "plan.yaml" changed`,
		"Retrying 3 step(s) of run " + parent + ": model.flaky, sql.after_flaky, test.flaky_has_rows",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("retry output lacks %q:\n%s", want, r.stdout)
		}
	}
	child := runIDFrom(t, r.stdout)
	snap := h.checkLog(child)
	if got := stepIDs(snap); snap.Status != engine.StatusCompleted || !slices.Equal(got, []string{"model.flaky", "sql.after_flaky", "test.flaky_has_rows"}) {
		t.Errorf("the retry: %s with steps %v", snap.Status, got)
	}
	if got := h.executions(); got["setup"] != 1 || got["independent"] != 1 || got["after_flaky"] != 1 {
		t.Errorf("after the retry, executions %v: only after_flaky may have run again", got)
	}
	q := queuedOf(t, h, child)
	if q.ParentRunID != parent || q.Selection == nil || len(q.Selection.Steps) != 3 || len(q.Selection.Select) != 0 {
		t.Errorf("the retry's RunQueued records %+v", q)
	}
	if r := h.run("verify", child); r.code != 0 {
		t.Errorf("verify %s: exit %d\n%s%s", child, r.code, r.stdout, r.stderr)
	}
	if r := h.run("verify", "--all"); r.code != 0 {
		t.Errorf("verify --all: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Nothing failed in the retry: nothing to retry, exit 0, no new run.
	n := len(h.run("runs", "--json").stdout)
	if r := h.run("retry", child, planFile); r.code != 0 || !strings.Contains(r.stdout, "Nothing to retry") {
		t.Errorf("retry of a completed run: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if m := len(h.run("runs", "--json").stdout); m != n {
		t.Error("retry with nothing to do recorded a run")
	}

	wantError(t, h.run("retry", "no-such-run"), exitUsage, "RUN_NOT_FOUND", "no-such-run")
	wantError(t, h.run("retry", parent, fixture("ok", "plan.yaml")), exitUsage, "PLAN_HASH_MISMATCH", "cli_retry")
}

// TestRetrySteps: what retry runs again of a finished run.
func TestRetrySteps(t *testing.T) {
	t.Parallel()
	// a -> b -> c, d alone.
	p := &plan.Plan{PlanID: "p", PlanVersion: "1", Steps: []plan.Step{
		{ID: "a", Kind: plan.KindSQL, SQL: "x"},
		{ID: "b", Kind: plan.KindSQL, SQL: "x", DependsOn: []string{"a"}},
		{ID: "c", Kind: plan.KindSQL, SQL: "x", DependsOn: []string{"b"}},
		{ID: "d", Kind: plan.KindSQL, SQL: "x"},
		{ID: "e", Kind: plan.KindModel, Materialized: "ephemeral", SQL: "x"}, // never has events
	}}
	snap := func(st map[string]engine.StepStatus) engine.Snapshot {
		var s engine.Snapshot
		for _, id := range []string{"a", "b", "c", "d", "gone"} {
			if x, ok := st[id]; ok {
				s.Steps = append(s.Steps, engine.StepSnapshot{StepID: id, Status: x})
			}
		}
		return s
	}
	ok, failed, skipped := engine.StepStatusSuccess, engine.StepStatusFailed, engine.StepStatusSkipped
	cases := []struct {
		name       string
		sel        []string
		status     map[string]engine.StepStatus
		want, gone []string
	}{
		{"failed and skipped", nil, map[string]engine.StepStatus{"a": ok, "b": failed, "c": skipped, "d": ok}, []string{"b", "c"}, nil},
		{"all succeeded", nil, map[string]engine.StepStatus{"a": ok, "b": ok, "c": ok, "d": ok}, nil, nil},
		// A cancelled run: c and d never started, they run too.
		{"never reached", nil, map[string]engine.StepStatus{"a": ok, "b": failed}, []string{"b", "c", "d"}, nil},
		// A selected run: only its selection is in scope.
		{"selected parent", []string{"b", "c"}, map[string]engine.StepStatus{"b": failed, "c": skipped}, []string{"b", "c"}, nil},
		{"selected parent never started", []string{"a", "c"}, map[string]engine.StepStatus{}, []string{"a", "c"}, nil},
		{"step gone from the plan", []string{"a", "gone"}, map[string]engine.StepStatus{"a": ok, "gone": failed}, nil, []string{"gone"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var q engine.RunQueuedRequest
			if tc.sel != nil {
				q.Selection = &engine.Selection{Steps: tc.sel}
			}
			got, gone := retrySteps(p, q, snap(tc.status))
			if !slices.Equal(got, tc.want) || !slices.Equal(gone, tc.gone) {
				t.Errorf("retry %v (gone %v), want %v (gone %v)", got, gone, tc.want, tc.gone)
			}
		})
	}
}

// TestRetryKeepsFullRefresh: dbt retry reuses the run's flags; a retry of a
// --full-refresh run is a full-refresh run too (its RunQueued says so).
func TestRetryKeepsFullRefresh(t *testing.T) {
	t.Parallel()
	for _, full := range []bool{false, true} {
		h := newHarness(t)
		planFile := retryFixture(t)
		args := []string{"run", "--threads", "1", planFile}
		if full {
			args = []string{"run", "--full-refresh", "--threads", "1", planFile}
		}
		r := h.run(args...)
		wantError(t, r, exitFailed, "STEP_FAILED", "model.flaky")
		parent := runIDFrom(t, r.stdout)
		fixRetryFixture(t, planFile)
		r = h.run("retry", parent, planFile)
		if r.code != 0 {
			t.Fatalf("retry: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
		if p, c := queuedOf(t, h, parent), queuedOf(t, h, runIDFrom(t, r.stdout)); p.FullRefresh != full || c.FullRefresh != full {
			t.Errorf("--full-refresh %v: the run records %v, its retry %v", full, p.FullRefresh, c.FullRefresh)
		}
	}
}
