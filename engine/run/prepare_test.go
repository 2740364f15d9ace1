package run

import (
	"slices"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// hostile is a secret value no output may show.
const hostile = "Pa'ss\"w\\ord\nX<&>y"

// testPlan has an ephemeral model (not a step of any run: inlined into its
// readers, its secret with it), a model that renders a var and the data
// interval, and a step with a secret of its own.
func testPlan(t *testing.T) *plan.Plan {
	t.Helper()
	p := &plan.Plan{PlanID: "p", PlanVersion: "1", Steps: []plan.Step{
		{ID: "seed.raw", Kind: plan.KindSeed, Path: "raw.csv"},
		{ID: "model.base", Kind: plan.KindModel, Materialized: plan.MaterializedEphemeral, SQL: "select * from raw where k = {{ secret('BASE_KEY') }}", DependsOn: []string{"seed.raw"}, Secrets: []plan.SecretRef{{Name: "BASE_KEY"}}},
		{ID: "model.orders", Kind: plan.KindModel, SQL: "select * from {{ ref('base') }} where region = {{ var('region') }} and at >= {{ data_interval_start }}", DependsOn: []string{"model.base"}},
		{ID: "sql.audit", Kind: plan.KindSQL, SQL: "select {{ secret('TOKEN') }}", Secrets: []plan.SecretRef{{Name: "TOKEN"}}},
	}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

func secrets(names ...string) plan.SecretLookup {
	return func(n string) (string, bool) {
		return hostile + n, slices.Contains(names, n)
	}
}

func ids(p *plan.Plan) []string {
	var out []string
	for _, s := range p.Steps {
		out = append(out, s.ID)
	}
	return out
}

func TestPrepare(t *testing.T) {
	interval := &engine.DataInterval{Start: "2026-01-01T00:00:00Z", End: "2026-01-02T00:00:00Z", Timezone: "UTC"}
	vars := map[string]any{"region": "eu"}
	onlyOrders := &engine.Selection{Steps: []string{"seed.raw", "model.orders"}}
	tests := []struct {
		name        string
		in          Input
		wantErr     bool        // Prepare refuses
		steps       []string    // the run's steps
		secretsErr  engine.Code // CheckSecrets'
		contextErr  engine.Code // CheckContext'
		contextSays string      // in CheckContext's error
	}{
		{name: "whole plan, everything set",
			in:    Input{Shape: engine.RunQueuedRequest{Vars: vars, DataInterval: interval}, Secrets: secrets("BASE_KEY", "TOKEN")},
			steps: []string{"seed.raw", "model.orders", "sql.audit"}},
		{name: "a missing secret is refused before the run",
			in:    Input{Shape: engine.RunQueuedRequest{Vars: vars, DataInterval: interval}, Secrets: secrets("TOKEN")},
			steps: []string{"seed.raw", "model.orders", "sql.audit"}, secretsErr: engine.CodeSecretNotFound},
		{name: "no lookup at all: every declared secret is missing",
			in:    Input{Shape: engine.RunQueuedRequest{Vars: vars, DataInterval: interval}},
			steps: []string{"seed.raw", "model.orders", "sql.audit"}, secretsErr: engine.CodeSecretNotFound},
		{name: "the selection decides which secrets are needed",
			in:    Input{Shape: engine.RunQueuedRequest{Selection: onlyOrders, Vars: vars, DataInterval: interval}, Secrets: secrets("BASE_KEY")},
			steps: []string{"seed.raw", "model.orders"}},
		{name: "an ephemeral model's secret comes with its reader",
			in:    Input{Shape: engine.RunQueuedRequest{Selection: onlyOrders, Vars: vars, DataInterval: interval}, Secrets: secrets("TOKEN")},
			steps: []string{"seed.raw", "model.orders"}, secretsErr: engine.CodeSecretNotFound},
		{name: "a var without value is refused",
			in:    Input{Shape: engine.RunQueuedRequest{DataInterval: interval}, Secrets: secrets("BASE_KEY", "TOKEN")},
			steps: []string{"seed.raw", "model.orders", "sql.audit"}, contextErr: engine.CodePlanInvalid, contextSays: "region"},
		{name: "an interval name in a run without one is refused",
			in:    Input{Shape: engine.RunQueuedRequest{Vars: vars}, Secrets: secrets("BASE_KEY", "TOKEN")},
			steps: []string{"seed.raw", "model.orders", "sql.audit"}, contextErr: engine.CodePlanInvalid, contextSays: "no data interval"},
		{name: "plan validate: any interval",
			in:    Input{Shape: engine.RunQueuedRequest{Vars: vars}, AnyInterval: true},
			steps: []string{"seed.raw", "model.orders", "sql.audit"}, secretsErr: engine.CodeSecretNotFound},
		{name: "a recorded selection that does not fit the plan",
			in:      Input{Shape: engine.RunQueuedRequest{Selection: &engine.Selection{Steps: []string{"model.gone"}}}},
			wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Plan = testPlan(t)
			prep, err := Prepare(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Prepare: no error, want one")
				}
				if !strings.Contains(err.Error(), "does not fit the plan") {
					t.Errorf("Prepare: %v, want the selection named as not fitting", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			if got := ids(prep.Plan); !slices.Equal(got, tt.steps) {
				t.Errorf("steps %v, want %v", got, tt.steps)
			}
			if got := ids(prep.Full); !slices.Equal(got, []string{"seed.raw", "model.orders", "sql.audit"}) {
				t.Errorf("full plan %v: want the ephemeral model inlined, nothing selected", got)
			}
			if prep.Written != tt.in.Plan {
				t.Errorf("Written is not the plan as given")
			}
			checkCode(t, "CheckSecrets", prep.CheckSecrets(), tt.secretsErr, "")
			checkCode(t, "CheckContext", prep.CheckContext(), tt.contextErr, tt.contextSays)
		})
	}
}

func checkCode(t *testing.T, what string, err error, want engine.Code, says string) {
	t.Helper()
	if got := engine.CodeOf(err); err != nil && got != want || err == nil && want != "" {
		t.Fatalf("%s: %v (code %q), want code %q", what, err, got, want)
	}
	if err != nil {
		if strings.Contains(err.Error(), hostile) {
			t.Errorf("%s shows a secret value: %v", what, err)
		}
		if !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v, want it to say %q", what, err, says)
		}
	}
}

// The renderer renders the run's steps with the recorded context: the var
// and the interval as literals, a ref to an ephemeral model as its CTE, a
// secret as a bound placeholder; the redactor knows every secret the plan
// resolves, the unselected steps' too (a step may read back what another
// stored).
func TestPrepareRendersAndRedacts(t *testing.T) {
	prep, err := Prepare(Input{Plan: testPlan(t), Secrets: secrets("BASE_KEY", "TOKEN"),
		Shape: engine.RunQueuedRequest{Selection: &engine.Selection{Steps: []string{"seed.raw", "model.orders"}},
			Vars: map[string]any{"region": "eu"}, DataInterval: &engine.DataInterval{Start: "2026-01-01T00:00:00Z", End: "2026-01-02T00:00:00Z"}}})
	if err != nil {
		t.Fatal(err)
	}
	orders := prep.Plan.Steps[1]
	sql, params, err := prep.Render.SQL(orders)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"base AS (", "region = 'eu'", "at >= '2026-01-01T00:00:00Z'", "k = ?"} {
		if !strings.Contains(sql, want) {
			t.Errorf("rendered SQL %q lacks %q", sql, want)
		}
	}
	if !slices.Equal(params, []any{hostile + "BASE_KEY"}) {
		t.Errorf("bound %q, want the ephemeral model's secret", params)
	}
	for _, name := range []string{"BASE_KEY", "TOKEN"} {
		if got := prep.Redact.Redact("out: " + hostile + name); strings.Contains(got, hostile) {
			t.Errorf("secret %s not redacted: %q", name, got)
		}
	}
	none, err := Prepare(Input{Plan: testPlan(t)})
	if err != nil {
		t.Fatal(err)
	}
	if !none.Redact.Empty() {
		t.Errorf("a run without secrets has a redactor that redacts something")
	}
}

func TestMatchesRun(t *testing.T) {
	p := &plan.Plan{PlanID: "p", PlanVersion: "1"}
	tests := []struct {
		name string
		meta engine.RunMetadata
		want engine.Code
	}{
		{"same plan", engine.RunMetadata{RunID: "r", PlanID: "p", PlanVersion: "1"}, ""},
		{"other version", engine.RunMetadata{RunID: "r", PlanID: "p", PlanVersion: "2"}, engine.CodePlanHashMismatch},
		{"other plan", engine.RunMetadata{RunID: "r", PlanID: "q", PlanVersion: "1"}, engine.CodePlanHashMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkCode(t, "MatchesRun", MatchesRun(tt.meta, p), tt.want, "")
		})
	}
}
