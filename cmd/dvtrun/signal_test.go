package main

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

// queueRun records a QUEUED run of the ok plan, as `run` does before its
// runner starts, and returns its id.
func queueRun(t *testing.T, h *harness) string {
	t.Helper()
	return queueRunOf(t, h, fixture("ok", "plan.yaml"))
}

// queueRunOf records a QUEUED run of plan.
func queueRunOf(t *testing.T, h *harness, plan string) string {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, h.statePath(), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := loadPlan(plan, "")
	if err != nil {
		t.Fatal(err)
	}
	eng := &engine.Engine{Log: st, Clock: engine.ClockFunc(time.Now), IDs: engine.IDFunc(uuid.NewString),
		Config: engine.Config{TenantID: "default", ProjectID: "default", EnvironmentID: "dev"}}
	id, err := eng.StartRun(ctx, engine.StartRequest{Plan: b.Plan, Ref: b.Ref})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestSignals(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	runID := queueRun(t, h)
	cases := []struct {
		args []string
		want engine.SignalType
	}{
		{[]string{"signal", runID, "pause"}, engine.SignalPause},
		{[]string{"signal", runID, "resume", "--reason", "back"}, engine.SignalResume},
		{[]string{"cancel", runID}, engine.SignalCancel},
	}
	for _, c := range cases {
		r := h.run(c.args...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, r.code, r.stderr)
		}
	}
	st, err := sqlite.Open(context.Background(), h.statePath(), sqlite.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sigs, err := st.ListSignals(context.Background(), runID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(sigs) != len(cases) {
		t.Fatalf("%d signals stored, want %d", len(sigs), len(cases))
	}
	for i, c := range cases {
		if sigs[i].Type != c.want || sigs[i].RunID != runID {
			t.Errorf("signal %d: %+v, want %s", i, sigs[i], c.want)
		}
	}
	if sigs[1].Reason != "back" {
		t.Errorf("reason %q not stored", sigs[1].Reason)
	}
	// A step the run has never mentioned cannot be retried.
	wantError(t, h.run("signal", runID, "retry-step", "--step", "model.nope"), exitUsage, "INVALID_ARGUMENT", "model.nope")
	wantError(t, h.run("signal", runID, "pause", "--step", "model.a"), exitUsage, "INVALID_ARGUMENT", "--step")
}
