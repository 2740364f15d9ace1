package dbt_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine/dbt"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/selection"
)

// TestSelectJaffleShopReference runs node selection on the plan imported
// from dbt's jaffle_shop manifest (3 seeds, 5 models, 20 tests; the import
// keeps tags, fqn and original_file_path). Each expected set is what dbt
// selects on that project by its documented semantics: + walks
// depends_on, eager indirect selection adds every test with a selected
// parent (relationships_orders_customer_id hangs on customers and
// orders), buildable only those whose other parents are ancestors.
func TestSelectJaffleShopReference(t *testing.T) {
	ref := referenceDir(t)
	data, err := os.ReadFile(filepath.Join(ref, "dbt_manifests", "openlineage_postgres_v12", "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := dbt.Import(data, dbt.Options{ProjectDir: filepath.Join(ref, "jaffle_shop"), OutDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	p := res.Plan
	if st, _ := p.Step("model.stg_customers"); !slices.Equal(st.Tags, []string{"addthistag"}) ||
		!slices.Equal(st.FQN, []string{"jaffle_shop", "staging", "stg_customers"}) || st.OriginalFilePath != "models/staging/stg_customers.sql" {
		t.Fatalf("stg_customers lost its tags, fqn or file: %+v", st)
	}

	seeds := "raw_customers raw_orders raw_payments"
	stg := "stg_customers stg_orders stg_payments"
	stgTests := "unique_stg_customers_customer_id not_null_stg_customers_customer_id unique_stg_orders_order_id not_null_stg_orders_order_id " +
		"accepted_values_stg_orders_status__placed__shipped__completed__return_pending__returned unique_stg_payments_payment_id not_null_stg_payments_payment_id " +
		"accepted_values_stg_payments_payment_method__credit_card__coupon__bank_transfer__gift_card"
	customersTests := "unique_customers_customer_id not_null_customers_customer_id"
	ordersTests := "unique_orders_order_id not_null_orders_order_id not_null_orders_customer_id not_null_orders_amount not_null_orders_credit_card_amount " +
		"not_null_orders_coupon_amount not_null_orders_bank_transfer_amount not_null_orders_gift_card_amount " +
		"accepted_values_orders_status__placed__shipped__completed__return_pending__returned"
	rel := "relationships_orders_customer_id__customer_id__ref_customers_"
	all := strings.Join([]string{seeds, stg, "customers orders", stgTests, customersTests, ordersTests, rel}, " ")

	cases := []struct {
		sel, exc string
		mode     selection.Mode
		want     string
	}{
		{sel: "+customers", want: strings.Join([]string{seeds, stg, "customers", stgTests, customersTests, rel}, " ")},
		{sel: "+customers", mode: selection.Buildable, want: strings.Join([]string{seeds, stg, "customers", stgTests, customersTests}, " ")},
		{sel: "1+customers", want: strings.Join([]string{stg, "customers", stgTests, customersTests, rel}, " ")},
		{sel: "customers", want: "customers " + customersTests + " " + rel},
		{sel: "customers", mode: selection.Cautious, want: "customers " + customersTests},
		{sel: "orders", want: "orders " + ordersTests + " " + rel},
		{sel: "stg_orders+", want: "stg_orders customers orders unique_stg_orders_order_id not_null_stg_orders_order_id accepted_values_stg_orders_status__placed__shipped__completed__return_pending__returned " + customersTests + " " + ordersTests + " " + rel},
		{sel: "@raw_payments", want: all},
		{sel: "tag:addthistag", want: "stg_customers unique_stg_customers_customer_id not_null_stg_customers_customer_id"},
		{sel: "path:models/staging", want: stg + " " + stgTests},
		{sel: "jaffle_shop.staging.*", want: stg + " " + stgTests},
		{sel: "jaffle_shop", want: all},
		{sel: "path:seeds", want: seeds},
		{sel: "resource_type:seed", want: seeds},
		{sel: "config.materialized:table", want: "customers orders " + customersTests + " " + ordersTests + " " + rel},
		{sel: "config.materialized:view,tag:addthistag", want: "stg_customers unique_stg_customers_customer_id not_null_stg_customers_customer_id"},
		{exc: "orders", want: strings.Join([]string{seeds, stg, "customers", stgTests, customersTests}, " ")},
		{sel: "+customers", exc: "path:models/staging", want: seeds + " customers " + customersTests + " " + rel},
	}
	for _, tc := range cases {
		t.Run(tc.sel+"/"+tc.exc+"/"+string(tc.mode), func(t *testing.T) {
			spec := selection.Spec{Select: strings.Fields(tc.sel), Exclude: strings.Fields(tc.exc), Indirect: tc.mode}
			got, err := selection.Select(p, spec)
			if err != nil {
				t.Fatal(err)
			}
			var gotNames []string
			for _, id := range got.Steps {
				st, _ := p.Step(id)
				gotNames = append(gotNames, selection.Name(st))
			}
			slices.Sort(gotNames)
			want := strings.Fields(tc.want)
			slices.Sort(want)
			if !slices.Equal(gotNames, want) {
				t.Errorf("select %q exclude %q:\n got %v\nwant %v", tc.sel, tc.exc, gotNames, want)
			}
			assertDependencyOrder(t, p, got.Steps)
		})
	}
}

// assertDependencyOrder: no step comes before a selected step it depends on.
func assertDependencyOrder(t *testing.T, p *plan.Plan, ids []string) {
	t.Helper()
	pos := map[string]int{}
	for i, id := range ids {
		pos[id] = i
	}
	for i, id := range ids {
		st, _ := p.Step(id)
		for _, d := range st.DependsOn {
			if j, ok := pos[d]; ok && j > i {
				t.Errorf("%s comes before its dependency %s", id, d)
			}
		}
	}
}

// TestImportKeepsSelectionAttributes: tags, fqn and original_file_path
// survive the import and a YAML round trip, so tag:, fqn and path:
// selectors work on an imported plan without the reference material.
func TestImportKeepsSelectionAttributes(t *testing.T) {
	m := `{"metadata": {"dbt_schema_version": "https://schemas.getdbt.com/dbt/manifest/v12.json", "project_name": "p"}, "nodes": {
	  "model.p.a": {"resource_type": "model", "name": "a", "config": {"materialized": "view"}, "compiled_code": "select 1 as x",
	    "tags": ["nightly", "", "nightly", "finance"], "fqn": ["p", "marts", "a"], "original_file_path": "models/marts/a.sql"},
	  "model.p.b": {"resource_type": "model", "name": "b", "config": {"materialized": "table"}, "compiled_code": "select x from a",
	    "fqn": ["p", "", "b"], "original_file_path": "models/b.sql", "depends_on": {"nodes": ["model.p.a"]}},
	  "test.p.not_null_a_x.1a2b": {"resource_type": "test", "name": "not_null_a_x", "config": {"severity": "ERROR"},
	    "compiled_code": "select * from a where x is null", "fqn": ["p", "marts", "not_null_a_x"], "original_file_path": "models/marts/schema.yml",
	    "depends_on": {"nodes": ["model.p.a"]}}}}`
	res, err := dbt.Import([]byte(m), dbt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	y, err := res.YAML()
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Parse(y, "plan.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	a, _ := p.Step("model.a")
	if !slices.Equal(a.Tags, []string{"nightly", "finance"}) || !slices.Equal(a.FQN, []string{"p", "marts", "a"}) || a.OriginalFilePath != "models/marts/a.sql" {
		t.Errorf("model.a kept %q %q %q", a.Tags, a.FQN, a.OriginalFilePath)
	}
	if b, _ := p.Step("model.b"); b.FQN != nil || b.Tags != nil {
		t.Errorf("model.b: an fqn with an empty part is dropped, got %q; tags %q", b.FQN, b.Tags)
	}
	for sel, want := range map[string][]string{
		"tag:finance":       {"model.a", "test.not_null_a_x"},
		"p.marts.*":         {"model.a", "test.not_null_a_x"},
		"path:models/marts": {"model.a", "test.not_null_a_x"},
		"path:models/b.sql": {"model.b"},
		// Each side of an intersection brings its tests (eager), as in
		// dbt, where only --resource-type filters them out afterwards.
		"a+,resource_type:model": {"model.a", "model.b", "test.not_null_a_x"},
		"b,resource_type:model":  {"model.b"},
	} {
		got, err := selection.Select(p, selection.Spec{Select: []string{sel}})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Steps, want) {
			t.Errorf("%s selects %v, want %v", sel, got.Steps, want)
		}
	}
}
