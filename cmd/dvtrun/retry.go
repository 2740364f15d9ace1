package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/selection"
)

func cmdRetry(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("retry", "RUN_ID [PLAN]", "Start a new run that executes only the steps that failed, were skipped or never ran in RUN_ID\n(dbt retry). Without PLAN it runs the plan bundle the state store kept for RUN_ID; given PLAN, that\nplan runs: a plan changed since is allowed (the point is to run the fix) and what changed is said.\nThe new run records parentRunId. Nothing to retry: exit 0.")
	var f runFlags
	f.register(fs)
	vars := fs.String("vars", "", "replace the run's variables with this YAML or JSON `MAPPING` (default: the retried run's)")
	pos, err := c.parse(fs, args, 1, 2)
	if err != nil {
		return err
	}
	if err := f.check(); err != nil {
		return err
	}
	varMap, err := plan.ParseVars(*vars)
	if err != nil {
		return err
	}
	parent, err := c.readParent(ctx, pos[0], len(pos) == 1)
	if err != nil {
		return err
	}
	// The retry runs where the run ran, on its variables and interval.
	if err := c.useRecordedTarget(parent.meta.RunID, parent.queued.Target); err != nil {
		return err
	}
	if *vars == "" {
		varMap = parent.queued.Vars
	}
	b := parent.bundle
	if len(pos) == 2 {
		if b, err = loadPlan(pos[1], ""); err != nil {
			return err
		}
	}
	planPath := b.Ref.URI
	p, ref := b.Plan, b.Ref
	if p.PlanID != parent.meta.PlanID || p.PlanVersion != parent.meta.PlanVersion {
		return engine.Errorf(engine.CodePlanHashMismatch, "run %s ran plan %s@%s, not %s@%s (%s)", parent.meta.RunID, parent.meta.PlanID, parent.meta.PlanVersion, p.PlanID, p.PlanVersion, planPath)
	}
	for _, change := range planChanges(parent.meta, parent.queued.PlanRef, ref) {
		fmt.Fprintf(c.stdout, "plan changed since run %s: %s\n", c.clean(parent.meta.RunID), c.clean(change))
	}
	steps, gone := retrySteps(p, parent.queued, parent.snap)
	for _, id := range gone {
		fmt.Fprintf(c.stdout, "step %s of run %s is no longer in the plan: not retried\n", id, parent.meta.RunID)
	}
	if len(steps) == 0 {
		fmt.Fprintf(c.stdout, "Nothing to retry: every step of run %s succeeded.\n", parent.meta.RunID)
		return nil
	}
	sel := &engine.Selection{Steps: steps}
	intro := fmt.Sprintf("Retrying %d step(s) of run %s: %s", len(steps), parent.meta.RunID, strings.Join(steps, ", "))
	f.ranOn = parent.engine // a run that ran on Temporal is retried there
	return c.startAndExecute(ctx, f, b, engine.StartRequest{Plan: p, Ref: ref, Selection: sel, ParentRunID: parent.meta.RunID,
		FullRefresh: parent.queued.FullRefresh, Target: parent.queued.Target, Vars: varMap, DataInterval: parent.queued.DataInterval}, intro) // dbt retry reuses the run's flags
}

// parentRun is what retry reads of the run it retries.
type parentRun struct {
	meta   engine.RunMetadata
	queued engine.RunQueuedRequest
	snap   engine.Snapshot
	bundle *plan.Bundle // withBundle: the plan bundle the run ran
	engine string       // the engine it started on (RunStarted's engineType)
}

// readParent reads a finished run: a run still in progress (or
// interrupted) is resumed, not retried. withBundle also reads the plan
// bundle it ran from the state store.
func (c *cli) readParent(ctx context.Context, runID string, withBundle bool) (parentRun, error) {
	st, err := c.openStore(ctx, true)
	if err != nil {
		return parentRun{}, err
	}
	defer st.Close()
	meta, err := c.loadRun(ctx, st, runID)
	if err != nil {
		return parentRun{}, err
	}
	events, err := st.ListEvents(ctx, meta.RunID, 0, 0)
	if err != nil {
		return parentRun{}, err
	}
	snap := engine.Project(meta.RunID, events)
	if !snap.Status.Terminal() {
		return parentRun{}, engine.Errorf(engine.CodeInvalidArgument, "run %s is %s, not finished: continue it with `dvtrun resume %s` instead", meta.RunID, snap.Status, meta.RunID)
	}
	q, err := engine.QueuedRequest(events)
	if err != nil {
		return parentRun{}, err
	}
	parent := parentRun{meta: meta, queued: q, snap: snap, engine: startedOn(events)}
	if withBundle {
		ref := q.PlanRef
		if ref.SHA256 == "" {
			ref.SHA256 = meta.PlanSHA256
		}
		if parent.bundle, err = c.runBundle(ctx, st, meta, ref, "retry"); err != nil {
			return parentRun{}, err
		}
	}
	return parent, nil
}

// retrySteps are the steps of the parent run (its selection, or the whole
// plan) that did not succeed there — FAILED, SKIPPED, or never reached
// because the run was cancelled or failed to start — in execution order
// of the plan p. Every ancestor of such a step that ran in the parent
// run and did not succeed is one of them too, so the retry rebuilds what
// they need; ancestors that succeeded, or were outside the parent's
// selection, are not run (as dbt retry). Ephemeral models never have
// events and never run on their own: they are left out. gone lists the
// parent's steps p no longer has.
func retrySteps(p *plan.Plan, q engine.RunQueuedRequest, snap engine.Snapshot) (steps, gone []string) {
	var scope []string
	if q.Selection != nil {
		scope = q.Selection.Steps
	} else {
		for _, s := range p.Steps {
			scope = append(scope, s.ID)
		}
	}
	succeeded := map[string]bool{}
	for _, s := range snap.Steps {
		if s.Status == engine.StepStatusSuccess {
			succeeded[s.StepID] = true
		}
	}
	var ids []string
	for _, id := range scope {
		if succeeded[id] {
			continue
		}
		st, ok := p.Step(id)
		if !ok {
			gone = append(gone, id)
			continue
		}
		if selection.Executes(st) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, gone
	}
	sub, err := p.Subset(ids)
	if err != nil { // every id was checked above
		return ids, gone
	}
	for _, s := range sub.Order() {
		steps = append(steps, s.ID)
	}
	return steps, gone
}

// planChanges names what changed in the plan bundle since the run ran it:
// each file, from the per-file sha256s RunQueued recorded (a run recorded
// before bundles: the plan as a whole).
func planChanges(ran engine.RunMetadata, recorded, now engine.PlanRef) []string {
	if recorded.SHA256 == "" {
		recorded.SHA256 = ran.PlanSHA256
	}
	var e *engine.Error
	if err := now.Compare(recorded); errors.As(err, &e) {
		if changes, ok := e.Meta["changes"].([]string); ok {
			return changes
		}
		return []string{now.URI}
	}
	return nil
}
