package main

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/stepview"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// seedHistory writes runs of two plans with different triggers and
// outcomes, oldest first, in the harness's default scope, and one in
// another tenant. It returns the default scope's run ids, oldest first.
func seedHistory(t *testing.T, h *harness) []string {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, h.statePath(), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	runs := []struct {
		id, tenant, plan string
		queued           map[string]any
		then             []engine.EventType
	}{
		{"abc00000-0000-4000-8000-000000000001", "default", "p1", map[string]any{"triggerSource": "cli", "triggeredBy": "ann"},
			[]engine.EventType{engine.RunStarted, engine.RunCompleted}},
		{"abc00000-0000-4000-8000-000000000002", "default", "p2", map[string]any{"triggerSource": "schedule", "triggeredBy": "schedule:nightly"},
			[]engine.EventType{engine.RunStarted, engine.StepStarted, engine.StepFailed, engine.RunFailed}},
		{"abd00000-0000-4000-8000-000000000003", "default", "p2", map[string]any{"triggerSource": "cli", "parentRunId": "abc00000-0000-4000-8000-000000000002"},
			[]engine.EventType{engine.RunStarted}},
		{"fff00000-0000-4000-8000-000000000004", "default", "p1", map[string]any{"triggerSource": "queue", "target": "prod",
			"dataInterval": map[string]any{"start": "2026-04-01T00:00:00Z", "end": "2026-04-02T00:00:00Z"}}, nil},
		{"abe00000-0000-4000-8000-000000000005", "other", "p1", map[string]any{"triggerSource": "cli"}, nil},
	}
	var ids []string
	for _, r := range runs {
		f := storetest.NewFixture()
		f.Meta.RunID, f.Meta.TenantID, f.Meta.ProjectID, f.Meta.EnvironmentID, f.Meta.PlanID = r.id, r.tenant, "default", "dev", r.plan
		q := f.Event(engine.RunQueued, "", 1)
		q.Payload, _ = json.Marshal(r.queued)
		if _, err := st.BootstrapRun(ctx, f.Meta, []engine.RunEventWrite{q}); err != nil {
			t.Fatal(err)
		}
		for _, typ := range r.then {
			step := ""
			if typ.StepLevel() {
				step = "model.broken"
			}
			if _, err := st.AppendAndEnqueue(ctx, r.id, []engine.RunEventWrite{f.Event(typ, step, 1)}); err != nil {
				t.Fatal(err)
			}
		}
		if r.tenant == "default" {
			ids = append(ids, r.id)
		}
	}
	return ids
}

// listed is the run ids of a `runs --json` answer.
func listed(t *testing.T, r result) []string {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var rows []struct {
		RunID string `json:"runId"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	var out []string
	for _, x := range rows {
		out = append(out, x.RunID)
	}
	return out
}

func TestRunsFilters(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ids := seedHistory(t, h)
	newest := slices.Clone(ids)
	slices.Reverse(newest)
	cases := []struct {
		args []string
		want []string
	}{
		{nil, newest},
		{[]string{"--status", "FAILED"}, []string{ids[1]}},
		{[]string{"--status", "failed"}, []string{ids[1]}},
		{[]string{"--plan", "p1"}, []string{ids[3], ids[0]}},
		{[]string{"--schedule", "nightly"}, []string{ids[1]}},
		{[]string{"--trigger", "retry"}, []string{ids[2]}},
		{[]string{"--trigger", "retry-of"}, []string{ids[2]}},
		{[]string{"--target", "prod"}, []string{ids[3]}},
		{[]string{"--plan", "p2", "--status", "RUNNING"}, []string{ids[2]}},
		{[]string{"--since", "2000-01-01"}, newest},
		{[]string{"--until", "2000-01-01"}, nil},
		{[]string{"--since", "1000h"}, newest},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			got := listed(t, h.run(append([]string{"runs", "--json"}, c.args...)...))
			if !slices.Equal(got, c.want) {
				t.Errorf("runs %v: %v, want %v", c.args, got, c.want)
			}
		})
	}

	// The table: trigger, wait, the first failure, target and interval.
	r := h.run("runs")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^` + ids[1] + ` +p2@7 +FAILED +0/1 +\d+\.\d{3}s +\d+\.\d{3}s +schedule:nightly +\S+ +model\.broken: STEP_FAILED: it's "broken" line 2$`),
		regexp.MustCompile(`(?m)^` + ids[2] + ` +p2@7 +RUNNING .* retry of ` + ids[1]),
		regexp.MustCompile(`(?m)^` + ids[3] + ` +p1@7 +QUEUED .* queue +prod +2026-04-01T00:00:00Z\.\.2026-04-02T00:00:00Z `),
		regexp.MustCompile(`(?m)^RUN_ID +PLAN +STATUS +STEPS OK +DURATION +WAIT +TRIGGER +TARGET +INTERVAL +CREATED +FIRST FAILURE$`),
	} {
		if !want.MatchString(r.stdout) {
			t.Errorf("runs table does not match %s:\n%s", want, r.stdout)
		}
	}

	// Bad filters are refused before the store is read.
	for _, args := range [][]string{
		{"--status", "BOGUS"}, {"--trigger", "cron"}, {"--since", "yesterday"}, {"--until", "3000-01-01"},
		{"--after", "not-a-cursor"}, {"--limit", "0"},
	} {
		wantError(t, h.run(append([]string{"runs"}, args...)...), exitUsage, "INVALID_ARGUMENT")
	}
}

// TestRunsPaging: --limit pages, the page says how to get the next one,
// and --after gets it; the pages hold every run once, newest first.
func TestRunsPaging(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ids := seedHistory(t, h)
	slices.Reverse(ids)
	cursorRE := regexp.MustCompile(`More runs: dvtrun runs --after (\S+) `)
	var paged []string
	args := []string{"runs", "--limit", "3"}
	for range 3 {
		r := h.run(args...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d %s", args, r.code, r.stderr)
		}
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n")[1:] {
			if f := strings.Fields(line); len(f) > 0 && strings.Count(f[0], "-") == 4 {
				paged = append(paged, f[0])
			}
		}
		m := cursorRE.FindStringSubmatch(r.stdout)
		if m == nil {
			break
		}
		args = []string{"runs", "--limit", "3", "--after", m[1]}
	}
	if !slices.Equal(paged, ids) {
		t.Fatalf("pages %v, want %v", paged, ids)
	}
	// JSON: the cursor goes to stderr, the document stays an array.
	r := h.run("runs", "--json", "--limit", "2")
	if got := listed(t, r); !slices.Equal(got, ids[:2]) || !strings.Contains(r.stderr, "more runs: --after ") {
		t.Errorf("runs --json --limit 2: %v, stderr %q", got, r.stderr)
	}
}

// TestRunIDResolution: every RUN_ID argument takes a unique prefix, or
// last (with --plan, of that plan); an ambiguous prefix names the runs.
func TestRunIDResolution(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ids := seedHistory(t, h)
	runOf := func(r result) string {
		t.Helper()
		var v struct {
			Run struct {
				RunID string `json:"runId"`
			} `json:"run"`
		}
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &v) != nil {
			t.Fatalf("exit %d: %s%s", r.code, r.stdout, r.stderr)
		}
		return v.Run.RunID
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{ids[1]}, ids[1]},
		{[]string{"abd"}, ids[2]},
		{[]string{"fff00000"}, ids[3]},
		{[]string{"last"}, ids[3]},
		{[]string{"last", "--plan", "p2"}, ids[2]},
		{[]string{"--plan", "p1", "last"}, ids[3]},
	}
	for _, c := range cases {
		if got := runOf(h.run(append([]string{"status", "--json"}, c.args...)...)); got != c.want {
			t.Errorf("status %v: run %s, want %s", c.args, got, c.want)
		}
	}
	if r := h.run("events", "abd"); r.code != 0 || !strings.Contains(r.stdout, "RunQueued") {
		t.Errorf("events abd: exit %d %s", r.code, r.stderr)
	}
	// Other commands taking a RUN_ID: the signal names the whole id.
	if r := h.run("cancel", "abd", "--wait", "0"); r.code != 0 || !strings.Contains(r.stdout, "sent to run "+ids[2]) {
		t.Errorf("cancel abd: exit %d %s%s", r.code, r.stdout, r.stderr)
	}
	if r := h.run("export", "abc00000-0000-4000-8000-00000000000"); r.code != exitUsage {
		t.Errorf("export of an ambiguous prefix: exit %d", r.code)
	}
	// Ambiguous: both abc runs are named.
	r := h.run("status", "abc")
	wantError(t, r, exitUsage, "INVALID_ARGUMENT", "ambiguous", ids[0], ids[1])
	// Another tenant's run is not found by its prefix, nor by its id.
	wantError(t, h.run("status", "abe"), exitUsage, "RUN_NOT_FOUND")
	wantError(t, h.run("status", "abe00000-0000-4000-8000-000000000005"), exitUsage, "RUN_NOT_FOUND")
	wantError(t, h.run("status", "last", "--plan", "nope"), exitUsage, "RUN_NOT_FOUND", "nope")
	wantError(t, h.run("--tenant", "empty", "status", "last"), exitUsage, "RUN_NOT_FOUND")
	// A prefix is data, never a pattern.
	wantError(t, h.run("status", "%"), exitUsage, "RUN_NOT_FOUND")
	wantError(t, h.run("status", "ab_"), exitUsage, "RUN_NOT_FOUND")
}

// TestStatusStep: status RUN --step ID shows the step's SQL as sent to the
// warehouse, its attempts with errors, rows, the ledger entry, and a
// failing test's first rows (bounded, secrets redacted), as text and JSON.
func TestStatusStep(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const token = "s3cr3t-T0ken-value"
	if r := h.run("run", "--secrets-file", fixture("secret", "secrets.env"), fixture("stepview", "plan.yaml")); r.code != exitFailed {
		t.Fatalf("run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	step := func(id string) (result, stepview.View) {
		t.Helper()
		r := h.run("status", "last", "--step", id, "--json")
		var v stepview.View
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &v) != nil {
			t.Fatalf("status --step %s --json: exit %d %s%s", id, r.code, r.stdout, r.stderr)
		}
		return r, v
	}

	r, v := step("test.token_leaks")
	if strings.Contains(r.stdout, token) {
		t.Fatalf("the secret's value is in the step's JSON:\n%s", r.stdout)
	}
	if v.SQL != "select n, ? as token from nums where n < 3" || v.Step.Status != engine.StepStatusFailed || v.Failures != 2 {
		t.Errorf("step view: sql %q status %s failures %d", v.SQL, v.Step.Status, v.Failures)
	}
	fr := v.FailingRows
	if fr == nil || !slices.Equal(fr.Columns, []string{"n", "token"}) || len(fr.Rows) != 2 || fr.Rows[0][1] != engine.Redacted {
		t.Errorf("failing rows %+v, want n and token, 2 rows, the token %s", fr, engine.Redacted)
	}
	if len(v.Attempts) != 2 || v.Attempts[0].EventType != engine.StepStarted || v.Attempts[1].EventType != engine.StepFailed ||
		v.Attempts[1].Error == nil || v.Attempts[1].Error.Code != "STEP_FAILED" {
		t.Errorf("attempts %+v, want StepStarted then StepFailed with STEP_FAILED", v.Attempts)
	}
	if v.Ledger == nil || !v.Ledger.Checked || v.Ledger.Committed {
		t.Errorf("a failed test's ledger %+v, want checked and nothing committed", v.Ledger)
	}

	_, v = step("test.all_rows")
	if v.Failures != 7 || v.FailingRows == nil || len(v.FailingRows.Rows) != engine.FailingRowsSample {
		t.Errorf("test.all_rows: %d failures, failing rows %+v: want 7 and the first %d", v.Failures, v.FailingRows, engine.FailingRowsSample)
	}

	_, v = step("model.nums")
	if v.Step.Status != engine.StepStatusSuccess || v.RowCount != 7 || v.Relation != "nums" || !strings.Contains(v.SQL, "union all select 7") ||
		v.Ledger == nil || !v.Ledger.Committed || v.Ledger.LogicalAttempt != 1 || v.FailingRows != nil {
		t.Errorf("model.nums: %+v", v)
	}

	// The text form.
	r = h.run("status", "last", "--step", "test.token_leaks")
	for _, want := range []string{"Step:", "test.token_leaks (test)", "STEP_FAILED", "select n, ? as token from nums where n < 3",
		"First rows the test returned (2 of 2, redacted)", engine.Redacted, "StepFailed", "Ledger:", "nothing committed"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status --step does not show %q:\n%s", want, r.stdout)
		}
	}
	if r.code != 0 || strings.Contains(r.stdout, token) {
		t.Errorf("status --step: exit %d, or the secret shows:\n%s", r.code, r.stdout)
	}

	// Bad input: an unknown step names the run's steps; hostile text is escaped.
	wantError(t, h.run("status", "last", "--step", "model.nope"), exitUsage, "INVALID_ARGUMENT", "model.nope", "model.nums")
	r = h.run("status", "last", "--step", "x\x1b[31m")
	wantError(t, r, exitUsage, "INVALID_ARGUMENT")
	if strings.Contains(r.stderr, "\x1b") {
		t.Errorf("a control character reached the terminal: %q", r.stderr)
	}
	wantError(t, h.run("status", "last", "--step", "model.nums", "--follow"), exitUsage, "INVALID_ARGUMENT")
}

// TestRunsOfRealRuns: the history reads what the engine writes — a run
// started by hand is manual, its retry is "retry of" it, and the failed
// run's first failure is the step that failed.
func TestRunsOfRealRuns(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.env["DVT_TARGET_PATH"] = h.dir
	plan := retryFixture(t)
	parent := runIDFrom(t, h.run("run", "--threads", "1", plan).stdout)
	fixRetryFixture(t, plan)
	r := h.run("retry", parent[:10], plan) // the fixed plan: a PLAN-less retry runs the stored bundle
	if r.code != 0 {
		t.Fatalf("retry: exit %d %s%s", r.code, r.stdout, r.stderr)
	}
	child := runIDFrom(t, r.stdout)
	if got := listed(t, h.run("runs", "--json", "--trigger", "retry")); !slices.Equal(got, []string{child}) {
		t.Errorf("runs --trigger retry: %v, want [%s]", got, child)
	}
	if got := listed(t, h.run("runs", "--json", "--trigger", "manual", "--status", "FAILED")); !slices.Equal(got, []string{parent}) {
		t.Errorf("runs --trigger manual --status FAILED: %v, want [%s]", got, parent)
	}
	r = h.run("runs")
	if !regexp.MustCompile(`(?m)^`+parent+` .* FAILED .* manual by \S+ .* model\.flaky: `).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^`+child+` .* COMPLETED .* retry of `+parent).MatchString(r.stdout) {
		t.Errorf("runs:\n%s", r.stdout)
	}
}
