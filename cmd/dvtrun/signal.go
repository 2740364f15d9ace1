package main

import (
	"context"
	"fmt"

	"github.com/dvtrun/dvtrun/engine"
)

var signalNames = map[string]engine.SignalType{
	"pause":      engine.SignalPause,
	"resume":     engine.SignalResume,
	"cancel":     engine.SignalCancel,
	"retry-step": engine.SignalRetryStep,
}

func cmdCancel(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("cancel", "RUN_ID", "Ask a run's runner to cancel it (through the state store, from any process).")
	reason := fs.String("reason", "cancelled from the CLI", "why, recorded with the signal")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	return c.sendSignal(ctx, pos[0], engine.SignalCancel, "", *reason)
}

func cmdSignal(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("signal", "RUN_ID pause|resume|cancel|retry-step", "Send a signal to a run's runner through the state store.")
	step := fs.String("step", "", "the step `ID` to retry (retry-step)")
	reason := fs.String("reason", "", "why, recorded with the signal")
	pos, err := c.parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	t, ok := signalNames[pos[1]]
	if !ok {
		return engine.Errorf(engine.CodeInvalidArgument, "unknown signal %q (want pause, resume, cancel or retry-step)", pos[1])
	}
	if t == engine.SignalRetryStep && *step == "" {
		return engine.Errorf(engine.CodeInvalidArgument, "retry-step needs --step ID")
	}
	if t != engine.SignalRetryStep && *step != "" {
		return engine.Errorf(engine.CodeInvalidArgument, "--step is for retry-step only")
	}
	return c.sendSignal(ctx, pos[0], t, *step, *reason)
}

func (c *cli) sendSignal(ctx context.Context, runID string, t engine.SignalType, stepID, reason string) error {
	st, err := c.openStore(ctx, true)
	if err != nil {
		return err
	}
	defer st.Close()
	meta, err := c.loadRun(ctx, st, runID)
	if err != nil {
		return err
	}
	eng := c.engineFor(st)
	snap, err := eng.GetRunStatus(ctx, meta.RunID)
	if err != nil {
		return err
	}
	// Terminal runs are immutable: a signal would wait forever for a runner.
	if snap.Status.Terminal() {
		return engine.Errorf(engine.CodeInvalidArgument, "run %s is already %s; signals reach live runs only", runID, snap.Status)
	}
	if stepID != "" {
		found := false
		for _, s := range snap.Steps {
			found = found || s.StepID == stepID
		}
		if !found {
			return engine.Errorf(engine.CodeInvalidArgument, "run %s has no step %s in its log", runID, stepID)
		}
	}
	sig, err := eng.Signal(ctx, meta.RunID, t, stepID, reason)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "%s sent to run %s (signal %d, %s)\n", sig.Type, sig.RunID, sig.Seq, sig.SignalID)
	return nil
}
