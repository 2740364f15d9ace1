package runner_test

import (
	"context"
	"errors"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// TestResumeRendersRecordedContext: the runner renders each step with the
// vars and data interval RunQueued recorded; a step interrupted by a crash
// runs again after the resume with the same SQL, and ref names the
// relation of the step it reads.
func TestResumeRendersRecordedContext(t *testing.T) {
	h := newHarness(t)
	p, err := plan.Parse([]byte(`
planId: ctx
planVersion: "1"
steps:
  - {id: model.a, kind: model, materialized: table, sql: "select {{ var('region') }} as region"}
  - {id: model.b, kind: model, materialized: table, sql: "select * from {{ ref('a') }} where day = {{ logical_date }} and n > {{ var('min', 3) }}"}
`), "plan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	iv := &engine.DataInterval{Start: "2026-11-24T23:00:00Z", End: "2026-11-25T23:00:00Z", Timezone: "Europe/Paris"}
	runID, err := h.eng.StartRun(h.ctx, engine.StartRequest{Plan: p, Vars: map[string]any{"region": "eu"}, DataInterval: iv})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan string, 1)
	h.wh.set("model.b", func(ctx context.Context, req engine.StepRequest, call int) (engine.StepResult, error) {
		if call == 1 {
			return blockUntilDone(started)(ctx, req, call)
		}
		return engine.StepResult{}, nil
	})
	ctx, crash := context.WithCancel(h.ctx)
	done := h.execAsync(ctx, runID, p)
	recv(t, started)
	crash()
	if res := h.wait(done); !errors.Is(res.err, context.Canceled) {
		t.Fatalf("interrupted Execute returned %v", res.err)
	}
	if snap, _ := h.finish(runID, p, h.rn.Resume); snap.Status != engine.StatusCompleted {
		t.Fatalf("run %s", snap.Status)
	}
	if a := h.wh.requests("model.a"); len(a) != 1 || a[0].SQL != "select 'eu' as region" {
		t.Errorf("model.a ran %+v", a)
	}
	const want = "select * from a where day = '2026-11-25T00:00:00+01:00' and n > 3"
	b := h.wh.requests("model.b")
	if len(b) != 2 {
		t.Fatalf("model.b ran %d times, want 2 (before and after the crash)", len(b))
	}
	for i, req := range b {
		if req.SQL != want {
			t.Errorf("model.b attempt %d ran %q, want %q", i+1, req.SQL, want)
		}
	}
}

// TestRunWithoutItsVarIsRefused: a run whose RunQueued lacks a var the
// plan needs (without default) is refused before RunStarted, naming the
// step and the var, and nothing runs.
func TestRunWithoutItsVarIsRefused(t *testing.T) {
	h := newHarness(t)
	p := &plan.Plan{PlanID: "p", PlanVersion: "1", Steps: []plan.Step{
		{ID: "model.a", Kind: plan.KindModel, SQL: "select {{ var('region') }} as region"},
	}}
	runID := h.start(p)
	_, err := h.rn.Execute(h.ctx, runID, p, h.wh)
	if !errors.Is(err, engine.ErrPlanInvalid) || err.Error() != `PLAN_INVALID: plan "p": step model.a: {{ var('region') }}: var "region" is not set (pass it with --vars) and has no default` {
		t.Fatalf("got %v", err)
	}
	if evs := h.events(runID); len(evs) != 1 || evs[0].EventType != engine.RunQueued {
		t.Errorf("the refused run has %d events, want RunQueued alone", len(evs))
	}
	if n := len(h.wh.requests("model.a")); n != 0 {
		t.Errorf("model.a ran %d times", n)
	}
}
