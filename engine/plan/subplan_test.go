package plan

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
)

func TestPlanSubset(t *testing.T) {
	p, err := Parse([]byte(basePlan), "p.yaml")
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
	if _, err := p.Subset([]string{"model.nope"}); !errors.Is(err, engine.ErrPlanInvalid) {
		t.Fatalf("unknown step: %v", err)
	}
}

func TestQueuedRequest(t *testing.T) {
	rec := func(payload string) []engine.RunEventRecord {
		return []engine.RunEventRecord{{RunEventWrite: engine.RunEventWrite{EventType: engine.RunQueued, RunID: "r", Payload: json.RawMessage(payload)}}}
	}
	q, err := engine.QueuedRequest(rec(`{"planRef":{},"selection":{"select":["+final"],"steps":["model.stg","model.final"]},"parentRunId":"p1"}`))
	if err != nil {
		t.Fatal(err)
	}
	if q.ParentRunID != "p1" || q.Selection == nil || !slices.Equal(q.Selection.Steps, []string{"model.stg", "model.final"}) || !slices.Equal(q.Selection.Select, []string{"+final"}) {
		t.Fatalf("got %+v", q)
	}
	p, _ := Parse([]byte(basePlan), "p.yaml")
	sub, err := Selected(p, q)
	if err != nil || len(sub.Steps) != 2 {
		t.Fatalf("Selected: %v %v", sub, err)
	}
	if q, err := engine.QueuedRequest(rec(`{"planRef":{}}`)); err != nil || q.Selection != nil {
		t.Fatalf("no selection: %+v %v", q, err)
	}
	if full, _ := Selected(p, engine.RunQueuedRequest{}); full != p {
		t.Fatal("no selection must run the whole plan")
	}
	for _, bad := range []string{`{"selection":{"steps":[]}}`, `{"selection":"all"}`} {
		if _, err := engine.QueuedRequest(rec(bad)); !errors.Is(err, engine.ErrStoreCorrupt) {
			t.Fatalf("%s: %v", bad, err)
		}
	}
	if _, err := Selected(p, engine.RunQueuedRequest{Selection: &engine.Selection{Steps: []string{"model.gone"}}}); !errors.Is(err, engine.ErrPlanInvalid) {
		t.Fatalf("a recorded step missing from the plan: %v", err)
	}
}
