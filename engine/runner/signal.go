package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/dag"
)

// firstSignals waits until the pulse's first call for this run is back,
// then handles what it fetched: a run sees the signals sent before it
// started before it starts a step (unless that fetch failed; then at the
// next interval, as before). The call was made at the join, so it is
// usually back by now; a lost lease ends the wait.
func (r *execution) firstSignals(ctx context.Context, leaseLost <-chan struct{}) error {
	tick := time.NewTicker(r.cfg.SignalPoll)
	defer tick.Stop()
	for {
		select {
		case <-r.member.Polled():
			return r.pollSignals(ctx)
		case <-tick.C:
			if !r.leaseValid() { // a pulse that never beats does not hold the run forever
				return r.selfFenced()
			}
		case <-leaseLost:
			return r.leaseLost()
		case <-ctx.Done():
			return fmt.Errorf("run %s interrupted (resume it to carry on): %w", r.runID, ctx.Err())
		}
	}
}

// pollSignals handles, in order, the run's new signals the pulse handed
// over (it never reads the store itself: a failed fetch is the pulse's to
// retry), then checks the drain timeout of a PAUSE. A failed write stops
// the run.
func (r *execution) pollSignals(ctx context.Context) error {
	for _, sg := range r.member.Take() {
		if r.dag.Run.Terminal() {
			break
		}
		if sg.Seq <= r.sigSeq {
			continue // decided before this runner started (the log says so)
		}
		if err := r.handleSignal(ctx, sg); err != nil {
			return err
		}
		r.sigSeq = sg.Seq
	}
	r.checkDrain(ctx)
	return nil
}

func (r *execution) decision(sg engine.Signal, accepted bool, reason string, retryAttempt int) engine.Emission {
	return dag.Decision(sg, accepted, reason, retryAttempt)
}

func (r *execution) reject(ctx context.Context, sg engine.Signal, format string, args ...any) error {
	r.rejected = fmt.Sprintf(format, args...)
	return r.emit(ctx, r.decision(sg, false, r.rejected, 0))
}

// handleSignal checks the signal against the signals policy, applies it,
// and reports the decision: a signal the policy does not allow is recorded
// as SignalRejected with the reason and changes nothing.
func (r *execution) handleSignal(ctx context.Context, sg engine.Signal) error {
	r.rejected = ""
	if r.e.Signals != nil {
		if ok, why := r.e.Signals.Allows(sg.RequestedBy, sg.Type, r.meta.EnvironmentID); !ok {
			if err := r.reject(ctx, sg, "%s", why); err != nil {
				return err
			}
			r.reportSignal(sg)
			return nil
		}
	}
	if err := r.applySignal(ctx, sg); err != nil {
		return err
	}
	r.reportSignal(sg)
	return nil
}

func (r *execution) reportSignal(sg engine.Signal) {
	r.e.report(Progress{Phase: PhaseSignal, RunID: r.runID, Total: len(r.steps), Signal: &sg, Rejected: r.rejected, InFlight: len(r.inflight)})
}

func (r *execution) applySignal(ctx context.Context, sg engine.Signal) error {
	runEvent := func(t engine.EventType) engine.Emission { return dag.SignalEvent(sg, t) }
	// The DAG rules decide whether the signal applies now.
	if why := r.dag.Refuse(sg, r.runID, r.p.PlanID); why != "" {
		return r.reject(ctx, sg, "%s", why)
	}
	switch sg.Type {
	case engine.SignalPause:
		if err := r.emit(ctx, r.decision(sg, true, "", 0), runEvent(engine.RunPaused)); err != nil {
			return err
		}
		r.dag.Run = engine.StatusPaused
		r.pausedAt, r.pauseSeq, r.drainAlerted = r.e.Clock.Now(), sg.Seq, false
		return nil
	case engine.SignalResume:
		ems := []engine.Emission{r.decision(sg, true, "", 0), runEvent(engine.RunResumed)}
		r.dag.Run = engine.StatusRunning
		if x, ok := r.final(); ok {
			ems = append(ems, x)
		}
		if err := r.emit(ctx, ems...); err != nil {
			return err
		}
		if len(ems) == 3 {
			r.dag.Run = engine.RunStatus(mustTarget(ems[2].Type))
		}
		return nil
	case engine.SignalCancel:
		return r.cancel(ctx, sg, runEvent(engine.RunCancelled))
	case engine.SignalRetryStep:
		i, _ := r.dag.Index(sg.StepID)
		next := r.dag.Logical(i) + 1
		if err := r.emit(ctx, r.decision(sg, true, "", next)); err != nil {
			return err
		}
		r.dag.QueueRetry(i, next)
		return nil
	}
	return nil // Refuse rejected every other type
}

// cancel interrupts the steps in flight through their contexts, waits for
// them, and records in one batch: the decision, their outcomes, the
// StepSkipped of every step not started, and RunCancelled.
func (r *execution) cancel(ctx context.Context, sg engine.Signal, cancelled engine.Emission) error {
	for _, fl := range r.inflight {
		fl.cancel()
	}
	var outs []outcome
	for len(outs) < len(r.inflight) {
		select {
		case o := <-r.results:
			outs = append(outs, o)
		case <-ctx.Done():
			for _, o := range outs {
				delete(r.inflight, o.i) // drain must not wait for them again
			}
			return fmt.Errorf("run %s interrupted while cancelling: %w", r.runID, ctx.Err())
		}
	}
	reason := "run cancelled"
	if sg.Reason != "" {
		reason += ": " + sg.Reason
	}
	var skips []engine.Emission
	var reports []Progress
	skips, reports = r.skipped(r.dag.SkipPending(reason), skips, reports)
	ems := []engine.Emission{r.decision(sg, true, "", 0)}
	ems, reports = r.completion(outs, ems, reports)
	for _, i := range r.rerun {
		// Started by an earlier runner and never resumed: they end here.
		r.dag.Set(i, engine.StepStatusFailed)
		ems = append(ems, engine.Emission{Type: engine.StepFailed, Step: r.steps[i].ID, Attempt: r.dag.Logical(i), EngineAttempt: r.engineAtt[i], Payload: map[string]any{
			"error": engine.ErrorInfo{Code: string(engine.CodeStepCancelled), Message: reason},
		}})
		reports = append(reports, Progress{Phase: PhaseStepDone, RunID: r.runID, Index: r.order[i], Total: len(r.steps), Step: r.steps[i],
			Status: engine.StepStatusFailed, Err: engine.Errorf(engine.CodeStepCancelled, "step %s was cancelled before it ran again", r.steps[i].ID),
			EngineAttempt: r.engineAtt[i], LogicalAttempt: r.dag.Logical(i)})
	}
	r.rerun = nil
	r.dag.ClearRetries()
	ems = append(ems, skips...)
	ems = append(ems, cancelled)
	if err := r.emit(ctx, ems...); err != nil {
		return err
	}
	r.dag.Run = engine.StatusCancelled
	r.reportAll(reports)
	return nil
}

// checkDrain raises PAUSE_DRAIN_TIMEOUT once per PAUSE when steps are still
// running DrainTimeout after it.
func (r *execution) checkDrain(ctx context.Context) {
	if r.dag.Run != engine.StatusPaused || len(r.inflight) == 0 || r.drainAlerted {
		return
	}
	now := r.e.Clock.Now()
	waited := now.Sub(r.pausedAt)
	if waited <= r.cfg.DrainTimeout {
		return
	}
	running := make([]string, 0, len(r.inflight))
	for i := range r.inflight {
		running = append(running, r.steps[i].ID)
	}
	payload, _ := json.Marshal(map[string]any{"pauseSignalSeq": r.pauseSeq, "runningSteps": running, "drainTimeoutMs": r.cfg.DrainTimeout.Milliseconds()})
	_, err := r.e.Log.RecordAlert(ctx, engine.Alert{
		Key: fmt.Sprintf("%s|%s|%d", engine.CodePauseDrainTimeout, r.runID, r.pauseSeq), Code: engine.CodePauseDrainTimeout, Severity: engine.SeverityP2,
		RunID: r.runID, TenantID: r.meta.TenantID, ProjectID: r.meta.ProjectID, EnvironmentID: r.meta.EnvironmentID,
		Message: fmt.Sprintf("run %s is PAUSED but %d step(s) still run %s after the PAUSE (drain timeout %s); RESUME may proceed",
			r.runID, len(running), waited, r.cfg.DrainTimeout),
		Payload: payload, CreatedAt: now,
	})
	if err == nil {
		r.drainAlerted = true
	}
}
