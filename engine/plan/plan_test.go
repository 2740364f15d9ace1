package plan

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dvtrun/dvtrun/engine"
)

// basePlan is a small valid plan; the tests below break it one way at a
// time.
const basePlan = `
planId: p
planVersion: 3
schemaVersion: "1"
metadata: {targetAdapter: any}
steps:
  - {id: seed.raw, kind: seed, path: seeds/raw.csv}
  - {id: model.stg, kind: model, materialized: view, sql: "select * from raw", dependsOn: [seed.raw]}
  - {id: model.final, kind: model, materialized: table, sql: "select id from stg", dependsOn: [model.stg], retries: 2, timeout: 30s}
  - {id: test.not_null_final_id, kind: test, severity: warn, sql: "select * from final where id is null", dependsOn: [model.final]}
  - {id: sql.grant, kind: sql, sql: "update final set x = 1", dependsOn: [model.final], secrets: [{name: API_TOKEN}]}
`

func TestParsePlan(t *testing.T) {
	tests := []struct {
		name, text string
	}{
		{"YAML", basePlan},
		{"JSON", `{"planId": "p", "planVersion": "3", "steps": [{"id": "sql.a", "kind": "sql", "sql": "select 1", "timeout": 30}]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.text), "p.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if p.PlanID != "p" || p.PlanVersion != "3" {
				t.Errorf("identity %q %q", p.PlanID, p.PlanVersion)
			}
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
	p, _ := Parse([]byte(basePlan), "p.yaml")
	final, _ := p.Step("model.final")
	if final.Timeout.Duration != 30*time.Second || final.Retries != 2 || final.Relation() != "final" {
		t.Errorf("model.final = %+v", final)
	}
}

func TestParsePlanRejects(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"not YAML", "planId: [", "not valid YAML or JSON"},
		{"not a mapping", "- 1\n- 2", "does not match the plan schema"},
		{"missing planId", `{"planVersion": "1", "steps": []}`, "planId"},
		{"unknown field", `{"planId": "p", "planVersion": "1", "steps": [], "extra": 1}`, "extra"},
		{"unknown step field", `{"planId": "p", "planVersion": "1", "steps": [{"id": "a", "kind": "sql", "password": "x"}]}`, "password"},
		{"negative retries", `{"planId": "p", "planVersion": "1", "steps": [{"id": "a", "kind": "sql", "retries": -1}]}`, "retries"},
		{"planVersion as a float", "planId: p\nplanVersion: 1.5\nsteps: []", "planVersion"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.text), "bad.yaml")
			if err == nil {
				t.Fatal("accepted")
			}
			if engine.CodeOf(err) != engine.CodePlanInvalid || !strings.Contains(err.Error(), "bad.yaml") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want PLAN_INVALID naming bad.yaml and %q", err, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(p *Plan)
		want   []string
	}{
		{"duplicate id", func(p *Plan) { p.Steps[2].ID = "model.stg" }, []string{"step model.stg: duplicate id"}},
		{"pipe in id", func(p *Plan) { p.Steps[4].ID = "sql.a|b" }, []string{"step sql.a|b: id contains '|'"}},
		{"pipe in planVersion", func(p *Plan) { p.PlanVersion = "1|2" }, []string{`planVersion "1|2" contains '|'`}},
		{"no id", func(p *Plan) { p.Steps[4].ID = "" }, []string{"step #5 has no id"}},
		{"unknown dependency", func(p *Plan) { p.Steps[1].DependsOn = []string{"seed.nope"} }, []string{"step model.stg: depends on unknown step seed.nope"}},
		{"self dependency", func(p *Plan) { p.Steps[1].DependsOn = []string{"model.stg"} }, []string{"step model.stg: depends on itself"}},
		{"cycle", func(p *Plan) { p.Steps[1].DependsOn = []string{"test.not_null_final_id"} }, []string{"dependency cycle: model.stg -> test.not_null_final_id -> model.final -> model.stg"}},
		{"empty SQL", func(p *Plan) { p.Steps[3].SQL = "  \n" }, []string{"step test.not_null_final_id: SQL is empty"}},
		{"seed without path", func(p *Plan) { p.Steps[0].Path = "" }, []string{"step seed.raw: a seed needs the path"}},
		{"materialization", func(p *Plan) { p.Steps[1].Materialized = "snapshot" }, []string{`step model.stg: materialized "snapshot" is not table, view, incremental or ephemeral`}},
		{"uniqueKey on a table", func(p *Plan) { p.Steps[1].Materialized = "table"; p.Steps[1].UniqueKey = []string{"id"} }, []string{"step model.stg: uniqueKey applies to incremental models only"}},
		{"incremental settings", func(p *Plan) {
			p.Steps[1].Materialized = "incremental"
			p.Steps[1].UniqueKey = []string{"id", "ID", "a b"}
			p.Steps[1].IncrementalFilter = "x > (select max(x) from {{ this }}) and {{ is_incremental() }}"
		}, []string{`uniqueKey column "ID" is listed twice`, `uniqueKey column "a b" is not a valid identifier`, `incrementalFilter: {{ is_incremental() }}: unknown function is_incremental`}},
		{"sql step reading an ephemeral model", func(p *Plan) { p.Steps[2].Materialized = "ephemeral" }, []string{"step sql.grant: depends on ephemeral model model.final, which only models and tests can read"}},
		{"severity", func(p *Plan) { p.Steps[3].Severity = "fatal" }, []string{`step test.not_null_final_id: severity "fatal"`}},
		{"unknown kind", func(p *Plan) { p.Steps[4].Kind = "python" }, []string{`step sql.grant: unknown kind "python"`}},
		{"relation not an identifier", func(p *Plan) { p.Steps[1].Name = `stg"; drop table x; --` }, []string{"step model.stg: relation name"}},
		{"relation built twice, any case", func(p *Plan) { p.Steps[2].Name = "STG" }, []string{"step model.final: builds STG, which step model.stg builds too"}},
		{"negative timeout", func(p *Plan) { p.Steps[2].Timeout.Duration = -time.Second }, []string{`step model.final: timeout "-1s" is out of range`}},
		{"secret name", func(p *Plan) { p.Steps[4].Secrets[0].Name = "A-B" }, []string{`step sql.grant: secret name "A-B"`}},
		{"every problem reported", func(p *Plan) { p.Steps[0].Path = ""; p.Steps[3].SQL = "" }, []string{"step seed.raw:", "step test.not_null_final_id:"}},
		{"no steps", func(p *Plan) { p.Steps = nil }, []string{"the plan has no steps"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(basePlan), "p.yaml")
			if err != nil {
				t.Fatal(err)
			}
			tc.mutate(p)
			err = p.Validate()
			if err == nil {
				t.Fatal("valid")
			}
			if engine.CodeOf(err) != engine.CodePlanInvalid {
				t.Errorf("code %q", engine.CodeOf(err))
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v\ndoes not say %q", err, w)
				}
			}
		})
	}
}

// TestValidateHostile: plans a hostile user writes are refused by Validate
// (so by `plan validate` and before `run` records anything), each problem
// named, control characters escaped, long lists cut with a count.
func TestValidateHostile(t *testing.T) {
	step := func(s string) string {
		return "planId: p\nplanVersion: \"1\"\nsteps:\n  - " + s + "\n"
	}
	tests := []struct{ name, text, want string }{
		{"ESC in step id", step(`{id: "sql.a\e[2J", kind: sql, sql: "select 1"}`), `step #1: id "sql.a\x1b[2J" contains a control character`},
		{"BEL in planId", "planId: \"p\\a\"\nplanVersion: \"1\"\nsteps: [{id: sql.a, kind: sql, sql: x}]\n", `planId "p\x07" contains a control character`},
		{"newline in step id", step(`{id: "sql.a\nb", kind: sql, sql: "select 1"}`), `id "sql.a\nb" contains a control character`},
		{"newline in dependency", step(`{id: sql.a, kind: sql, sql: x, dependsOn: ["b\e"]}`), `depends on unknown step "b\x1b"`},
		{"timeout 1e10", step(`{id: sql.a, kind: sql, sql: x, timeout: 1e10}`), `step sql.a: timeout "10000000000s" is out of range: want a duration from 0 to 168h0m0s`},
		{"timeout not a duration", step(`{id: sql.a, kind: sql, sql: x, timeout: soon}`), `step sql.a: timeout "soon" is out of range`},
		{"negative timeout", step(`{id: sql.a, kind: sql, sql: x, timeout: -5}`), `timeout "-5s" is out of range`},
		{"sqlite_master", step(`{id: model.sqlite_master, kind: model, sql: "select 1"}`), `step model.sqlite_master: relation name "sqlite_master" uses a reserved prefix`},
		{"dvt_tmp__", step(`{id: seed.x, name: DVT_TMP__x, kind: seed, path: x.csv}`), `relation name "DVT_TMP__x" uses a reserved prefix`},
		{"three-part relation", step(`{id: model.a, name: db.s.a, kind: model, sql: "select 1"}`), `relation name "db.s.a" is not a valid identifier (or schema.name)`},
		{"empty schema", step(`{id: model.a, name: .a, kind: model, sql: "select 1"}`), `relation name ".a" is not a valid identifier (or schema.name)`},
		{"dvt_tmp__ in a qualified name", step(`{id: model.a, name: s.dvt_tmp__a, kind: model, sql: "select 1"}`), `relation name "s.dvt_tmp__a" uses a reserved prefix`},
		{"two statements in a test", step(`{id: test.a, kind: test, sql: "select 1; delete from t"}`), "step test.a: the SQL holds several statements"},
		{"two statements in a model", step(`{id: model.a, kind: model, sql: "select 1; select 2"}`), "step model.a: the SQL holds several statements"},
		{"begin/commit in a sql step", step(`{id: sql.a, kind: sql, sql: "begin; insert into t values (1); commit"}`), `step sql.a: "begin" controls the transaction`},
		{"undeclared secret", step(`{id: sql.a, kind: sql, sql: "insert into t values ({{ secret('API_TOKEN') }})"}`), "step sql.a: the SQL uses secret API_TOKEN, which the step does not declare"},
		{"secret in a view", step(`{id: model.a, kind: model, sql: "select {{ secret('K') }} as k", secrets: [{name: K}]}`), "step model.a: a view cannot take a secret"},
		{"NUL byte in a model's SQL", step(`{id: model.a, kind: model, materialized: table, sql: "select 1 as x\0; drop table t"}`), "step model.a: the SQL holds a NUL byte (at byte 13)"},
		{"NUL byte in a sql step", step(`{id: sql.a, kind: sql, sql: "delete from t where 1=0\0 or 1=1"}`), "step sql.a: the SQL holds a NUL byte"},
		{"long id", step(`{id: "sql.` + strings.Repeat("x", 40000) + `\e", kind: sql, sql: x}`), `(40005 bytes) contains a control character`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.text), "p.yaml")
			if err == nil {
				err = p.Validate()
			}
			if engine.CodeOf(err) != engine.CodePlanInvalid || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant PLAN_INVALID with %s", err, tc.want)
			}
			if engine.HasControl(err.Error()) || len(err.Error()) > 1000 {
				t.Errorf("the error holds control characters or is %d bytes long", len(err.Error()))
			}
		})
	}

	// A thousand bad steps: every problem in Meta, ten in the sentence.
	var b strings.Builder
	b.WriteString("planId: p\nplanVersion: \"1\"\nsteps:\n")
	for i := range 1000 {
		fmt.Fprintf(&b, "  - {id: sql.s%d, kind: sql, sql: \"commit\"}\n", i)
	}
	p, err := Parse([]byte(b.String()), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	err = p.Validate()
	var e *engine.Error
	if !errors.As(err, &e) || len(e.Meta["problems"].([]string)) != 1000 || !strings.HasSuffix(e.Msg, "… and 990 more") || len(e.Msg) > 2000 {
		t.Errorf("1000 problems: %d bytes: %.300s", len(err.Error()), err)
	}
}

// TestValidateSchemaQualified: a relation may be schema.name (Postgres
// builds it in that schema); two steps building one, in any case, clash.
func TestValidateSchemaQualified(t *testing.T) {
	p := &Plan{PlanID: "p", PlanVersion: "1", Steps: []Step{
		{ID: "seed.raw", Name: "public.raw", Kind: KindSeed, Path: "raw.csv"},
		{ID: "model.raw", Name: "raw", Kind: KindModel, SQL: `select * from "public"."raw"`, DependsOn: []string{"seed.raw"}},
	}}
	if err := p.Validate(); err != nil {
		t.Fatalf("schema.name beside a one-part name: %v", err)
	}
	p.Steps = append(p.Steps, Step{ID: "model.raw2", Name: "PUBLIC.Raw", Kind: KindModel, SQL: "select 1"})
	if err := p.Validate(); engine.CodeOf(err) != engine.CodePlanInvalid || !strings.Contains(err.Error(), "builds PUBLIC.Raw, which step seed.raw builds too") {
		t.Errorf("two steps building public.raw: %v", err)
	}
}

func TestOrder(t *testing.T) {
	p := &Plan{PlanID: "p", PlanVersion: "1", Steps: []Step{
		{ID: "test.t", Kind: KindTest, SQL: "x", DependsOn: []string{"model.b", "model.a"}},
		{ID: "model.b", Kind: KindModel, SQL: "x", DependsOn: []string{"seed.s"}},
		{ID: "sql.free", Kind: KindSQL, SQL: "x"},
		{ID: "model.a", Kind: KindModel, SQL: "x", DependsOn: []string{"seed.s"}},
		{ID: "seed.s", Kind: KindSeed, Path: "s.csv"},
	}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range p.Order() {
		got = append(got, s.ID)
	}
	// Ready steps in plan order, wave by wave.
	want := []string{"sql.free", "seed.s", "model.b", "model.a", "test.t"}
	if !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
	if deps := p.Dependents()["seed.s"]; !slices.Equal(deps, []string{"model.b", "model.a"}) {
		t.Errorf("dependents of seed.s: %v", deps)
	}
}

// FuzzParsePlan: parsing and validating any bytes never panics, every
// refusal is PLAN_INVALID, and a valid plan orders all its steps after
// their dependencies.
func FuzzParsePlan(f *testing.F) {
	f.Add([]byte(basePlan))
	f.Add([]byte(`{"planId": "p", "planVersion": "1", "steps": [{"id": "a.b", "kind": "sql", "sql": "x", "dependsOn": ["a.b"]}]}`))
	f.Add([]byte("planId: p\nplanVersion: 1\nsteps:\n  - &s {id: x.a, kind: sql, sql: q}\n  - *s\n"))
	f.Add([]byte("planId: p\nplanVersion: 1\nsteps: [{id: t.a, kind: test, sql: q, timeout: 1e300}]"))
	if b, err := os.ReadFile(filepath.Join("..", "plans", "shop", "plan.yaml")); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data, "fuzz.yaml")
		if err != nil {
			if engine.CodeOf(err) != engine.CodePlanInvalid {
				t.Fatalf("Parse error without PLAN_INVALID: %v", err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			if engine.CodeOf(err) != engine.CodePlanInvalid {
				t.Fatalf("Validate error without PLAN_INVALID: %v", err)
			}
			// Whatever the input, the sentence is one bounded line that a
			// terminal can print as is.
			if msg := err.Error(); engine.HasControl(msg) || len(msg) > 8<<10 {
				t.Fatalf("Validate error of %d bytes or with control characters: %.300q", len(msg), msg)
			}
			return
		}
		for _, s := range p.Steps {
			if engine.HasControl(s.ID) || engine.HasControl(p.PlanID) || s.Timeout.Duration < 0 || s.Timeout.Duration > MaxStepTimeout {
				t.Fatalf("a valid plan with step %q of plan %q, timeout %v", s.ID, p.PlanID, s.Timeout)
			}
		}
		order := p.Order()
		if len(order) != len(p.Steps) {
			t.Fatalf("Order returned %d of %d steps", len(order), len(p.Steps))
		}
		pos := map[string]int{}
		for i, s := range order {
			pos[s.ID] = i
		}
		for _, s := range order {
			for _, d := range s.DependsOn {
				if pos[d] >= pos[s.ID] {
					t.Fatalf("%s ordered before its dependency %s", s.ID, d)
				}
			}
		}
	})
}

// FuzzReadSeed: any bytes give a table or a PLAN_INVALID error naming the
// file; a table's rows have one value per column, of the column's type.
func FuzzReadSeed(f *testing.F) {
	for _, s := range []string{
		"id,name\n1,a\n2,b\n",
		"id,note\r\n1,\"a, b\"\r\n2,\"x\r\ny\"\r\n",
		"\ufeffa,b\n1.5,\n,NaN\n",
		"a,b\n1\n",
		"a,\"b\n",
		"a,a\n",
	} {
		f.Add([]byte(s))
	}
	if b, err := os.ReadFile(filepath.Join("..", "plans", "shop", "seeds", "raw_products.csv")); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tab, err := ReadSeed(strings.NewReader(string(data)), "fuzz.csv")
		if err != nil {
			if engine.CodeOf(err) != engine.CodePlanInvalid || !strings.Contains(err.Error(), "fuzz.csv:") && !strings.Contains(err.Error(), "seed fuzz.csv is empty") {
				t.Fatalf("error %v: want PLAN_INVALID naming the file and line", err)
			}
			if len(err.Error()) > 1024 {
				t.Fatalf("a %d-byte error: %.200q", len(err.Error()), err)
			}
			return
		}
		if len(tab.Columns) == 0 || len(tab.Types) != len(tab.Columns) || len(tab.Columns) > MaxSeedColumns {
			t.Fatalf("columns %v types %v", tab.Columns, tab.Types)
		}
		for i, row := range tab.Rows {
			if len(row) != len(tab.Columns) {
				t.Fatalf("row %d has %d values for %d columns", i, len(row), len(tab.Columns))
			}
			for c, v := range row {
				ok := false
				switch x := v.(type) {
				case nil:
					ok = true
				case int64:
					ok = tab.Types[c] == TypeInteger
				case float64:
					ok = tab.Types[c] == TypeReal
				case string:
					// Binary content never loads.
					ok = tab.Types[c] == TypeText && x != "" && utf8.ValidString(x) && !strings.ContainsRune(x, 0)
				}
				if !ok {
					t.Fatalf("row %d column %s: %#v in a %s column", i, tab.Columns[c], v, tab.Types[c])
				}
			}
		}
	})
}
