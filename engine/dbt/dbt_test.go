package dbt_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/dbt"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

// fixtures is the repository's testdata/dbt directory.
var fixtures = filepath.Join("..", "..", "testdata", "dbt")

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func stepIDs(p *plan.Plan) []string {
	var ids []string
	for _, s := range p.Steps {
		ids = append(ids, s.ID)
	}
	sort.Strings(ids)
	return ids
}

func problemIDs(ps []dbt.Problem) []string {
	var ids []string
	for _, p := range ps {
		ids = append(ids, p.NodeID)
	}
	sort.Strings(ids)
	return ids
}

// multiPart finds a relation name with more than one quoted part left in
// the SQL.
var multiPart = regexp.MustCompile(`"[^"]+"\."[^"]+"|\bdev\.main\.`)

func TestImportFixtures(t *testing.T) {
	tests := []struct {
		manifest string
		project  string
		version  int
		steps    []string
		problems map[string]string // node id → part of the message
		sql      map[string][]string
		// failures each test step returns on SQLite (others: 0).
		failures map[string]int64
		rows     map[string]int64
		setup    string // SQL creating tables outside dbt (sources)
	}{
		{
			manifest: "v4_compiled_sql.json",
			project:  "bakery",
			version:  4,
			steps: []string{
				"model.loaves", "model.loaves_by_baker", "seed.raw_bakers", "seed.raw_loaves",
				"test.not_null_loaves_loaf_id", "test.relationships_loaves_baker_id__baker_id__ref_raw_bakers_", "test.unique_loaves_loaf_id",
			},
			sql: map[string][]string{
				"model.loaves":                 {`from "raw_loaves"`},
				"model.loaves_by_baker":        {`from "loaves" as l`, `join "raw_bakers" as b`},
				"test.not_null_loaves_loaf_id": {`select * from "loaves" where loaf_id is null`},
				"test.unique_loaves_loaf_id":   {`group by "loaf_id"`, `from "loaves"`},
			},
			rows: map[string]int64{"seed.raw_loaves": 6, "seed.raw_bakers": 3, "model.loaves": 6},
		},
		{
			manifest: "v11_parse_only.json",
			project:  "bakery",
			version:  11,
			steps: []string{
				"seed.raw_bakers", "seed.raw_loaves",
				"test.accepted_values_raw_loaves_kind__sourdough__rye__baguette__brioche__sliced", "test.not_null_raw_loaves_loaf_id",
			},
			problems: map[string]string{
				"model.bakery.loaves":                          "no compiled SQL",
				"test.bakery.unique_loaves_loaf_id.0e0e0e0e0e": "depends on model.bakery.loaves, which was not imported",
			},
			sql: map[string][]string{
				"test.accepted_values_raw_loaves_kind__sourdough__rye__baguette__brioche__sliced": {`not in ('sourdough', 'rye', 'baguette', 'brioche, sliced')`},
			},
		},
		{
			manifest: "v12_compiled_code.json",
			project:  "market",
			version:  12,
			setup:    `CREATE TABLE vendors (vendor_id INTEGER, vendor_name TEXT); INSERT INTO vendors VALUES (10, 'Nils'), (11, 'Aiko'), (12, 'Rui')`,
			steps: []string{
				"model.dim_stalls_v1", "model.dim_stalls_v2", "model.stall_revenue", "model.stg_sales", "model.ventas_año",
				"seed.raw_sales", "seed.raw_stalls",
				"test.accepted_values_stg_sales_payment__cash__card",
				"test.not_null_dim_stalls_v2_vendor_id",
				"test.not_null_stg_sales_amount",
				"test.not_null_stg_sales_stall_id",
				"test.not_null_ventas_año_total",
				"test.relationships_stall_revenue_vendor_name__vendor_name__source_ext_vendors_external_",
				"test.relationships_stg_sales_stall_id__stall_id__ref_raw_stalls_",
				"test.unique_stg_sales_sale_id",
				"test.unique_stg_sales_sale_id_5f6a7b8c9d",
			},
			problems: map[string]string{
				"analysis.market.scratch":             "analyses are not run",
				"model.market.forecast":               "python models are not supported",
				"model.market.forecast_report":        "depends on model.market.forecast",
				"test.market.assert_revenue_positive": "singular test with no compiled SQL",
				"test.market.dbt_utils_expression_is_true_stall_revenue_revenue_0.9d0e1f2a3b": "dbt_utils.expression_is_true",
				"test.market.not_null_forecast_stall_id.0f1e2d3c4b":                           "depends on model.market.forecast",
				"unit_test.market.stg_sales.test_payment_lowercased":                          "unit tests are not imported",
			},
			sql: map[string][]string{
				"model.stall_revenue":                   {`left join "vendors" as v`, `from "stg_sales"`},
				"model.ventas_año":                      {`from "stall_revenue"`},
				"test.not_null_dim_stalls_v2_vendor_id": {`from "dim_stalls_v2"`},
				"test.not_null_stg_sales_amount":        {`(select * from "stg_sales" where payment = 'cash') as dbt_subquery`},
				"test.relationships_stall_revenue_vendor_name__vendor_name__source_ext_vendors_external_": {`from "vendors"`},
			},
			// One voucher payment: a warn-severity test, one distinct bad value.
			failures: map[string]int64{"test.accepted_values_stg_sales_payment__cash__card": 1},
			rows:     map[string]int64{"seed.raw_sales": 8, "model.stall_revenue": 4, "model.dim_stalls_v2": 4},
		},
	}
	for _, tc := range tests {
		t.Run(tc.manifest, func(t *testing.T) {
			out := t.TempDir()
			res, err := dbt.Import(readFixture(t, tc.manifest), dbt.Options{ProjectDir: filepath.Join(fixtures, tc.project), OutDir: out})
			if err != nil {
				t.Fatal(err)
			}
			if res.SchemaVersion != tc.version {
				t.Errorf("schema version %d, want %d", res.SchemaVersion, tc.version)
			}
			if got := stepIDs(res.Plan); !reflect.DeepEqual(got, tc.steps) {
				t.Errorf("steps\n got %q\nwant %q", got, tc.steps)
			}
			var wantProblems []string
			for id := range tc.problems {
				wantProblems = append(wantProblems, id)
			}
			sort.Strings(wantProblems)
			if got := problemIDs(res.Problems); !reflect.DeepEqual(got, wantProblems) {
				t.Errorf("problems\n got %q\nwant %q\n(%v)", got, wantProblems, res.Problems)
			}
			for _, p := range res.Problems {
				if want := tc.problems[p.NodeID]; !strings.Contains(p.Message, want) {
					t.Errorf("problem %s: %q does not say %q", p.NodeID, p.Message, want)
				}
			}
			for _, s := range res.Plan.Steps {
				if multiPart.MatchString(s.SQL) {
					t.Errorf("%s keeps a multi-part relation name:\n%s", s.ID, s.SQL)
				}
				for _, want := range tc.sql[s.ID] {
					if !strings.Contains(s.SQL, want) {
						t.Errorf("%s SQL lacks %q:\n%s", s.ID, want, s.SQL)
					}
				}
				if s.Kind == plan.KindSeed && filepath.IsAbs(s.Path) {
					t.Errorf("%s: seed path %s is not relative to OutDir", s.ID, s.Path)
				}
			}

			// The YAML the CLI writes reads back as the same, valid plan.
			y, err := res.YAML()
			if err != nil {
				t.Fatal(err)
			}
			planFile := filepath.Join(out, "plan.yaml")
			if err := os.WriteFile(planFile, y, 0o644); err != nil {
				t.Fatal(err)
			}
			back, _, err := plan.Load(osSource{}, planFile)
			if err != nil {
				t.Fatalf("%v\n%s", err, y)
			}
			if err := back.Validate(); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back.Steps, res.Plan.Steps) {
				t.Errorf("YAML round trip changed the steps")
			}
			j, err := res.JSON()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := plan.Parse(j, "plan.json"); err != nil {
				t.Fatal(err)
			}

			// And it runs on SQLite, from the written file.
			runOnSQLite(t, back, tc.setup, tc.failures, tc.rows)
		})
	}
}

type osSource struct{}

func (osSource) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }

// runOnSQLite runs every step of p in order on a fresh warehouse and checks
// test failures (0 unless listed) and row counts.
func runOnSQLite(t *testing.T, p *plan.Plan, setup string, failures, rows map[string]int64) {
	t.Helper()
	ctx := context.Background()
	w, err := sqlite.OpenWarehouse(ctx, filepath.Join(t.TempDir(), "wh.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if setup != "" {
		if _, err := w.DB().Exec(setup); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range p.Order() {
		req := engine.StepRequest{StepID: s.ID, Kind: s.Kind, Materialized: s.Materialized, SQL: s.SQL, Severity: s.Severity}
		if s.Kind == plan.KindSeed || s.Kind == plan.KindModel {
			req.Relation = s.Relation()
		}
		if s.Kind == plan.KindSeed {
			req.SeedPath = filepath.Join(p.Dir, s.Path)
		}
		res, err := w.RunStep(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v\n%s", s.ID, err, s.SQL)
		}
		if s.Kind == plan.KindTest && res.Failures != failures[s.ID] {
			t.Errorf("%s returned %d rows, want %d\n%s", s.ID, res.Failures, failures[s.ID], s.SQL)
		}
		if want, ok := rows[s.ID]; ok && res.RowCount != want {
			t.Errorf("%s: %d rows, want %d", s.ID, res.RowCount, want)
		}
	}
}

// manyEmptyModels renders n model nodes with no SQL: none imports.
func manyEmptyModels(n int) string {
	nodes := make([]string, n)
	for i := range nodes {
		nodes[i] = fmt.Sprintf(`"model.a.m%02d": {"resource_type": "model", "name": "m%02d"}`, i, i)
	}
	return strings.Join(nodes, ", ")
}

func TestImportRejects(t *testing.T) {
	v12 := `"metadata": {"dbt_schema_version": "https://schemas.getdbt.com/dbt/manifest/v12.json"}`
	tests := []struct {
		name, manifest, want string
	}{
		{"not JSON", `{"metadata":`, "not valid JSON"},
		{"no schema version", `{"metadata": {}, "nodes": {}}`, "no metadata.dbt_schema_version"},
		{"schema v3", `{"metadata": {"dbt_schema_version": "https://schemas.getdbt.com/dbt/manifest/v3.json"}, "nodes": {}}`, "v3 is not supported"},
		{"schema v13", `{"metadata": {"dbt_schema_version": "https://schemas.getdbt.com/dbt/manifest/v13.json"}, "nodes": {}}`, "v13 is not supported"},
		{"null node", `{` + v12 + `, "nodes": {"model.a.b": null}}`, "node model.a.b is null"},
		// The error keeps the problem list (issue 8, Found 6).
		{"nothing importable", `{` + v12 + `, "nodes": {"model.a.b": {"resource_type": "model", "name": "b"}}}`, "no node of the dbt manifest could be imported (1 problems): model.a.b: "},
		{"nothing importable, many nodes", `{` + v12 + `, "nodes": {` + manyEmptyModels(40) + `}}`, "(40 problems): model.a.m00: "},
		// A missing seed leads the line, not the nodes that depend on it.
		{"seed not found", `{` + v12 + `, "nodes": {"seed.a.raw": {"resource_type": "seed", "name": "raw", "unique_id": "seed.a.raw", "original_file_path": "seeds/raw.csv"}, "model.a.stg": {"resource_type": "model", "name": "stg", "unique_id": "model.a.stg", "compiled_code": "select 1", "depends_on": {"nodes": ["seed.a.raw"]}}}}`, "seed CSV not found: " + filepath.Join("seeds", "raw.csv") + "; no node of the dbt manifest could be imported (2 problems)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := dbt.Import([]byte(tc.manifest), dbt.Options{})
			if err == nil || engine.CodeOf(err) != engine.CodePlanInvalid || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want PLAN_INVALID with %q", err, tc.want)
			}
			if strings.Contains(tc.name, "many") && (!strings.HasSuffix(err.Error(), "… and 37 more") || len(err.Error()) > 500) {
				t.Errorf("a long problem list is not cut with a count: %d bytes: %.200s…", len(err.Error()), err)
			}
		})
	}
}

// TestImportMaterializations checks the mapping of dbt materializations and
// the rendering of names that must be refused rather than spliced.
func TestImportMaterializations(t *testing.T) {
	node := func(id, name, mat string) string {
		return `"` + id + `": {"resource_type": "model", "name": "` + name + `", "config": {"materialized": "` + mat + `"}, "compiled_code": "select 1 as x", "depends_on": {"nodes": []}}`
	}
	m := `{"metadata": {"dbt_schema_version": "https://schemas.getdbt.com/dbt/manifest/v10.json"}, "nodes": {` + strings.Join([]string{
		node("model.p.t", "t", "table"),
		node("model.p.v", "v", "view"),
		node("model.p.i", "i", "incremental"),
		node("model.p.e", "e", "ephemeral"),
		node("model.p.mv", "mv", "materialized_view"),
		node("model.p.c", "c", "custom_thing"),
		node("model.p.bad", `bad-name\"; drop`, "table"),
		node("model.p.pipe", "a|b", "table"),
	}, ", ") + `}}`
	res, err := dbt.Import([]byte(m), dbt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range res.Plan.Steps {
		got[s.ID] = s.Materialized
	}
	want := map[string]string{"model.t": "table", "model.v": "view", "model.i": "table", "model.e": "ephemeral", "model.mv": "view"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("materializations %v, want %v", got, want)
	}
	wantProblems := []string{"model.p.bad", "model.p.c", "model.p.pipe"}
	if got := problemIDs(res.Problems); !slices.Equal(got, wantProblems) {
		t.Errorf("problems %v, want %v", res.Problems, wantProblems)
	}
}

// TestYAMLRoundTrip writes compiled SQL of awkward shapes (leading blank
// lines and indentation, as dbt emits, trailing spaces, tabs, YAML
// punctuation) and reads it back unchanged.
func TestYAMLRoundTrip(t *testing.T) {
	sqls := []string{
		"\n\nwith a as (\n    select 1 as x\n)\nselect * from a",
		"    select 1 as x\n",
		"select 1 as x   \n  \n",
		"select\t'#: not a comment', '- item' as x",
		"select 'ünïcode ✓' as x\r\nfrom (select 1)",
		"\n   \n\tselect 1 as x",
	}
	for i, sql := range sqls {
		enc, err := jsonString(sql)
		if err != nil {
			t.Fatal(err)
		}
		m := `{"metadata": {"dbt_schema_version": "https://schemas.getdbt.com/dbt/manifest/v12.json"}, "nodes": {"model.p.m": {"resource_type": "model", "name": "m", "config": {"materialized": "view"}, "compiled_code": ` + enc + `}}}`
		res, err := dbt.Import([]byte(m), dbt.Options{})
		if err != nil {
			t.Fatalf("#%d: %v", i, err)
		}
		y, err := res.YAML()
		if err != nil {
			t.Fatal(err)
		}
		back, err := plan.Parse(y, "plan.yaml")
		if err != nil {
			t.Fatalf("#%d: %v\n%s", i, err, y)
		}
		if back.Steps[0].SQL != sql {
			t.Errorf("#%d: SQL %q came back as %q", i, sql, back.Steps[0].SQL)
		}
	}
}

func jsonString(s string) (string, error) {
	b, err := json.Marshal(s)
	return string(b), err
}

// TestImportIncremental maps dbt incremental models: merge/delete+insert on
// column keys stay incremental on the key; no key, an expression key or
// another strategy become tables; SQL compiled in the is_incremental()
// branch (it reads the model's own table) is refused with the advice; an
// ephemeral model is not built, and its reader's compiled SQL (which dbt
// gave its __dbt__cte__ CTE) is kept as it is.
func TestImportIncremental(t *testing.T) {
	node := func(id, name, config, sql string, deps ...string) string {
		d, _ := json.Marshal(deps)
		q, _ := json.Marshal(sql)
		return `"` + id + `": {"resource_type": "model", "name": "` + name + `", "database": "db", "schema": "main", "relation_name": "\"db\".\"main\".\"` + name + `\"", "config": ` + config +
			`, "compiled_code": ` + string(q) + `, "depends_on": {"nodes": ` + string(d) + `}}`
	}
	m := `{"metadata": {"dbt_schema_version": "https://schemas.getdbt.com/dbt/manifest/v12.json"}, "nodes": {` + strings.Join([]string{
		node("model.p.one", "one", `{"materialized": "incremental", "unique_key": "id"}`, `select 1 as id`),
		node("model.p.two", "two", `{"materialized": "incremental", "unique_key": ["a", "b"], "incremental_strategy": "delete+insert"}`, `select 1 as a, 2 as b`),
		node("model.p.nokey", "nokey", `{"materialized": "incremental"}`, `select 1 as id`),
		node("model.p.expr", "expr", `{"materialized": "incremental", "unique_key": "a || b"}`, `select 1 as a`),
		node("model.p.micro", "micro", `{"materialized": "incremental", "unique_key": "id", "incremental_strategy": "microbatch"}`, `select 1 as id`),
		node("model.p.self", "self", `{"materialized": "incremental", "unique_key": "id"}`, `select 1 as id where 1 > (select max(id) from "db"."main"."self")`),
		node("model.p.eph", "eph", `{"materialized": "ephemeral"}`, `select 1 as id`),
		node("model.p.reader", "reader", `{"materialized": "table"}`, "with __dbt__cte__eph as (\nselect 1 as id\n)select * from __dbt__cte__eph", "model.p.eph"),
	}, ", ") + `}}`
	res, err := dbt.Import([]byte(m), dbt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		mat string
		key []string
	}
	steps := map[string]got{}
	for _, s := range res.Plan.Steps {
		steps[s.ID] = got{s.Materialized, s.UniqueKey}
	}
	want := map[string]got{
		"model.one": {"incremental", []string{"id"}}, "model.two": {"incremental", []string{"a", "b"}},
		"model.nokey": {"table", nil}, "model.expr": {"table", nil}, "model.micro": {"table", nil},
		"model.eph": {"ephemeral", nil}, "model.reader": {"table", nil},
	}
	if !reflect.DeepEqual(steps, want) {
		t.Errorf("steps %v, want %v", steps, want)
	}
	if len(res.Problems) != 1 || res.Problems[0].NodeID != "model.p.self" || !strings.Contains(res.Problems[0].Message, "dbt compile --full-refresh") {
		t.Errorf("problems %v, want model.p.self refused with the advice", res.Problems)
	}
	// The plan runs: the reader keeps dbt's own CTE and gets no second one.
	inlined := res.Plan.InlineEphemeral()
	reader, _ := inlined.Step("model.reader")
	if strings.Count(reader.SQL, " as (") != 1 || len(inlined.Steps) != len(res.Plan.Steps)-1 {
		t.Errorf("reader SQL after inlining:\n%s", reader.SQL)
	}
}

// TestImportDropsNodesValidationRefuses: a node whose step the plan's
// validation would refuse on its own (several statements, a reserved
// relation name, a control character) is a problem of that node; the rest
// of the manifest imports into a plan that validates.
func TestImportDropsNodesValidationRefuses(t *testing.T) {
	node := func(id, name, sql string) string {
		return `"` + id + `": {"resource_type": "model", "name": "` + name + `", "config": {"materialized": "table"}, "compiled_code": "` + sql + `", "depends_on": {"nodes": []}}`
	}
	m := `{"metadata": {"dbt_schema_version": "https://schemas.getdbt.com/dbt/manifest/v12.json"}, "nodes": {` + strings.Join([]string{
		node("model.p.good", "good", "select 1 as x"),
		node("model.p.two", "two", "select 1 as x; drop table good"),
		node("model.p.sqlite_master", "sqlite_master", "select 1 as x"),
		node("model.p.esc", `esc\u001b[2J`, "select 1 as x"),
	}, ", ") + `}}`
	res, err := dbt.Import([]byte(m), dbt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Plan.Steps) != 1 || res.Plan.Steps[0].ID != "model.good" {
		t.Fatalf("steps %+v", res.Plan.Steps)
	}
	want := map[string]string{
		"model.p.two":           "several statements",
		"model.p.sqlite_master": "reserved prefix",
		"model.p.esc":           `"esc\x1b[2J"`,
	}
	for _, p := range res.Problems {
		if w, ok := want[p.NodeID]; ok && strings.Contains(p.Message, w) {
			delete(want, p.NodeID)
		}
	}
	if len(want) > 0 {
		t.Errorf("problems %+v lack %v", res.Problems, want)
	}
	if err := res.Plan.Validate(); err != nil {
		t.Error(err)
	}
}
