package runner_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/config"
	"github.com/dvtrun/dvtrun/engine/runner"
)

// TestSignalPolicyEnforcedByRunner: the runner checks every signal against
// the signals policy, whoever stored it. A CANCEL from an actor the policy
// does not allow — written straight into the store, as a sender without the
// policy would — is recorded as SignalRejected with the reason and changes
// nothing; an allowed PAUSE and RESUME apply. Each decision is reported to
// the run's console, with the steps still draining.
func TestSignalPolicyEnforcedByRunner(t *testing.T) {
	h := newHarness(t)
	cfg, err := config.Parse([]byte("signals:\n  rules:\n    - {actors: [alice], signals: [PAUSE, RESUME], environments: [test]}\n"), "dvt.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h.rn.Signals = cfg.Signals
	h.rn.Config.Threads = 1
	p := chain([]string{"a", "b"}, nil)
	started := make(chan string, 1)
	release := make(chan struct{})
	h.wh.set("a", func(ctx context.Context, _ engine.StepRequest, _ int) (engine.StepResult, error) {
		started <- "a"
		select {
		case <-release:
			return engine.StepResult{RowsAffected: 1}, nil
		case <-ctx.Done():
			return engine.StepResult{}, ctx.Err()
		}
	})
	runID := h.start(p)
	done := h.execAsync(h.ctx, runID, p)
	recv(t, started)
	send := func(actor string, typ engine.SignalType) {
		t.Helper()
		if _, err := h.store.SendSignal(h.ctx, engine.Signal{SignalID: uuid.NewString(), RunID: runID, Type: typ, RequestedBy: actor}); err != nil {
			t.Fatal(err)
		}
	}
	send("mallory", engine.SignalCancel)
	waitUntil(t, "mallory's CANCEL is rejected", func() bool { return len(ofType(h.events(runID), engine.SignalRejected)) == 1 })
	rej := ofType(h.events(runID), engine.SignalRejected)[0]
	if reason, _ := payloadOf(t, rej)["reason"].(string); !strings.Contains(reason, `actor "mallory" may not send CANCEL`) || !strings.Contains(reason, "signals policy") {
		t.Fatalf("rejection reason %q", reason)
	}
	if by := payloadOf(t, rej)["requestedBy"]; by != "mallory" {
		t.Errorf("requestedBy %v", by)
	}
	if s := h.status(runID); s.Status != engine.StatusRunning || stepOf(s, "a").Status != engine.StepStatusRunning {
		t.Fatalf("a rejected CANCEL changed the run: %s, a %s", s.Status, stepOf(s, "a").Status)
	}
	if err := h.wh.ctxErr("a"); err != nil {
		t.Fatalf("a rejected CANCEL interrupted the step: %v", err)
	}

	send("alice", engine.SignalPause)
	waitUntil(t, "PAUSED while a drains", func() bool {
		s := h.status(runID)
		return s.Status == engine.StatusPaused && s.Substatus == engine.SubstatusDraining
	})
	close(release)
	waitUntil(t, "drained", func() bool { return len(h.progress.phase(runner.PhaseDrained)) == 1 })
	send("alice", engine.SignalResume)
	snap, _ := h.finished(runID, h.wait(done))
	if snap.Status != engine.StatusCompleted || len(ofType(h.events(runID), engine.RunCancelled)) != 0 {
		t.Fatalf("run %s, events %v", snap.Status, evTypes(h.events(runID)))
	}

	reports := h.progress.phase(runner.PhaseSignal)
	want := []struct {
		typ      engine.SignalType
		actor    string
		rejected bool
		inFlight int
	}{
		{engine.SignalCancel, "mallory", true, 1},
		{engine.SignalPause, "alice", false, 1},
		{engine.SignalResume, "alice", false, 0},
	}
	if len(reports) != len(want) {
		t.Fatalf("%d signal reports, want %d", len(reports), len(want))
	}
	for i, w := range want {
		r := reports[i]
		if r.Signal == nil || r.Signal.Type != w.typ || r.Signal.RequestedBy != w.actor || (r.Rejected != "") != w.rejected || r.InFlight != w.inFlight {
			t.Errorf("report %d: %+v (signal %+v), want %+v", i, r, r.Signal, w)
		}
	}
}
