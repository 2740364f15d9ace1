package plan

import (
	"reflect"
	"strings"
	"testing"
)

func TestInlineEphemeral(t *testing.T) {
	steps := []Step{
		{ID: "seed.raw", Kind: KindSeed, Path: "raw.csv"},
		{ID: "model.base", Kind: KindModel, Materialized: MaterializedEphemeral, SQL: "select * from raw where id > 0;\n", DependsOn: []string{"seed.raw"}, Secrets: []SecretRef{{Name: "S"}}},
		{ID: "model.named", Kind: KindModel, Materialized: MaterializedEphemeral, SQL: "select id from base -- trailing comment", DependsOn: []string{"model.base"}},
		{ID: "model.plain", Kind: KindModel, Materialized: MaterializedTable, SQL: "select * from named", DependsOn: []string{"model.named"}},
		{ID: "model.withclause", Kind: KindModel, SQL: "-- lead\nWITH x AS (select 1) select * from BASE, x", DependsOn: []string{"model.base"}},
		{ID: "model.recursive", Kind: KindModel, SQL: "with recursive r(n) as (select 1) select * from r, \"base\"", DependsOn: []string{"model.base"}},
		{ID: "model.dbt", Kind: KindModel, SQL: "with __dbt__cte__base as (select 1)select * from __dbt__cte__base", DependsOn: []string{"model.base", "seed.raw"}},
		{ID: "test.t", Kind: KindTest, SQL: "select * from named where id is null", DependsOn: []string{"model.named"}},
	}
	p := &Plan{PlanID: "p", PlanVersion: "1", Steps: steps}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	got := p.InlineEphemeral()
	const baseCTE = "base AS (\nselect * from raw where id > 0\n)"
	const namedCTE = "named AS (\nselect id from base -- trailing comment\n)"
	want := map[string]struct {
		sql     string
		deps    []string
		secrets []SecretRef
	}{
		"seed.raw": {"", nil, nil},
		// A chain is inlined innermost first; dependencies skip to what the
		// ephemeral models read; their secrets come along.
		"model.plain":      {"WITH " + baseCTE + ",\n" + namedCTE + "\nselect * from named", []string{"seed.raw"}, []SecretRef{{Name: "S"}}},
		"model.withclause": {"-- lead\nWITH\n" + baseCTE + ",\nx AS (select 1) select * from BASE, x", []string{"seed.raw"}, []SecretRef{{Name: "S"}}},
		"model.recursive":  {"with recursive\n" + baseCTE + ",\nr(n) as (select 1) select * from r, \"base\"", []string{"seed.raw"}, []SecretRef{{Name: "S"}}},
		// dbt's compiled SQL carries its own CTE: nothing is added twice.
		"model.dbt": {"with __dbt__cte__base as (select 1)select * from __dbt__cte__base", []string{"seed.raw"}, nil},
		"test.t":    {"WITH " + baseCTE + ",\n" + namedCTE + "\nselect * from named where id is null", []string{"seed.raw"}, []SecretRef{{Name: "S"}}},
	}
	if len(got.Steps) != len(want) {
		t.Fatalf("%d steps, want %d (ephemeral models dropped)", len(got.Steps), len(want))
	}
	for _, s := range got.Steps {
		w, ok := want[s.ID]
		if !ok {
			t.Errorf("unexpected step %s", s.ID)
			continue
		}
		if s.SQL != w.sql {
			t.Errorf("%s SQL:\n%s\nwant:\n%s", s.ID, s.SQL, w.sql)
		}
		if !reflect.DeepEqual(s.DependsOn, w.deps) {
			t.Errorf("%s dependsOn %v, want %v", s.ID, s.DependsOn, w.deps)
		}
		if !reflect.DeepEqual(s.Secrets, w.secrets) {
			t.Errorf("%s secrets %v, want %v", s.ID, s.Secrets, w.secrets)
		}
	}
	if err := got.Validate(); err != nil {
		t.Errorf("inlined plan: %v", err)
	}
	if len(p.Steps) != len(steps) || p.Steps[3].SQL != "select * from named" {
		t.Error("InlineEphemeral changed its receiver")
	}
}

// FuzzInlineEphemeral: whatever SQL a reader and an ephemeral model hold,
// inlining never panics, keeps the reader's own text after the CTE (its
// leading comments and WITH keyword before it), carries the ephemeral's
// SQL, and leaves a valid plan without the ephemeral step.
func FuzzInlineEphemeral(f *testing.F) {
	f.Add("select * from eph", "select 1 as id;")
	f.Add("-- c\nWITH x AS (select 1) select * from x, eph", "select 2")
	f.Add("/* */ with recursive r(n) as (select 1) select * from r join \"EPH\" on true", "with a as (select 1) select * from a -- tail")
	f.Add("select eph_not_it from t", "select 3")
	f.Fuzz(func(t *testing.T, reader, eph string) {
		if strings.TrimSpace(reader) == "" || strings.TrimSpace(eph) == "" {
			return
		}
		p := &Plan{PlanID: "p", PlanVersion: "1", Steps: []Step{
			{ID: "model.eph", Kind: KindModel, Materialized: MaterializedEphemeral, SQL: eph},
			{ID: "model.r", Kind: KindModel, SQL: reader, DependsOn: []string{"model.eph"}},
		}}
		if p.Validate() != nil {
			return
		}
		out := p.InlineEphemeral()
		if len(out.Steps) != 1 || out.Steps[0].ID != "model.r" || len(out.Steps[0].DependsOn) != 0 {
			t.Fatalf("steps %+v", out.Steps)
		}
		got := out.Steps[0].SQL
		if !namesRelation([]string{reader}, "eph") {
			if got != reader {
				t.Fatalf("a reader that does not name eph changed:\n%q\n%q", reader, got)
			}
			return
		}
		if !strings.Contains(got, "eph AS (\n"+trimStatement(eph)+"\n)") {
			t.Fatalf("no CTE for eph in %q", got)
		}
		at, words := leadingKeywords(reader, 2)
		rest := reader[at:]
		if len(words) > 0 && words[0].word == "WITH" {
			cut := words[0].end
			if len(words) > 1 && words[1].word == "RECURSIVE" {
				cut = words[1].end
			}
			rest = strings.TrimLeft(reader[cut:], " \t\r\n")
		}
		if !strings.HasPrefix(got, reader[:at]) || !strings.HasSuffix(got, rest) {
			t.Fatalf("the reader's text was not kept:\n%q\n%q", reader, got)
		}
		if err := out.Validate(); err != nil {
			t.Fatal(err)
		}
	})
}
