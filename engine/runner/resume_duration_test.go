package runner_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/runner"
)

// TestResumedStepDurationIsItsOwnAttempts: a step in flight when its
// runner died runs again on resume as a new engine attempt of the same
// logical attempt. Its duration is that attempt's (2.8s of work), not the
// span from the first runner's StepStarted (the crash and the wait before
// the resume counted as execution), and it is reported as started, so
// the console prints its START line.
func TestResumedStepDurationIsItsOwnAttempts(t *testing.T) {
	h := newHarness(t)
	p := chain([]string{"s1", "s2", "s3"}, map[string][]string{"s2": {"s1"}, "s3": {"s2"}})
	started := make(chan string, 1)
	const work = 2800 * time.Millisecond
	h.wh.set("s2", func(ctx context.Context, req engine.StepRequest, call int) (engine.StepResult, error) {
		if call == 1 {
			return blockUntilDone(started)(ctx, req, call)
		}
		h.clock.Advance(work)
		return engine.StepResult{RowsAffected: 2}, nil
	})
	runID := h.start(p)
	ctx, crash := context.WithCancel(h.ctx)
	done := h.execAsync(ctx, runID, p)
	recv(t, started)
	crash()
	if res := h.wait(done); !errors.Is(res.err, context.Canceled) {
		t.Fatalf("interrupted Execute returned %v", res.err)
	}
	firstStart := stepOf(engine.Project(runID, h.events(runID)), "s2").StartedAt
	h.clock.Advance(33 * time.Second) // the crash, and the lease's expiry
	before := len(h.progress.phase(runner.PhaseStepStarted))

	snap, evs := h.finish(runID, p, h.rn.Resume)
	if snap.Status != engine.StatusCompleted {
		t.Fatalf("run %s", snap.Status)
	}
	s2 := stepOf(snap, "s2")
	if s2.EngineAttemptID != 2 || s2.LogicalAttemptID != 1 {
		t.Fatalf("s2 %+v, want engine attempt 2 of logical attempt 1", s2)
	}
	// The attempt's own span, give or take the fake clock's 1ms a reading.
	if s2.DurationMs < work.Milliseconds() || s2.DurationMs > work.Milliseconds()+500 {
		t.Errorf("s2 took %d ms, want the resumed attempt's %d ms (from its StepStarted: %d ms)",
			s2.DurationMs, work.Milliseconds(), s2.CompletedAt.Sub(firstStart).Milliseconds())
	}
	if !s2.StartedAt.After(firstStart.Add(33 * time.Second)) {
		t.Errorf("s2 started at %s, before the resume (the first attempt started at %s)", s2.StartedAt, firstStart)
	}
	if got := s2.CompletedAt.UnixMilli() - s2.StartedAt.UnixMilli(); got != s2.DurationMs {
		t.Errorf("s2: completedAt-startedAt is %d ms, durationMs %d", got, s2.DurationMs)
	}
	// The log holds one StepStarted for the logical attempt (a second would
	// be a re-delivery of the same idempotency key); the outcome says when
	// the attempt that did the work started.
	if n := len(ofType(evs, engine.StepStarted)); n != 3 {
		t.Errorf("%d StepStarted, want 3 (one per step)", n)
	}
	var reported []runner.Progress
	for _, pr := range h.progress.phase(runner.PhaseStepStarted)[before:] {
		if pr.Step.ID == "s2" {
			reported = append(reported, pr)
		}
	}
	if len(reported) != 1 || reported[0].EngineAttempt != 2 || reported[0].LogicalAttempt != 1 {
		t.Errorf("the resume reported s2's start %d time(s) (%+v), want once as engine attempt 2", len(reported), reported)
	}
}

// TestCancelReportsStepsNotRunAgain: a CANCEL that reaches a resumed run
// before the steps an earlier runner left in flight ran again fails them
// STEP_CANCELLED and reports each, so the console counts them as cancelled.
func TestCancelReportsStepsNotRunAgain(t *testing.T) {
	h := newHarness(t)
	p := chain([]string{"s1", "s2"}, nil)
	started := make(chan string, 2)
	h.wh.set("s1", blockUntilDone(started))
	h.wh.set("s2", blockUntilDone(started))
	runID := h.start(p)
	ctx, crash := context.WithCancel(h.ctx)
	done := h.execAsync(ctx, runID, p)
	recv(t, started)
	recv(t, started)
	crash()
	h.wait(done)
	h.signal(runID, engine.SignalCancel, "")

	snap, _ := h.finish(runID, p, h.rn.Resume)
	if snap.Status != engine.StatusCancelled {
		t.Fatalf("run %s, want CANCELLED", snap.Status)
	}
	reported := map[string]bool{}
	for _, pr := range h.progress.phase(runner.PhaseStepDone) {
		if pr.Status == engine.StepStatusFailed && engine.CodeOf(pr.Err) == engine.CodeStepCancelled {
			reported[pr.Step.ID] = true
		}
	}
	for _, id := range []string{"s1", "s2"} {
		if st := stepOf(snap, id); st.Status != engine.StepStatusFailed || st.Error == nil || st.Error.Code != string(engine.CodeStepCancelled) {
			t.Errorf("%s: %+v, want FAILED with STEP_CANCELLED", id, st)
		}
		if !reported[id] {
			t.Errorf("%s was cancelled without a report", id)
		}
	}
}
