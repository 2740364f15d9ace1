// Package runnertest holds the local runner's scenarios that every state
// store and warehouse pair passes: each backend's tests call them with its
// own store and warehouses.
package runnertest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/runner"
	"github.com/dvtrun/dvtrun/store"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// ContextOrders are the rows of the context plan's source table raw.orders
// (id, region, amount, ordered_at) that RunContextPlan expects each
// warehouse to hold before it runs.
var ContextOrders = [][4]string{
	{"1", "eu", "10", "2026-11-24T08:00:00Z"},
	{"2", "eu", "20", "2026-11-24T20:00:00Z"},
	{"3", "us", "5", "2026-11-24T09:00:00Z"},
	{"4", "eu", "7", "2026-11-25T10:00:00Z"},
	{"5", "us", "3", "2026-11-25T11:00:00Z"},
	{"6", "us", "4", "2026-11-25T23:30:00Z"}, // the next day in UTC
}

// ContextWarehouse is a warehouse of RunContextPlan: the plan's relations
// are read back where its dialect names them.
type ContextWarehouse interface {
	storetest.Warehouse
	plan.Dialect
}

// RunContextPlan runs plans/context (planPath) — source, ref, var and the
// data-interval names — through the runner, with st as the state store:
// twice on dev (region eu, two daily intervals) and once on prod (region
// us, the first day). Each run renders with the vars and interval its
// RunQueued recorded; daily_orders gets one row per interval, in the
// warehouse of the run's target only (dev and prod are different files or
// schemas).
func RunContextPlan(t *testing.T, st store.Store, planPath string, dev, prod ContextWarehouse) {
	ctx := context.Background()
	b, err := plan.LoadBundle(plan.OSFiles{}, planPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{TenantID: "acme", ProjectID: "context", EnvironmentID: "test"}
	clock, ids := engine.ClockFunc(time.Now), engine.IDFunc(uuid.NewString)
	day := func(d int) *engine.DataInterval {
		start := time.Date(2026, 11, 23+d, 0, 0, 0, 0, time.UTC)
		return &engine.DataInterval{Start: start.Format(time.RFC3339), End: start.AddDate(0, 0, 1).Format(time.RFC3339), Timezone: "UTC"}
	}
	run := func(wh ContextWarehouse, env string, vars map[string]any, iv *engine.DataInterval) string {
		t.Helper()
		c := cfg
		c.EnvironmentID = env
		eng := &engine.Engine{Log: st, Clock: clock, IDs: ids, Config: c}
		runID, err := eng.StartRun(ctx, engine.StartRequest{Plan: b.Plan, Ref: b.Ref, Vars: vars, DataInterval: iv})
		if err != nil {
			t.Fatal(err)
		}
		rn := &runner.Runner{Log: st, Clock: clock, IDs: ids, Config: runner.Config{Config: c, Owner: "context-" + env, Threads: 2, LeaseTTL: time.Minute}}
		snap, err := rn.Execute(ctx, runID, b.Plan, wh)
		if err != nil {
			t.Fatalf("%s run: %v", env, err)
		}
		if snap.Status != engine.StatusCompleted {
			var errs []string
			for _, s := range snap.Steps {
				if s.Error != nil {
					errs = append(errs, s.StepID+": "+s.Error.Message)
				}
			}
			t.Fatalf("%s run %s is %s: %s", env, runID, snap.Status, strings.Join(errs, "; "))
		}
		return runID
	}
	first := run(dev, "dev", map[string]any{"region": "eu"}, day(1))
	run(dev, "dev", map[string]any{"region": "eu", "label": "backfill"}, day(2))
	run(prod, "prod", map[string]any{"region": "us"}, day(1))

	daily := func(wh ContextWarehouse) string {
		t.Helper()
		rows, err := wh.DB().QueryContext(ctx, "select day, orders, revenue, label from "+wh.Relation("daily_orders")+" order by day")
		if err != nil {
			t.Fatalf("read daily_orders: %v", err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var d, label string
			var n, revenue float64
			if err := rows.Scan(&d, &n, &revenue, &label); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s %g %g %s", d, n, revenue, label))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return strings.Join(out, "; ")
	}
	if got, want := daily(dev), "2026-11-24T00:00:00Z 2 30 nightly; 2026-11-25T00:00:00Z 1 7 backfill"; got != want {
		t.Errorf("dev daily_orders:\n got %s\nwant %s", got, want)
	}
	if got, want := daily(prod), "2026-11-24T00:00:00Z 1 5 nightly"; got != want {
		t.Errorf("prod daily_orders:\n got %s\nwant %s", got, want)
	}
	// The SQL a step ran is in its StepCompleted: the literals the
	// recorded vars and interval rendered to.
	evs, err := st.ListEvents(ctx, first, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var sqlText string
	for _, e := range evs {
		if e.EventType == engine.StepCompleted && e.StepID == "model.orders_in_interval" {
			var pl struct{ SQL string }
			if err := json.Unmarshal(e.Payload, &pl); err != nil {
				t.Fatal(err)
			}
			sqlText = pl.SQL
		}
	}
	for _, want := range []string{"o.region = 'eu'", "o.ordered_at >= '2026-11-24T00:00:00Z'", "o.ordered_at < '2026-11-25T00:00:00Z'"} {
		if !strings.Contains(sqlText, want) {
			t.Errorf("the first dev run's orders_in_interval ran without %q: %s", want, sqlText)
		}
	}
}
