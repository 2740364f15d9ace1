package selection_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/selection"
)

func loadDAG(t *testing.T) *plan.Plan {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "dag.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Parse(data, "dag.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

// names maps step ids to their short names (model.mart → mart), sorted.
func names(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		_, out[i], _ = strings.Cut(id, ".")
	}
	slices.Sort(out)
	return out
}

func set(s string) []string {
	out := strings.Fields(s)
	slices.Sort(out)
	if out == nil {
		out = []string{}
	}
	return out
}

// TestSelectDAG checks each operator against the set dbt's documentation
// says it selects (docs.getdbt.com/reference/node-selection: graph
// operators, set operators, methods, test selection examples and
// indirect selection), on testdata/dag.yaml:
//
//	raw_a -> stg_a -> mart -> report -> export;  raw_b -> stg_b -> mart;  raw_c -> stg_c
//	tests: unique_stg_a(stg_a) rel_a_b(stg_a,stg_b) rel_mart_stg_b(mart,stg_b)
//	       not_null_report(report) not_null_stg_c(stg_c)
func TestSelectDAG(t *testing.T) {
	p := loadDAG(t)
	everything := "raw_a raw_b raw_c stg_a stg_b stg_c mart report export unique_stg_a rel_a_b rel_mart_stg_b not_null_report not_null_stg_c"
	cases := []struct {
		name      string
		sel, exc  []string
		mode      selection.Mode
		want      string
		unmatched []string
	}{
		// A bare name is the node; eager adds every test with a selected parent.
		{name: "name", sel: []string{"stg_a"}, want: "stg_a unique_stg_a rel_a_b"},
		{name: "step id", sel: []string{"model.mart"}, want: "mart rel_mart_stg_b"},
		{name: "step id wildcard", sel: []string{"model.stg_*"}, want: "stg_a stg_b stg_c unique_stg_a rel_a_b rel_mart_stg_b not_null_stg_c"},
		{name: "no selection is everything", want: everything},
		// +: ancestors before, descendants after, N limits the edges walked.
		{name: "+ancestors", sel: []string{"+mart"}, want: "raw_a raw_b stg_a stg_b mart unique_stg_a rel_a_b rel_mart_stg_b"},
		{name: "descendants+", sel: []string{"mart+"}, want: "mart report export rel_mart_stg_b not_null_report"},
		{name: "descendants+1", sel: []string{"mart+1"}, want: "mart report rel_mart_stg_b not_null_report"},
		{name: "1+parents", sel: []string{"1+mart"}, want: "stg_a stg_b mart unique_stg_a rel_a_b rel_mart_stg_b"},
		{name: "2+grandparents", sel: []string{"2+report"}, want: "stg_a stg_b mart report unique_stg_a rel_a_b rel_mart_stg_b not_null_report"},
		{name: "+both+1", sel: []string{"+stg_a+1"}, want: "raw_a stg_a mart unique_stg_a rel_a_b rel_mart_stg_b"},
		{name: "+both+", sel: []string{"+stg_a+"}, want: "raw_a stg_a mart report export unique_stg_a rel_a_b rel_mart_stg_b not_null_report"},
		// @: descendants and all their ancestors (stg_b, raw_b come in
		// through mart and rel_a_b), not the unrelated raw_c branch.
		{name: "@", sel: []string{"@stg_a"}, want: "raw_a raw_b stg_a stg_b mart report export unique_stg_a rel_a_b rel_mart_stg_b not_null_report"},
		{name: "@ leaf", sel: []string{"@stg_c"}, want: "raw_c stg_c not_null_stg_c"},
		// Methods.
		{name: "tag", sel: []string{"tag:nightly"}, want: "stg_a mart unique_stg_a rel_a_b rel_mart_stg_b"},
		{name: "tag wildcard", sel: []string{"tag:oth*"}, want: "stg_c not_null_stg_c"},
		{name: "config.tags", sel: []string{"config.tags:raw"}, want: "raw_a"},
		{name: "path directory", sel: []string{"path:models/staging"}, want: "stg_a stg_b unique_stg_a rel_a_b rel_mart_stg_b"},
		{name: "path directory trailing slash", sel: []string{"path:models/staging/"}, want: "stg_a stg_b unique_stg_a rel_a_b rel_mart_stg_b"},
		{name: "path parent directory", sel: []string{"path:models"}, want: "stg_a stg_b stg_c mart unique_stg_a rel_a_b rel_mart_stg_b not_null_stg_c"},
		{name: "path file", sel: []string{"path:models/staging/stg_a.sql"}, want: "stg_a unique_stg_a rel_a_b"},
		{name: "path wildcard", sel: []string{"path:models/*/stg_*.sql"}, want: "stg_a stg_b stg_c unique_stg_a rel_a_b rel_mart_stg_b not_null_stg_c"},
		{name: "a slash means path", sel: []string{"models/marts"}, want: "mart rel_mart_stg_b"},
		{name: "path seeds", sel: []string{"path:seeds"}, want: "raw_a raw_b raw_c"},
		{name: "a .sql suffix means file", sel: []string{"stg_a.sql"}, want: "stg_a unique_stg_a rel_a_b"},
		{name: "file stem", sel: []string{"file:raw_b"}, want: "raw_b"},
		{name: "resource_type seed", sel: []string{"resource_type:seed"}, want: "raw_a raw_b raw_c"},
		{name: "resource_type test", sel: []string{"resource_type:test"}, want: "unique_stg_a rel_a_b rel_mart_stg_b not_null_report not_null_stg_c"},
		{name: "resource_type sql", sel: []string{"resource_type:sql"}, want: "export"},
		{name: "config.materialized table", sel: []string{"config.materialized:table"}, want: "mart report rel_mart_stg_b not_null_report"},
		// A model without materialized is a view, dbt's default.
		{name: "config.materialized view", sel: []string{"config.materialized:view"}, want: "stg_a stg_b stg_c unique_stg_a rel_a_b rel_mart_stg_b not_null_stg_c"},
		{name: "config.materialized seed", sel: []string{"config.materialized:seed"}, want: "raw_a raw_b raw_c"},
		{name: "config.severity", sel: []string{"config.severity:warn"}, want: "not_null_report"},
		{name: "package", sel: []string{"package:dag"}, want: everything},
		// fqn: [planId, name]; a prefix selects everything under it and a
		// lone * the rest; a wildcard name alone matches no fqn (as in dbt).
		{name: "fqn prefix", sel: []string{"dag"}, want: everything},
		{name: "fqn wildcard part", sel: []string{"dag.stg_*"}, want: "stg_a stg_b stg_c unique_stg_a rel_a_b rel_mart_stg_b not_null_stg_c"},
		{name: "star", sel: []string{"*"}, want: everything},
		{name: "bare wildcard matches no fqn", sel: []string{"stg_*"}, want: "", unmatched: []string{"stg_*"}},
		// Set operators: spaces union, commas intersect (after each side's
		// own indirect selection, so shared tests stay).
		{name: "union", sel: []string{"stg_a stg_c"}, want: "stg_a stg_c unique_stg_a rel_a_b not_null_stg_c"},
		{name: "union of flags", sel: []string{"stg_a", "stg_c"}, want: "stg_a stg_c unique_stg_a rel_a_b not_null_stg_c"},
		{name: "intersection", sel: []string{"tag:staging,tag:nightly"}, want: "stg_a unique_stg_a rel_a_b rel_mart_stg_b"},
		{name: "intersection with type", sel: []string{"tag:nightly,resource_type:model"}, want: "stg_a mart unique_stg_a rel_a_b rel_mart_stg_b"},
		{name: "intersection and graph", sel: []string{"+mart,resource_type:seed"}, want: "raw_a raw_b"},
		// Exclusion removes the excluded steps and their tests.
		{name: "exclude model drops its tests", sel: []string{"+mart"}, exc: []string{"stg_b"}, want: "raw_a raw_b stg_a mart unique_stg_a"},
		{name: "exclude a test", sel: []string{"stg_a"}, exc: []string{"unique_stg_a"}, want: "stg_a rel_a_b"},
		{name: "exclude only", exc: []string{"tag:raw"}, want: "raw_b raw_c stg_a stg_b stg_c mart report export unique_stg_a rel_a_b rel_mart_stg_b not_null_report not_null_stg_c"},
		{name: "exclude descendants", exc: []string{"mart+"}, want: "raw_a raw_b raw_c stg_a stg_b stg_c unique_stg_a rel_a_b not_null_stg_c"},
		{name: "exclude everything", sel: []string{"stg_c"}, exc: []string{"stg_c"}, want: ""},
		// Indirect selection modes.
		{name: "cautious needs every parent", sel: []string{"stg_a"}, mode: selection.Cautious, want: "stg_a unique_stg_a"},
		{name: "cautious across a union", sel: []string{"stg_a stg_b"}, mode: selection.Cautious, want: "stg_a stg_b unique_stg_a rel_a_b"},
		{name: "cautious drops a test with an unselected parent", sel: []string{"mart"}, mode: selection.Cautious, want: "mart"},
		{name: "buildable takes parents that are ancestors", sel: []string{"mart"}, mode: selection.Buildable, want: "mart rel_mart_stg_b"},
		{name: "buildable not other branches", sel: []string{"stg_a"}, mode: selection.Buildable, want: "stg_a unique_stg_a"},
		{name: "eager takes any parent", sel: []string{"mart"}, mode: selection.Eager, want: "mart rel_mart_stg_b"},
		{name: "empty takes none", sel: []string{"stg_a"}, mode: selection.Empty, want: "stg_a"},
		{name: "empty keeps graph operators", sel: []string{"mart+"}, mode: selection.Empty, want: "mart report export rel_mart_stg_b not_null_report"},
		// A selector matching nothing is reported, like dbt's warning.
		{name: "unmatched", sel: []string{"stg_a nope tag:none"}, want: "stg_a unique_stg_a rel_a_b", unmatched: []string{"nope", "tag:none"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := selection.Select(p, selection.Spec{Select: tc.sel, Exclude: tc.exc, Indirect: tc.mode})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := names(res.Steps), set(tc.want); !slices.Equal(got, want) {
				t.Errorf("select %q exclude %q (%s):\n got %v\nwant %v", tc.sel, tc.exc, tc.mode, got, want)
			}
			if !slices.Equal(res.Unmatched, tc.unmatched) {
				t.Errorf("unmatched %q, want %q", res.Unmatched, tc.unmatched)
			}
		})
	}
}

// TestSelectOrder: the selected ids come in execution order — every step
// after the selected steps it needs — with plan order between equals.
func TestSelectOrder(t *testing.T) {
	p := loadDAG(t)
	res, err := selection.Select(p, selection.Spec{Select: []string{"+mart+1"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"seed.raw_a", "seed.raw_b", "model.stg_a", "model.stg_b", "model.mart", "model.report",
		"test.unique_stg_a", "test.rel_a_b", "test.rel_mart_stg_b", "test.not_null_report"}
	if !slices.Equal(res.Steps, want) {
		t.Fatalf("order\n got %v\nwant %v", res.Steps, want)
	}
}

func TestParseErrors(t *testing.T) {
	for _, expr := range []string{
		"tag:",                   // no value
		"colour:red",             // unknown method
		"@stg_a+",                // @ and + suffix
		"config.colour:red",      // unknown config key
		"config:table",           // config needs its key
		"tag.x:nightly",          // tag takes no argument
		"resource_type:snapshot", // not a step kind
		"stg_a,,mart",            // empty intersection part
		",stg_a",
		"+",
		"99999999999999999999+mart",
		"path:models/[",
	} {
		t.Run(expr, func(t *testing.T) {
			_, err := selection.Parse(expr)
			if !errors.Is(err, engine.ErrInvalidArgument) {
				t.Fatalf("Parse(%q) = %v, want INVALID_ARGUMENT", expr, err)
			}
		})
	}
	if _, err := selection.ParseMode("lazy"); !errors.Is(err, engine.ErrInvalidArgument) {
		t.Fatalf("ParseMode(lazy) = %v", err)
	}
}

func TestParseSelector(t *testing.T) {
	cases := []struct {
		raw  string
		want selection.Selector
	}{
		{"orders", selection.Selector{Method: "fqn", Value: "orders", ParentsDepth: -1, ChildrenDepth: -1}},
		{"+orders", selection.Selector{Method: "fqn", Value: "orders", Parents: true, ParentsDepth: -1, ChildrenDepth: -1}},
		{"2+orders+3", selection.Selector{Method: "fqn", Value: "orders", Parents: true, ParentsDepth: 2, Children: true, ChildrenDepth: 3}},
		{"@tag:x", selection.Selector{Method: "tag", Value: "x", ChildrensParents: true, ParentsDepth: -1, ChildrenDepth: -1}},
		{"config.materialized:table+", selection.Selector{Method: "config", Args: []string{"materialized"}, Value: "table", Children: true, ParentsDepth: -1, ChildrenDepth: -1}},
		{"models/a.sql", selection.Selector{Method: "path", Value: "models/a.sql", ParentsDepth: -1, ChildrenDepth: -1}},
		{"a.csv", selection.Selector{Method: "file", Value: "a.csv", ParentsDepth: -1, ChildrenDepth: -1}},
		{"0+a", selection.Selector{Method: "fqn", Value: "a", Parents: true, ParentsDepth: 0, ChildrenDepth: -1}},
	}
	for _, tc := range cases {
		got, err := selection.ParseSelector(tc.raw)
		if err != nil {
			t.Fatalf("%s: %v", tc.raw, err)
		}
		tc.want.Raw = tc.raw
		if got.Method != tc.want.Method || got.Value != tc.want.Value || !slices.Equal(got.Args, tc.want.Args) ||
			got.Parents != tc.want.Parents || got.ParentsDepth != tc.want.ParentsDepth ||
			got.Children != tc.want.Children || got.ChildrenDepth != tc.want.ChildrenDepth || got.ChildrensParents != tc.want.ChildrensParents {
			t.Errorf("%s: got %+v want %+v", tc.raw, got, tc.want)
		}
	}
}

// TestSelectLeavesOutEphemeral: an ephemeral model runs inside the steps
// that read it, never as a step: selecting through it keeps its relatives
// and drops it, as dbt never runs an ephemeral node.
func TestSelectLeavesOutEphemeral(t *testing.T) {
	p := &plan.Plan{PlanID: "e", PlanVersion: "1", Steps: []plan.Step{
		{ID: "seed.raw", Kind: plan.KindSeed, Path: "raw.csv"},
		{ID: "model.eph", Kind: plan.KindModel, Materialized: "ephemeral", SQL: "select * from raw", DependsOn: []string{"seed.raw"}},
		{ID: "model.final", Kind: plan.KindModel, Materialized: "table", SQL: "select * from eph", DependsOn: []string{"model.eph"}},
	}}
	for sel, want := range map[string][]string{
		"+final":                         {"seed.raw", "model.final"},
		"eph":                            nil,
		"eph+":                           {"model.final"},
		"config.materialized:ephemeral+": {"model.final"},
	} {
		res, err := selection.Select(p, selection.Spec{Select: []string{sel}})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Steps, want) {
			t.Errorf("%s selects %v, want %v", sel, res.Steps, want)
		}
	}
	// model.final still waits for seed.raw through the ephemeral model.
	sub, err := p.Subset([]string{"seed.raw", "model.final"})
	if err != nil || !slices.Equal(sub.Steps[1].DependsOn, []string{"seed.raw"}) {
		t.Fatalf("subset %v %v", sub, err)
	}
}
