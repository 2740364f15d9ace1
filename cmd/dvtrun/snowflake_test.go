package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/stepview"
	"github.com/dvtrun/dvtrun/store"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
)

// TestRunShopPlanOnSnowflake runs README's example plan end to end with
// --store and --warehouse on the Snowflake-protocol test server, through the
// real gosnowflake driver: the run completes, the log passes the Go reducer,
// verify finds the SQL projection equal to it, and no step costs more than
// the request budget.
func TestRunShopPlanOnSnowflake(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a Snowflake-protocol test server")
	}
	// Two servers, so the state store's and the warehouse's requests are
	// counted apart.
	storeSrv, whSrv := sftest.Start(t), sftest.Start(t)
	dsn := storeSrv.DSN("DVT", "PUBLIC")
	h := newHarness(t)
	h.env["DVT_STORE"] = "snowflake://" + dsn
	h.env["DVT_TARGET_PATH"] = filepath.Join(h.dir, "target") // not .dvt/ in the package directory
	h.env["DVT_WAREHOUSE"] = "snowflake://" + whSrv.DSN("ANALYTICS", "PUBLIC")

	ctx := context.Background()
	st, err := snowflake.Open(ctx, dsn, snowflake.Options{}) // migrates before counting
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	plan := filepath.Join(repoRoot(t), "plans", "shop", "plan.yaml")
	storeSrv.ResetCounters()
	whSrv.ResetCounters()
	r := h.run("run", plan)
	if r.code != 0 {
		t.Fatalf("run on snowflake: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	storeReqs := storeSrv.QueryRequests() + storeSrv.ResultRequests()
	whReqs := whSrv.QueryRequests() + whSrv.ResultRequests()
	if !strings.Contains(r.stdout, "Done. PASS=") || !strings.Contains(r.stdout, "ERROR=0 SKIP=0") {
		t.Errorf("unexpected summary:\n%s", r.stdout)
	}
	runs, err := st.ListRuns(ctx, store.RunFilter{})
	if err != nil || len(runs) != 1 {
		t.Fatalf("ListRuns: %v, %d runs", err, len(runs))
	}
	runID := runs[0].RunID
	evs, err := st.ListEvents(ctx, runID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	snap := engine.Project(runID, evs)
	if snap.Inconsistent || snap.Status != engine.StatusCompleted {
		t.Fatalf("run %s inconsistent=%v violations=%+v", snap.Status, snap.Inconsistent, snap.Violations)
	}
	for _, s := range snap.Steps {
		if s.Status != engine.StepStatusSuccess {
			t.Errorf("step %s is %s", s.StepID, s.Status)
		}
	}
	if r := h.run("verify", "--all"); r.code != 0 || !strings.Contains(r.stdout, "verified 1 runs") {
		t.Errorf("verify --all on snowflake: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Requests to Snowflake are the cost that matters: report them per step.
	steps := float64(len(snap.Steps))
	t.Logf("snowflake, %d steps, %d events: state store %d requests (%.1f per step, opening and run start included), warehouse %d (%.1f per step)",
		len(snap.Steps), len(evs), storeReqs, float64(storeReqs)/steps, whReqs, float64(whReqs)/steps)
}

// TestRetryOnSnowflake: the selection and parentRunId a retry records go
// through the Snowflake store (schema check, VARIANT payload) and come back
// from its log: the retried run executes only the failed and skipped
// steps and verifies.
func TestRetryOnSnowflake(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a Snowflake-protocol test server")
	}
	srv := sftest.Start(t)
	h := newHarness(t)
	h.env["DVT_STORE"] = "snowflake://" + srv.DSN("DVT", "PUBLIC")
	h.env["DVT_TARGET_PATH"] = filepath.Join(h.dir, "target") // not .dvt/ in the package directory
	h.env["DVT_WAREHOUSE"] = "snowflake://" + srv.DSN("ANALYTICS", "PUBLIC")
	plan := retryFixture(t)
	r := h.run("run", "--threads", "1", plan)
	wantError(t, r, exitFailed, "STEP_FAILED", "model.flaky")
	parent := runIDFrom(t, r.stdout)
	fixRetryFixture(t, plan)
	r = h.run("retry", parent, plan)
	if r.code != 0 {
		t.Fatalf("retry on snowflake: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	child := runIDFrom(t, r.stdout)

	ctx := context.Background()
	st, err := snowflake.Open(ctx, srv.DSN("DVT", "PUBLIC"), snowflake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	evs, err := st.ListEvents(ctx, child, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	q, err := engine.QueuedRequest(evs)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"model.flaky", "sql.after_flaky", "test.flaky_has_rows"}
	if q.ParentRunID != parent || q.Selection == nil || !slices.Equal(q.Selection.Steps, want) {
		t.Errorf("RunQueued on snowflake records %+v", q)
	}
	if snap := engine.Project(child, evs); snap.Status != engine.StatusCompleted || !slices.Equal(stepIDs(snap), want) {
		t.Errorf("the retry on snowflake: %s with steps %v", snap.Status, stepIDs(snap))
	}
	if r := h.run("verify", "--all"); r.code != 0 {
		t.Errorf("verify --all on snowflake: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Both bundles are kept in the Snowflake store: the parent's as it
	// failed, the child's with the fix; a PLAN-less retry of the child
	// (from its stored bundle) finds nothing to do.
	fixed, err := os.ReadFile(plan)
	if err != nil {
		t.Fatal(err)
	}
	if r := h.run("plan", "show", child); r.code != 0 || r.stdout != string(fixed) {
		t.Errorf("plan show %s on snowflake: %+v", child, r)
	}
	if r := h.run("plan", "show", parent); r.code != 0 || r.stdout == string(fixed) || !strings.Contains(r.stdout, "not_built_yet") {
		t.Errorf("plan show %s on snowflake is not the plan it ran: %+v", parent, r)
	}
	if r := h.run("retry", child); r.code != 0 || !strings.Contains(r.stdout, "Nothing to retry") {
		t.Errorf("retry %s without PLAN on snowflake: %+v", child, r)
	}
}

// TestIncrementalPlanOnSnowflake runs testdata/incremental on the
// Snowflake-protocol test server through the CLI: the ephemeral model's CTE
// resolves under Snowflake's name rules, the second run MERGEs (the
// incremental table equals the full rebuild) and the ephemeral model never
// becomes a relation.
func TestIncrementalPlanOnSnowflake(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a Snowflake-protocol test server")
	}
	srv := sftest.Start(t)
	h := newHarness(t)
	h.env["DVT_WAREHOUSE"] = "snowflake://" + srv.DSN("ANALYTICS", "PUBLIC")
	plan := planCopy(t, "incremental")
	dir := filepath.Dir(plan)
	db := srv.OpenDB(t, "ANALYTICS", "PUBLIC")
	rows := func(rel string) string { return eventRows(t, db, rel) }
	for i, csv := range []string{"id,kind,updated\n1,a,1\n2,b,1\n", "id,kind,updated\n1,a,1\n2,bb,2\n3,c,2\n", "id,kind,updated\n1,aa,3\n3,c,2\n4,d,3\n"} {
		if err := os.WriteFile(filepath.Join(dir, "events.csv"), []byte(csv), 0o644); err != nil {
			t.Fatal(err)
		}
		if r := h.run("run", plan); r.code != 0 {
			t.Fatalf("run %d: exit %d\n%s\n%s", i+1, r.code, r.stdout, r.stderr)
		}
	}
	// Row 2 left the source after run 2: the merged table keeps it.
	if got, full := rows("events"), rows("events_full"); got != "1:AA:3 2:BB:2 3:C:2 4:D:3" || full != "1:AA:3 3:C:2 4:D:3" {
		t.Errorf("events %q, events_full %q", got, full)
	}
	var n int
	if err := db.QueryRow(`select count(*) from information_schema.tables where table_name ilike '%stg_events%'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("the ephemeral model left %d relation(s) (%v)", n, err)
	}
}

// TestStatusStepOnSnowflake: the run history and status --step through the
// CLI with the store and the warehouse on the Snowflake-protocol test
// server: a failing test's first rows are kept (the token redacted), the
// step's query ids come with a QUERY_HISTORY query naming them, and the
// ledger entry of a model is read from the warehouse.
func TestStatusStepOnSnowflake(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a Snowflake-protocol test server")
	}
	srv := sftest.Start(t)
	h := newHarness(t)
	h.env["DVT_STORE"] = "snowflake://" + srv.DSN("DVT", "PUBLIC")
	h.env["DVT_TARGET_PATH"] = filepath.Join(h.dir, "target")
	h.env["DVT_WAREHOUSE"] = "snowflake://" + srv.DSN("ANALYTICS", "PUBLIC")
	if r := h.run("run", "--secrets-file", fixture("secret", "secrets.env"), fixture("stepview", "plan.yaml")); r.code != exitFailed {
		t.Fatalf("run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	runID := h.onlyRun()
	if got := listed(t, h.run("runs", "--json", "--status", "FAILED", "--plan", "cli_stepview", "--trigger", "manual")); !slices.Equal(got, []string{runID}) {
		t.Fatalf("runs --status FAILED on snowflake: %v, want [%s]", got, runID)
	}
	view := func(step string) (string, stepview.View) {
		t.Helper()
		r := h.run("status", runID[:8], "--step", step, "--json")
		var v stepview.View
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &v) != nil {
			t.Fatalf("status --step %s: exit %d %s%s", step, r.code, r.stdout, r.stderr)
		}
		return r.stdout, v
	}
	out, v := view("test.token_leaks")
	if strings.Contains(out, "s3cr3t-T0ken-value") || v.FailingRows == nil || len(v.FailingRows.Rows) != 2 || v.FailingRows.Rows[0][1] != engine.Redacted {
		t.Errorf("test.token_leaks on snowflake: failing rows %+v (or the token shows)", v.FailingRows)
	}
	_, v = view("test.all_rows")
	if v.Failures != 7 || v.FailingRows == nil || len(v.FailingRows.Rows) != engine.FailingRowsSample || len(v.QueryIDs) == 0 {
		t.Fatalf("test.all_rows on snowflake: %+v", v)
	}
	for _, id := range v.QueryIDs {
		if !strings.Contains(v.QueryHistory, "'"+id+"'") {
			t.Errorf("the QUERY_HISTORY query does not name %s:\n%s", id, v.QueryHistory)
		}
	}
	// A table model is Snowflake DDL: idempotent, with no ledger entry, and
	// the warehouse was asked.
	_, v = view("model.nums")
	if v.RowCount != 7 || v.Ledger == nil || !v.Ledger.Checked || v.Ledger.Committed || v.Ledger.LogicalAttempt != 1 {
		t.Errorf("model.nums on snowflake: row count %d, ledger %+v", v.RowCount, v.Ledger)
	}
	if r := h.run("status", runID, "--step", "test.all_rows"); r.code != 0 || !strings.Contains(r.stdout, "INFORMATION_SCHEMA.QUERY_HISTORY") {
		t.Errorf("status --step on snowflake prints no QUERY_HISTORY query:\n%s%s", r.stdout, r.stderr)
	}
}
