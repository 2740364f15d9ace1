package engine

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestPlanSubset(t *testing.T) {
	p, err := ParsePlan([]byte(basePlan), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		ids  []string
		want map[string][]string // step → dependsOn in the sub-plan
	}{
		{"direct edges kept", []string{"model.stg", "model.final"}, map[string][]string{"model.stg": nil, "model.final": {"model.stg"}}},
		// final needs stg needs raw: with stg left out, final waits for raw.
		{"edge through an unselected step", []string{"seed.raw", "model.final", "test.not_null_final_id"},
			map[string][]string{"seed.raw": nil, "model.final": {"seed.raw"}, "test.not_null_final_id": {"model.final"}}},
		{"dependencies outside the selection dropped", []string{"test.not_null_final_id", "sql.grant"},
			map[string][]string{"test.not_null_final_id": nil, "sql.grant": nil}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sub, err := p.Subset(tc.ids)
			if err != nil {
				t.Fatal(err)
			}
			if len(sub.Steps) != len(tc.want) {
				t.Fatalf("%d steps, want %d", len(sub.Steps), len(tc.want))
			}
			for _, s := range sub.Steps {
				if !slices.Equal(s.DependsOn, tc.want[s.ID]) {
					t.Errorf("%s depends on %v, want %v", s.ID, s.DependsOn, tc.want[s.ID])
				}
			}
			if err := sub.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
	if len(p.Steps[2].DependsOn) != 1 || p.Steps[2].DependsOn[0] != "model.stg" {
		t.Fatalf("Subset changed the original plan: %v", p.Steps[2].DependsOn)
	}
	if _, err := p.Subset([]string{"model.nope"}); !errors.Is(err, ErrPlanInvalid) {
		t.Fatalf("unknown step: %v", err)
	}
}

func TestQueuedRequest(t *testing.T) {
	rec := func(payload string) []RunEventRecord {
		return []RunEventRecord{{RunEventWrite: RunEventWrite{EventType: RunQueued, RunID: "r", Payload: json.RawMessage(payload)}}}
	}
	q, err := QueuedRequest(rec(`{"planRef":{},"selection":{"select":["+final"],"steps":["model.stg","model.final"]},"parentRunId":"p1"}`))
	if err != nil {
		t.Fatal(err)
	}
	if q.ParentRunID != "p1" || q.Selection == nil || !slices.Equal(q.Selection.Steps, []string{"model.stg", "model.final"}) || !slices.Equal(q.Selection.Select, []string{"+final"}) {
		t.Fatalf("got %+v", q)
	}
	p, _ := ParsePlan([]byte(basePlan), "p.yaml")
	sub, err := q.Selected(p)
	if err != nil || len(sub.Steps) != 2 {
		t.Fatalf("Selected: %v %v", sub, err)
	}
	if q, err := QueuedRequest(rec(`{"planRef":{}}`)); err != nil || q.Selection != nil {
		t.Fatalf("no selection: %+v %v", q, err)
	}
	if full, _ := (RunQueuedRequest{}).Selected(p); full != p {
		t.Fatal("no selection must run the whole plan")
	}
	for _, bad := range []string{`{"selection":{"steps":[]}}`, `{"selection":"all"}`} {
		if _, err := QueuedRequest(rec(bad)); !errors.Is(err, ErrStoreCorrupt) {
			t.Fatalf("%s: %v", bad, err)
		}
	}
	if _, err := (RunQueuedRequest{Selection: &Selection{Steps: []string{"model.gone"}}}).Selected(p); !errors.Is(err, ErrPlanInvalid) {
		t.Fatalf("a recorded step missing from the plan: %v", err)
	}
}

// TestValidateRunQueuedSelection: RunQueued's selection and parentRunId
// are checked against the schema on append.
func TestValidateRunQueuedSelection(t *testing.T) {
	cases := []struct {
		payload string
		ok      bool
	}{
		{`{"planRef": {}}`, true},
		{`{"selection": {"select": ["+a"], "exclude": [], "indirectSelection": "cautious", "steps": ["model.a"]}, "parentRunId": "r0"}`, true},
		{`{"selection": {"steps": []}}`, false},
		{`{"selection": {"select": ["+a"]}}`, false},
		{`{"selection": {"steps": ["model.a|b"]}}`, false},
		{`{"selection": {"steps": ["model.a"], "indirectSelection": "lazy"}}`, false},
		{`{"selection": "all"}`, false},
		{`{"parentRunId": ""}`, false},
		{`{"parentRunId": 7}`, false},
	}
	for _, tc := range cases {
		e := RunEventWrite{EventID: "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b", EventType: RunQueued, EmittedAt: time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC),
			RunID: "run-1", TenantID: "acme", ProjectID: "shop", EnvironmentID: "dev", PlanID: "shop", PlanVersion: "3",
			EngineAttemptID: 1, LogicalAttemptID: 1, Payload: json.RawMessage(tc.payload)}
		k, err := KeyOf(e).IdempotencyKey()
		if err != nil {
			t.Fatal(err)
		}
		e.IdempotencyKey = k
		err = Validate(e)
		if tc.ok != (err == nil) {
			t.Errorf("%s: %v", tc.payload, err)
		}
		if err != nil && !errors.Is(err, ErrSchemaValidationFailed) {
			t.Errorf("%s: %v is not SCHEMA_VALIDATION_FAILED", tc.payload, err)
		}
	}
}
