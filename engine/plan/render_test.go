package plan

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
)

// contextPlan uses every template the renderer knows.
const contextPlan = `
planId: ctx
planVersion: "1"
sources:
  - {name: raw, schema: RAW, tables: [orders, customers]}
  - {name: lake, database: LAKE, tables: [events]}
steps:
  - {id: seed.regions, kind: seed, path: regions.csv}
  - {id: model.eph, kind: model, materialized: ephemeral, sql: "select * from {{ source('raw', 'customers') }}"}
  - id: model.orders
    kind: model
    materialized: table
    sql: |-
      select o.*, {{ var('region') }} as region, {{ var('limit', 10) }} as lim
      from {{ source('raw', 'orders') }} o join {{ ref('regions') }} r on r.id = o.region_id
      where o.at >= {{ data_interval_start }} and o.at < {{ data_interval_end_utc }}
  - {id: model.daily, kind: model, materialized: incremental, uniqueKey: [day],
     sql: "select {{ logical_date }} as day, count(*) as n from {{ ref('orders') }} join {{ ref('eph') }} on 1 = 1",
     incrementalFilter: "day > (select max(day) from {{ this }}) and day >= {{ var('since', '2026-01-01') }}"}
  - {id: test.rows, kind: test, sql: "select * from {{ ref('daily') }} where n < {{ var('min_rows', 0) }} and note not like '%{{%}}%' -- {{ ref('nope') }} in a comment"}
  - {id: sql.audit, kind: sql, sql: "insert into audit values ({{ secret('TOKEN') }}, {{ var('full', false) }}, {{ var('note', none) }})", secrets: [{name: TOKEN}], dependsOn: [model.daily]}
`

// qualifying is a dialect with two-part names, as Postgres writes them.
type qualifying struct{ schema string }

func (q qualifying) Relation(name string) string { return q.schema + "." + name }
func (q qualifying) Source(db, schema, table string) string {
	if db != "" {
		return db + "." + schema + "." + table
	}
	return schema + "." + table
}
func (qualifying) StringLiteral(v string) string { return QuoteString(v) }
func (qualifying) BoolLiteral(v bool) string {
	if v {
		return "true"
	}
	return "false"
}

func mustParse(t *testing.T, text string) *Plan {
	t.Helper()
	p, err := Parse([]byte(text), "plan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRender(t *testing.T) {
	p := mustParse(t, contextPlan)
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	iv := &engine.DataInterval{Start: "2026-11-24T23:00:00Z", End: "2026-11-25T23:00:00Z", Timezone: "Europe/Paris"}
	vars := map[string]any{"region": "it's eu", "full": true, "min_rows": 2.5}
	cases := []struct {
		step    string
		dialect Dialect
		want    string
		filter  string
	}{
		{"model.orders", qualifying{"dev"},
			"select o.*, 'it''s eu' as region, 10 as lim\nfrom RAW.orders o join dev.regions r on r.id = o.region_id\nwhere o.at >= '2026-11-25T00:00:00+01:00' and o.at < '2026-11-25T23:00:00Z'", ""},
		{"model.orders", nil,
			"select o.*, 'it''s eu' as region, 10 as lim\nfrom orders o join regions r on r.id = o.region_id\nwhere o.at >= '2026-11-25T00:00:00+01:00' and o.at < '2026-11-25T23:00:00Z'", ""},
		// A ref to an ephemeral model names its CTE, never a relation.
		{"model.daily", qualifying{"prod"},
			"select '2026-11-25T00:00:00+01:00' as day, count(*) as n from prod.orders join eph on 1 = 1",
			"day > (select max(day) from {{ this }}) and day >= '2026-01-01'"},
		{"test.rows", qualifying{"dev"}, "select * from dev.daily where n < 2.5 and note not like '%{{%}}%' -- {{ ref('nope') }} in a comment", ""},
		{"sql.audit", qualifying{"dev"}, "insert into audit values (?, true, NULL)", ""},
	}
	for _, tc := range cases {
		r := NewRenderer(p, Context{Dialect: tc.dialect, Vars: vars, Interval: iv, Secrets: func(n string) (string, bool) { return "s3cr3t-" + n, true }})
		s, _ := p.Step(tc.step)
		got, params, err := r.SQL(s)
		if err != nil {
			t.Fatalf("%s: %v", tc.step, err)
		}
		if got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.step, got, tc.want)
		}
		wantParams := 0
		if tc.step == "sql.audit" {
			wantParams = 1
			if params[0] != "s3cr3t-TOKEN" {
				t.Errorf("secret bound as %v", params)
			}
		}
		if len(params) != wantParams {
			t.Errorf("%s: %d params, want %d", tc.step, len(params), wantParams)
		}
		f, err := r.Filter(s)
		if err != nil || f != tc.filter {
			t.Errorf("%s: filter %q, %v; want %q", tc.step, f, err, tc.filter)
		}
		if tc.filter != "" {
			if got, err := RenderThis(f, `"daily"`); err != nil || !strings.Contains(got, `from "daily")`) {
				t.Errorf("RenderThis(%q) = %q, %v", f, got, err)
			}
		}
	}
	// The lake source has no schema: dbt's default, the source's name.
	src := mustParse(t, strings.Replace(contextPlan, "source('raw', 'customers')", "source('lake', 'events')", 1))
	s, _ := src.Step("model.eph")
	if got, _, _ := NewRenderer(src, Context{Dialect: qualifying{"dev"}}).SQL(s); got != "select * from LAKE.lake.events" {
		t.Errorf("lake source: %q", got)
	}
}

// TestInferDependsOn: refs add dependencies, after the listed ones, once.
func TestInferDependsOn(t *testing.T) {
	p := mustParse(t, contextPlan)
	for id, want := range map[string][]string{
		"model.orders": {"seed.regions"},
		"model.daily":  {"model.orders", "model.eph"},
		"test.rows":    {"model.daily"}, // the ref in the comment is no dependency
		"sql.audit":    {"model.daily"},
	} {
		s, _ := p.Step(id)
		if !slices.Equal(s.DependsOn, want) {
			t.Errorf("%s depends on %v, want %v", id, s.DependsOn, want)
		}
	}
	// Ephemeral inlining follows the inferred edge.
	daily, _ := p.InlineEphemeral().Step("model.daily")
	if !strings.HasPrefix(daily.SQL, "WITH eph AS (\nselect * from {{ source('raw', 'customers') }}\n)") {
		t.Errorf("inlined: %q", daily.SQL)
	}
}

// TestValidateTemplates: what Validate refuses in templates, each problem
// naming its step.
func TestValidateTemplates(t *testing.T) {
	const head = "planId: p\nplanVersion: \"1\"\nsources: [{name: raw, tables: [orders]}]\nsteps:\n  - {id: seed.s, kind: seed, path: s.csv}\n"
	cases := []struct {
		name, steps, want string
	}{
		{"unknown ref", `  - {id: model.a, kind: model, sql: "select * from {{ ref('nope') }}"}`,
			`step model.a: {{ ref('nope') }}: no seed or model of the plan builds "nope"`},
		{"mistyped ref", "  - {id: seed.raw_orders, kind: seed, path: o.csv}\n  - {id: model.a, kind: model, sql: \"select * from {{ ref('raw_ordrs') }}\"}",
			`step model.a: {{ ref('raw_ordrs') }}: no seed or model of the plan builds "raw_ordrs"; did you mean ref('raw_orders')?`},
		{"cycle through refs", "  - {id: model.a, kind: model, sql: \"select * from {{ ref('b') }}\"}\n  - {id: model.b, kind: model, sql: \"select * from {{ ref('a') }}\"}",
			"dependency cycle: model.a -> model.b -> model.a"},
		{"self ref", `  - {id: model.a, kind: model, sql: "select * from {{ ref('a') }}"}`, "step model.a: depends on itself"},
		{"unknown source", `  - {id: model.a, kind: model, sql: "select * from {{ source('lake', 'orders') }}"}`,
			`step model.a: {{ source('lake', 'orders') }}: the plan declares no source "lake"`},
		{"unknown source table", `  - {id: model.a, kind: model, sql: "select * from {{ source('raw', 'items') }}"}`,
			`source "raw" declares no table "items"`},
		{"unknown function", `  - {id: model.a, kind: model, sql: "select {{ env_var('X') }}"}`,
			"step model.a: SQL: {{ env_var('X') }}: unknown function env_var"},
		{"unknown name", `  - {id: model.a, kind: model, sql: "select {{ ds }}"}`, "unknown name ds"},
		{"inside a string", `  - {id: model.a, kind: model, sql: "select '{{ var(\"x\") }}'"}`, "{{ var(\"x\") }} is inside a quoted string or name; write it bare"},
		{"inside a quoted name", `  - {id: model.a, kind: model, sql: "select * from \"{{ ref('s') }}\""}`, "is inside a quoted string or name"},
		{"unclosed", `  - {id: model.a, kind: model, sql: "select {{ var('x') "}`, "has no closing }}"},
		{"non-literal default", `  - {id: model.a, kind: model, sql: "select {{ var('x', y) }}"}`, "y is not a literal"},
		{"ref with a number", `  - {id: model.a, kind: model, sql: "select {{ ref(1) }}"}`, "ref's argument 1 must be a quoted string"},
		{"this in a test", `  - {id: test.a, kind: test, sql: "select * from {{ this }}"}`, "step test.a: SQL: {{ this }} is the relation a model builds; a test step builds none"},
		{"secret in a filter", `  - {id: model.a, kind: model, materialized: incremental, sql: "select 1 as x", incrementalFilter: "x > {{ secret('K') }}", secrets: [{name: K}]}`,
			"a secret can only be used in the step's SQL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(head+tc.steps+"\n"), "p.yaml")
			if err == nil {
				err = p.Validate()
			}
			if !errors.Is(err, engine.ErrPlanInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant PLAN_INVALID saying %q", err, tc.want)
			}
		})
	}
	// A plan built in code must list what its refs read.
	p := &Plan{PlanID: "p", PlanVersion: "1", Steps: []Step{
		{ID: "model.a", Kind: KindModel, SQL: "select 1 as x"},
		{ID: "model.b", Kind: KindModel, SQL: "select * from {{ ref('a') }}"},
	}}
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "step model.b: {{ ref('a') }} reads step model.a, which it does not depend on") {
		t.Errorf("missing edge: %v", err)
	}
}

// TestCheckContext: vars and intervals the run's context cannot render are
// PLAN_INVALID naming the step and the var.
func TestCheckContext(t *testing.T) {
	p := mustParse(t, contextPlan)
	run := p.InlineEphemeral()
	iv := &engine.DataInterval{Start: "2026-11-24T00:00:00Z", End: "2026-11-25T00:00:00Z"}
	cases := []struct {
		name string
		c    Context
		want []string // "" : no error
	}{
		{"complete", Context{Vars: map[string]any{"region": "eu"}, Interval: iv}, nil},
		{"missing var", Context{Interval: iv}, []string{`step model.orders: {{ var('region') }}: var "region" is not set (pass it with --vars) and has no default`}},
		{"no interval", Context{Vars: map[string]any{"region": "eu"}},
			[]string{"step model.orders: {{ data_interval_start }}: this run has no data interval", "step model.daily: {{ logical_date }}: this run has no data interval"}},
		{"no interval yet (plan validate)", Context{Vars: map[string]any{"region": "eu"}, AnyInterval: true}, nil},
		{"list var", Context{Vars: map[string]any{"region": []any{"eu"}}, Interval: iv}, []string{`var "region": is a list`}},
		{"object var", Context{Vars: map[string]any{"region": map[string]any{"a": 1}}, Interval: iv}, []string{`var "region": is an object`}},
		{"bad zone", Context{Vars: map[string]any{"region": "eu"}, Interval: &engine.DataInterval{Start: iv.Start, End: iv.End, Timezone: "Mars/Base"}}, []string{`unknown time zone "Mars/Base"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckContext(p, run, tc.c)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, engine.ErrPlanInvalid) {
				t.Fatalf("got %v, want PLAN_INVALID", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v\ndoes not say %q", err, w)
				}
			}
		})
	}
}

func TestSQLLiteral(t *testing.T) {
	cases := []struct {
		v    any
		want string
	}{
		{"a'b", "'a''b'"}, {`a\'`, `'a\'''`}, {7, "7"}, {int64(-3), "-3"}, {1.5, "1.5"}, {float64(100), "100"},
		{true, "TRUE"}, {nil, "NULL"}, {"{{ this }}", "'{{ this }}'"},
	}
	for _, tc := range cases {
		if got, err := SQLLiteral(PlainDialect{}, tc.v); err != nil || got != tc.want {
			t.Errorf("SQLLiteral(%#v) = %q, %v; want %q", tc.v, got, err, tc.want)
		}
	}
}

// FuzzRender: a var's value cannot change the statement it is rendered
// into — the SQL rendered with any value splits into as many statements as
// with a plain one (a value that closed its literal could add one) — and
// rendering never panics.
func FuzzRender(f *testing.F) {
	f.Fuzz(func(t *testing.T, sql, value string) {
		p := &Plan{PlanID: "p", PlanVersion: "1", Steps: []Step{{ID: "model.a", Kind: KindModel, SQL: sql}}}
		render := func(v string) (string, error) {
			out, _, err := NewRenderer(p, Context{Vars: map[string]any{"v": v}}).SQL(p.Steps[0])
			return out, err
		}
		out, err := render(value)
		plain, perr := render("x")
		if (err == nil) != (perr == nil) {
			t.Fatalf("value %q renders with %v, a plain one with %v", value, err, perr)
		}
		if err != nil {
			return
		}
		if n, m := len(splitStatements(out)), len(splitStatements(plain)); n != m {
			t.Fatalf("value %q makes %d statement(s) of %q, a plain one %d:\n%s", value, n, sql, m, out)
		}
	})
}

// BenchmarkRenderStep: rendering is per step attempt, in the runner,
// before the warehouse is called.
func BenchmarkRenderStep(b *testing.B) {
	p, err := Parse([]byte(contextPlan), "plan.yaml")
	if err != nil {
		b.Fatal(err)
	}
	s, _ := p.Step("model.orders")
	r := NewRenderer(p, Context{Dialect: qualifying{"dev"}, Vars: map[string]any{"region": "eu"},
		Interval: &engine.DataInterval{Start: "2026-11-24T23:00:00Z", End: "2026-11-25T23:00:00Z", Timezone: "Europe/Paris"}})
	for b.Loop() {
		if _, _, err := r.SQL(s); err != nil {
			b.Fatal(err)
		}
	}
}
