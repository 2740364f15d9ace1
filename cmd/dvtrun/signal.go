package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store"
)

var signalNames = map[string]engine.SignalType{
	"pause":      engine.SignalPause,
	"resume":     engine.SignalResume,
	"cancel":     engine.SignalCancel,
	"retry-step": engine.SignalRetryStep,
}

// signalFlags are shared by cancel and signal.
type signalFlags struct {
	actor string
	wait  time.Duration
}

func (f *signalFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.actor, "actor", "", "who sends the signal, checked against the signals policy (default: the OS user)")
	fs.DurationVar(&f.wait, "wait", 10*time.Second, "how long to wait for a live runner's decision (0: do not wait)")
}

func cmdCancel(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("cancel", "RUN_ID", "Ask a run's runner to cancel it (through the state store, from any process).\nExit 1 when the runner rejects the signal (SIGNAL_REJECTED).")
	reason := fs.String("reason", "cancelled from the CLI", "why, recorded with the signal")
	var sf signalFlags
	sf.register(fs)
	c.lastPlanFlag(fs)
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	return c.sendSignal(ctx, pos[0], engine.SignalCancel, "", *reason, sf)
}

func cmdSignal(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("signal", "RUN_ID pause|resume|cancel|retry-step", "Send a signal to a run's runner through the state store.\nExit 1 when the runner rejects the signal (SIGNAL_REJECTED).")
	step := fs.String("step", "", "the step `ID` to retry (retry-step)")
	reason := fs.String("reason", "", "why, recorded with the signal")
	var sf signalFlags
	sf.register(fs)
	c.lastPlanFlag(fs)
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
	return c.sendSignal(ctx, pos[0], t, *step, *reason, sf)
}

// sendSignal stores the signal with its actor and says what happens next.
// The run's runner decides it (and enforces the signals policy): with a
// live runner the command waits for the decision and prints it; without
// one it says so and how the signal will take effect.
func (c *cli) sendSignal(ctx context.Context, runID string, t engine.SignalType, stepID, reason string, sf signalFlags) error {
	if sf.wait < 0 {
		return engine.Errorf(engine.CodeInvalidArgument, "--wait must not be negative")
	}
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
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
	actor := c.actor(sf.actor)
	eng.Config.TriggeredBy = actor // Signal records it as requestedBy
	snap, err := eng.GetRunStatus(ctx, meta.RunID)
	if err != nil {
		return err
	}
	// Terminal runs are immutable: a signal would wait forever for a runner.
	if snap.Status.Terminal() {
		return engine.Errorf(engine.CodeInvalidArgument, "run %s is already %s; signals reach live runs only", meta.RunID, snap.Status)
	}
	if stepID != "" {
		if _, found := snap.Step(stepID); !found {
			return engine.Errorf(engine.CodeInvalidArgument, "run %s has no step %s in its log", meta.RunID, stepID)
		}
	}
	sig, err := eng.Signal(ctx, meta.RunID, t, stepID, reason)
	if err != nil {
		return err
	}
	w := c.stdout
	fmt.Fprintf(w, "%s sent to run %s by %s (signal %d, %s)\n", sig.Type, sig.RunID, engine.EscapeControl(actor), sig.Seq, sig.SignalID)
	if ok, why := cfg.Signals.Allows(actor, t, meta.EnvironmentID); !ok {
		fmt.Fprintf(w, "The signals policy in %s does not allow it (%s): the run's runner will record it as SignalRejected.\n", engine.EscapeControl(c.g.config), engine.EscapeControl(why))
	}
	onTemporal, err := c.forwardToTemporal(ctx, cfg, meta, sig)
	if err != nil {
		return err
	}
	lease, held, err := st.GetLease(ctx, meta.RunID)
	if err != nil {
		return err
	}
	if onTemporal {
		// The workflow decides it now; its lease is renewed by its
		// activities only, so it says nothing of the workflow's life.
		held, lease.Live, lease.Owner = true, true, "its Temporal workflow"
	}
	if !held || !lease.Live {
		fmt.Fprintln(w, noRunner(meta.RunID, t, lease, held))
		return nil
	}
	if sf.wait == 0 {
		fmt.Fprintf(w, "Run %s is owned by %s, which decides the signal at its next poll.\n", meta.RunID, engine.EscapeControl(lease.Owner))
		return nil
	}
	dec, found, err := waitForDecision(ctx, st, sig, snap.LastEventSeq, sf.wait)
	if err != nil {
		return err
	}
	if !found {
		fmt.Fprintf(w, "No decision from %s within %s; it decides at its next poll (see `dvtrun events %s`).\n", engine.EscapeControl(lease.Owner), sf.wait, meta.RunID)
		return nil
	}
	var p struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(dec.Payload, &p)
	if dec.EventType == engine.SignalRejected {
		fmt.Fprintf(w, "%s rejected by the runner %s: %s\n", sig.Type, engine.EscapeControl(lease.Owner), engine.EscapeControl(p.Reason))
		return &exitError{code: exitFailed, err: engine.Errorf(engine.CodeSignalRejected, "run %s's runner rejected %s from %s: %s", meta.RunID, sig.Type, actor, p.Reason)}
	}
	fmt.Fprintf(w, "%s accepted by the runner %s\n", sig.Type, engine.EscapeControl(lease.Owner))
	return nil
}

// noRunner says that no runner holds the run and how the stored signal will
// take effect: the runner that next executes the run reads every pending
// signal before it starts a step.
func noRunner(runID string, t engine.SignalType, l store.Lease, held bool) string {
	who := fmt.Sprintf("No runner holds run %s (it has not started, or its runner stopped)", runID)
	if held {
		who = fmt.Sprintf("No runner holds run %s: the lease of %s expired at %s (the runner is gone)", runID, engine.EscapeControl(l.Owner), fmtTime(l.ExpiresAt))
	}
	effect := "it is decided when the run is resumed (`dvtrun resume " + runID + "`) or taken over by a worker"
	if t == engine.SignalCancel {
		effect = "the run is cancelled when it is resumed (`dvtrun resume " + runID + "`) or taken over by a worker, before any step runs again"
	}
	return who + ". The signal waits in the state store; " + effect + "."
}

// waitForDecision polls the run's log past seq for the runner's
// SignalAccepted or SignalRejected of sig.
func waitForDecision(ctx context.Context, st stateStore, sig engine.Signal, seq int64, wait time.Duration) (engine.RunEventRecord, bool, error) {
	deadline := time.Now().Add(wait)
	for {
		evs, err := st.ListEvents(ctx, sig.RunID, seq, 0)
		if err != nil {
			return engine.RunEventRecord{}, false, err
		}
		for _, e := range evs {
			seq = e.RunSeq
			if e.EventType != engine.SignalAccepted && e.EventType != engine.SignalRejected {
				continue
			}
			var p struct {
				SignalID string `json:"signalId"`
			}
			if json.Unmarshal(e.Payload, &p) == nil && p.SignalID == sig.SignalID {
				return e, true, nil
			}
		}
		if !time.Now().Before(deadline) {
			return engine.RunEventRecord{}, false, nil
		}
		if err := sleepCtx(ctx, min(200*time.Millisecond, time.Until(deadline))); err != nil {
			return engine.RunEventRecord{}, false, err
		}
	}
}
