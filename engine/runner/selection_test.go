package runner_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
)

// TestSelectedRun: a run started with a selection executes only its
// steps, given the whole plan — on the first Execute and on a Resume —
// and an edge through an unselected step still orders and skips.
func TestSelectedRun(t *testing.T) {
	// a -> b -> c, d alone; the selection is a and c (c waits for a
	// through b, which is not selected).
	p := chain([]string{"a", "b", "c", "d"}, map[string][]string{"b": {"a"}, "c": {"b"}})
	sel := &engine.Selection{Select: []string{"a c"}, Steps: []string{"a", "c"}}
	only := func(t *testing.T, h *harness, runID string, snap engine.Snapshot) engine.Snapshot {
		t.Helper()
		evs := h.events(runID)
		snap = checkLog(t, evs, snap)
		var ids []string
		for _, s := range snap.Steps {
			ids = append(ids, s.StepID)
		}
		slices.Sort(ids)
		if !slices.Equal(ids, []string{"a", "c"}) {
			t.Errorf("the snapshot has steps %v, want [a c]", ids)
		}
		for _, id := range []string{"b", "d"} {
			if n := len(types(evs, id)); n != 0 {
				t.Errorf("%s got %d events", id, n)
			}
			if n := len(h.wh.requests(id)); n != 0 {
				t.Errorf("%s ran", id)
			}
		}
		return snap
	}

	execSelected := func(t *testing.T, h *harness) (string, engine.Snapshot) {
		t.Helper()
		runID, err := h.eng.StartRun(h.ctx, engine.StartRequest{Plan: p, Selection: sel})
		if err != nil {
			t.Fatal(err)
		}
		snap, err := h.rn.Execute(h.ctx, runID, p, h.wh)
		if err != nil {
			t.Fatal(err)
		}
		return runID, only(t, h, runID, snap)
	}

	t.Run("completes", func(t *testing.T) {
		h := newHarness(t)
		h.rn.Config.Threads = 4
		aDone := make(chan struct{})
		h.wh.set("a", func(context.Context, engine.StepRequest, int) (engine.StepResult, error) {
			defer close(aDone)
			return engine.StepResult{RowsAffected: 1}, nil
		})
		h.wh.set("c", func(context.Context, engine.StepRequest, int) (engine.StepResult, error) {
			select {
			case <-aDone:
			default:
				t.Error("c started before a finished")
			}
			return engine.StepResult{RowsAffected: 1}, nil
		})
		runID, snap := execSelected(t, h)
		if snap.Status != engine.StatusCompleted {
			t.Fatalf("run %s", snap.Status)
		}
		q, err := engine.QueuedRequest(h.events(runID))
		if err != nil || q.Selection == nil || !slices.Equal(q.Selection.Steps, sel.Steps) || !slices.Equal(q.Selection.Select, sel.Select) {
			t.Fatalf("RunQueued records %+v (%v)", q, err)
		}
	})

	t.Run("upstream failure skips through an unselected step", func(t *testing.T) {
		h := newHarness(t)
		h.wh.set("a", func(context.Context, engine.StepRequest, int) (engine.StepResult, error) {
			return engine.StepResult{}, errors.New("syntax error")
		})
		_, snap := execSelected(t, h)
		if c := stepOf(snap, "c"); snap.Status != engine.StatusFailed || c.Status != engine.StepStatusSkipped {
			t.Fatalf("run %s, c %s", snap.Status, c.Status)
		}
	})

	t.Run("resume keeps the recorded selection", func(t *testing.T) {
		h := newHarness(t)
		started := make(chan string, 1)
		h.wh.set("c", func(ctx context.Context, req engine.StepRequest, call int) (engine.StepResult, error) {
			if call == 1 {
				return blockUntilDone(started)(ctx, req, call)
			}
			return engine.StepResult{RowsAffected: 1}, nil
		})
		runID, err := h.eng.StartRun(h.ctx, engine.StartRequest{Plan: p, Selection: sel})
		if err != nil {
			t.Fatal(err)
		}
		ctx, crash := context.WithCancel(h.ctx)
		done := h.execAsync(ctx, runID, p)
		recv(t, started)
		crash()
		if res := h.wait(done); !errors.Is(res.err, context.Canceled) {
			t.Fatalf("interrupted Execute returned %v", res.err)
		}
		// The resuming caller holds the whole plan and says nothing of the
		// selection: the log does.
		snap, err := h.rn.Resume(h.ctx, runID, p, h.wh)
		if err != nil {
			t.Fatal(err)
		}
		snap = only(t, h, runID, snap)
		if snap.Status != engine.StatusCompleted || len(h.wh.requests("a")) != 1 || len(h.wh.requests("c")) != 2 {
			t.Fatalf("run %s, a ran %d times, c %d", snap.Status, len(h.wh.requests("a")), len(h.wh.requests("c")))
		}
	})

	t.Run("StartRun refuses a selection the plan lacks", func(t *testing.T) {
		h := newHarness(t)
		for _, bad := range []*engine.Selection{{Steps: []string{"a", "zz"}}, {Steps: nil}} {
			if _, err := h.eng.StartRun(h.ctx, engine.StartRequest{Plan: p, Selection: bad}); err == nil {
				t.Fatalf("StartRun accepted selection %v", bad.Steps)
			}
		}
	})
}
