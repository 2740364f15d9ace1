package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// whOSSource reads plan files from the real file system.
type whOSSource = plan.OSFiles

// requestFor builds the request the runner sends for a step of a loaded
// plan: seed paths resolve against the plan's directory.
func whRequestFor(p *plan.Plan, s plan.Step) engine.StepRequest {
	req := engine.StepRequest{RunID: "run-1", StepID: s.ID, Kind: s.Kind, Materialized: s.Materialized, SQL: s.SQL, Severity: s.Severity}
	if s.Kind == plan.KindSeed || s.Kind == plan.KindModel {
		req.Relation = s.Relation()
	}
	if s.Kind == plan.KindSeed {
		req.SeedPath = filepath.Join(p.Dir, s.Path)
	}
	return req
}

// TestShopPlanRuns runs the example project end to end, twice (a rerun
// replaces every relation and must give the same answers).
func TestShopPlanRuns(t *testing.T) {
	p, ref, err := plan.Load(whOSSource{}, filepath.Join("..", "..", "plans", "shop", "plan.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if ref.PlanID != "shop" || ref.PlanVersion != "1" || p.Metadata.TargetAdapter != "any" || len(p.Metadata.RequiresCapabilities) != 0 {
		t.Fatalf("plan identity: %+v %+v", ref, p.Metadata)
	}
	// Row counts of the fixtures: 30 customers (4 never order), 20
	// products, 48 orders; tables keep one row per customer, product, order.
	wantRows := map[string]int64{
		"seed.raw_customers": 30, "seed.raw_products": 20, "seed.raw_orders": 48,
		"model.orders_enriched": 48, "model.customer_summary": 30, "model.product_sales": 20,
	}
	kinds := map[string]int{}
	w := openWarehouseT(t)
	for pass := 1; pass <= 2; pass++ {
		for _, s := range p.Order() {
			res, err := w.RunStep(context.Background(), whRequestFor(p, s))
			if err != nil {
				t.Fatalf("pass %d: %s: %v", pass, s.ID, err)
			}
			if pass == 1 {
				kinds[s.Kind]++
			}
			if want, ok := wantRows[s.ID]; ok && res.RowCount != want {
				t.Errorf("pass %d: %s RowCount %d, want %d", pass, s.ID, res.RowCount, want)
			}
			if s.Kind == plan.KindTest && res.Failures != 0 {
				t.Errorf("pass %d: %s (%s) returned %d rows", pass, s.ID, s.Severity, res.Failures)
			}
			if s.Kind == plan.KindSQL {
				// Pass 1 inserts one row per day; pass 2 deletes them and
				// inserts them again.
				var n int64
				if err := w.DB().QueryRow(`SELECT count(*) FROM daily_revenue`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if res.RowsAffected != int64(pass)*n || n == 0 {
					t.Errorf("pass %d: sql step RowsAffected %d with %d days", pass, res.RowsAffected, n)
				}
			}
		}
	}
	if kinds[plan.KindSeed] != 3 || kinds[plan.KindModel] != 6 || kinds[plan.KindSQL] != 1 || kinds[plan.KindTest] < 8 {
		t.Errorf("step kinds %v", kinds)
	}
	// Customers who never ordered are in the summary with zero, not NULL.
	// Customers 27-30 never ordered.
	if got := whQueryStrings(t, w, `SELECT group_concat(customer_id) FROM customer_summary WHERE number_of_orders = 0 AND lifetime_value = 0 AND customer_id > 26`); got[0] != "27,28,29,30" {
		t.Errorf("customers without orders: %v, want 27-30", got)
	}
	if got := whQueryStrings(t, w, `SELECT count(*) FROM customer_summary WHERE number_of_orders IS NULL OR lifetime_value IS NULL`); got[0] != "0" {
		t.Errorf("%s summaries with NULLs", got[0])
	}
	// The quoted comma in the CRLF seed survived.
	if got := whQueryStrings(t, w, `SELECT product_name FROM stg_products WHERE product_id = 4`); len(got) != 1 || got[0] != "Mug, large" {
		t.Errorf("product 4: %q", got)
	}
}
