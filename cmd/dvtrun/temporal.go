package main

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/config"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/runner"
	dvtemporal "github.com/dvtrun/dvtrun/engine/temporal"
)

func checkEngine(name string) error {
	switch name {
	case "", config.EngineLocal, config.EngineTemporal:
		return nil
	}
	return engine.Errorf(engine.CodeInvalidArgument, "--engine %q: want local or temporal", name)
}

// onTemporal reports whether a run executes on Temporal: --engine, else
// DVT_ENGINE, else the target's engine (one rule: the most specific to
// this command wins; the temporal block is the target's, else the
// top-level one — temporalBlock).
func (c *cli) onTemporal(flagValue string) bool {
	if flagValue == "" {
		flagValue = c.env("DVT_ENGINE")
	}
	if flagValue == "" && c.target != nil {
		flagValue = c.target.t.Engine
	}
	return flagValue == config.EngineTemporal
}

// temporalBlock is the temporal block of the command's target (its own,
// else the top-level one), defaults filled.
func (c *cli) temporalBlock(cfg *config.Config) config.Temporal {
	_, tc := cfg.Engine(c.targetName())
	return tc
}

// dialTemporal connects to the config's Temporal frontend; the SDK's own
// log goes to stderr at WARN and above only.
func (c *cli) dialTemporal(ctx context.Context, tc config.Temporal) (client.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cl, err := client.DialContext(dctx, client.Options{HostPort: tc.Address, Namespace: tc.Namespace,
		Logger: sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))})
	if err != nil {
		return nil, engine.Errorf(engine.CodeStoreUnavailable, "cannot reach the Temporal frontend at %s (namespace %s; the config's temporal block sets it, `make temporal-dev` starts a local one): %v", tc.Address, tc.Namespace, err)
	}
	return cl, nil
}

// temporalActivities are the adapter's activities on this process's store
// and warehouse; a run's plan is the bundle the store kept for it.
func (c *cli) temporalActivities(st stateStore, wh engine.Warehouse, lookup plan.SecretLookup, cfg *config.Config, tc config.Temporal, leaseTTL time.Duration) *dvtemporal.Activities {
	eng := c.engineFor(st)
	return &dvtemporal.Activities{
		Log: st, Clock: eng.Clock, IDs: eng.IDs, Warehouse: wh, Secrets: lookup, Signals: cfg.Signals,
		Namespace: tc.Namespace, Config: eng.Config, LeaseTTL: max(leaseTTL, 2*time.Minute), Heartbeat: tc.HeartbeatTimeout / 4,
		Plans: dvtemporal.PlanFunc(func(ctx context.Context, runID string) (*plan.Plan, error) {
			meta, err := st.GetRun(ctx, runID)
			if err != nil {
				return nil, err
			}
			recorded, err := engine.RecordedPlanRef(ctx, st, meta)
			if err != nil {
				return nil, err
			}
			b, err := c.runBundle(ctx, st, meta, recorded, "resume")
			if err != nil {
				return nil, err
			}
			return b.Plan, nil
		}),
	}
}

// startOnTemporal connects to the target's Temporal frontend and starts a
// worker, before the run is recorded: a frontend that is down leaves no
// QUEUED run behind that no engine would take.
func (c *cli) startOnTemporal(ctx context.Context, f runFlags, cfg *config.Config, st stateStore, wh engine.Warehouse, lookup plan.SecretLookup) (*temporalHost, error) {
	tc := c.temporalBlock(cfg)
	return c.hostTemporal(ctx, tc, f, sdkworker.Options{}, c.temporalActivities(st, wh, lookup, cfg, tc, f.leaseTTL))
}

// executeOnTemporal starts the run's workflow on host and waits for it
// (any other dvtrun worker polling its task queue shares the steps). A
// workflow Temporal did not start leaves the run failed to start
// (RunQueued → RunFailed), not QUEUED for ever. The snapshot is the
// store's.
func (c *cli) executeOnTemporal(ctx context.Context, host *temporalHost, f runFlags, st stateStore, rn *runner.Runner, runID string) (engine.Snapshot, error) {
	eng := c.engineFor(st)
	snap, err := host.run(ctx, eng, f, runID)
	if err == nil || ctx.Err() != nil {
		return snap, err
	}
	if now, serr := eng.GetRunStatus(context.WithoutCancel(ctx), runID); serr == nil && now.Status == engine.StatusQueued {
		if aerr := rn.AbortStart(context.WithoutCancel(ctx), runID, err); aerr != nil {
			return now, err
		}
		snap, _ = eng.GetRunStatus(context.WithoutCancel(ctx), runID)
	}
	return snap, err
}

// temporalHost is a Temporal client with a worker polling the block's task
// queue with dvtrun's workflow and activities.
type temporalHost struct {
	cl client.Client
	w  sdkworker.Worker
	tc config.Temporal
}

// hostTemporal connects and starts the worker; close stops both.
func (c *cli) hostTemporal(ctx context.Context, tc config.Temporal, f runFlags, opts sdkworker.Options, acts *dvtemporal.Activities) (*temporalHost, error) {
	cl, err := c.dialTemporal(ctx, tc)
	if err != nil {
		return nil, err
	}
	w := sdkworker.New(cl, tc.TaskQueue, opts)
	dvtemporal.Register(w, acts)
	if err := w.Start(); err != nil {
		cl.Close()
		return nil, engine.Errorf(engine.CodeStoreUnavailable, "the Temporal worker for task queue %s did not start: %v", tc.TaskQueue, err)
	}
	return &temporalHost{cl: cl, w: w, tc: tc}, nil
}

func (h *temporalHost) close() {
	h.w.Stop()
	h.cl.Close()
}

// run starts run runID's workflow — or joins it: the workflow id is the run
// id, so a request claimed again after its worker died, or started by two
// processes, has one workflow — and waits for it to end. The snapshot is
// the store's.
func (h *temporalHost) run(ctx context.Context, eng *engine.Engine, f runFlags, runID string) (engine.Snapshot, error) {
	run, err := dvtemporal.StartRun(ctx, h.cl, h.tc.TaskQueue, dvtemporal.Input{RunID: runID, Threads: f.threads, FailFast: f.failFast, HistoryBudget: h.tc.HistoryBudget, HeartbeatTimeout: h.tc.HeartbeatTimeout})
	if err != nil {
		return engine.Snapshot{}, err
	}
	werr := run.Get(ctx, nil)
	snap, err := eng.GetRunStatus(context.WithoutCancel(ctx), runID)
	if err != nil {
		return snap, err
	}
	if werr != nil && !snap.Status.Terminal() {
		if ctx.Err() != nil {
			return snap, engine.Errorf(engine.CodeStoreUnavailable, "run %s: interrupted; its workflow %s goes on on Temporal (any `dvtrun worker` on Temporal carries it)", runID, run.GetID())
		}
		return snap, engine.Errorf(engine.CodeStoreUnavailable, "run %s: its Temporal workflow ended without ending the run (resume it): %v", runID, werr)
	}
	return snap, nil
}

// forwardToTemporal hands a stored signal to the run's workflow when the
// run runs on Temporal (its providerRunRef says so); false: it does not.
func (c *cli) forwardToTemporal(ctx context.Context, cfg *config.Config, meta engine.RunMetadata, sg engine.Signal) (bool, error) {
	if !strings.HasPrefix(meta.ProviderRunRef, "temporal://") {
		return false, nil
	}
	cl, err := c.dialTemporal(ctx, c.temporalBlock(cfg))
	if err != nil {
		return true, err
	}
	defer cl.Close()
	return true, dvtemporal.Forward(ctx, cl, sg)
}

// reportSteps prints, once a Temporal run ended, each step's outcome from
// the store's snapshot, in the order the steps ended: the workers ran
// them, so this process saw no progress of its own.
func reportSteps(obs runner.Observer, p *plan.Plan, snap engine.Snapshot) {
	done := 0
	for _, st := range snap.Steps {
		s, ok := p.Step(st.StepID)
		if !ok || (st.Status != engine.StepStatusSuccess && st.Status != engine.StepStatusFailed && st.Status != engine.StepStatusSkipped) {
			continue
		}
		done++
		pr := runner.Progress{Phase: runner.PhaseStepDone, RunID: snap.RunID, Index: done, Total: len(p.Steps), Step: s, Status: st.Status,
			SkipReason: st.SkipReason, EngineAttempt: st.EngineAttemptID, LogicalAttempt: st.LogicalAttemptID, Elapsed: time.Duration(st.DurationMs) * time.Millisecond}
		if st.Error != nil {
			pr.Err = engine.Errorf(engine.Code(st.Error.Code), "%s", st.Error.Message)
		}
		obs.Report(pr)
	}
}
