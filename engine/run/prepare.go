// Package run is the run core both engine adapters share. Today it holds
// PrepareRun (Prepare): the one place a plan and a run's recorded shape
// become the steps the run executes, the renderer they are rendered with
// and the redactor their output passes through. The local runner, the
// Temporal activities and the command line all call it, so that a run is
// prepared the same way wherever it is started, resumed or checked.
//
// The package does no I/O: its inputs are values read elsewhere.
package run

import (
	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// Input is what a run is prepared from.
type Input struct {
	// Plan is the plan as written: ephemeral models included (a ref to one
	// names its CTE). It must be valid (Validate).
	Plan *plan.Plan
	// Shape is the run's recorded request (RunQueued): its selection, vars,
	// data interval and full refresh. A run that is not recorded yet passes
	// the request it is about to record.
	Shape engine.RunQueuedRequest
	// Secrets resolves {{ secret('NAME') }}; nil: no secret resolves.
	Secrets plan.SecretLookup
	// Dialect quotes names and literals as the warehouse does; nil: plain
	// names (checks made before a warehouse is opened).
	Dialect plan.Dialect
	// AnyInterval stands for a data interval not known yet (plan validate):
	// the interval names render as a placeholder.
	AnyInterval bool
}

// Prepared is a run ready to execute.
type Prepared struct {
	// Written is the plan as written (Input.Plan).
	Written *plan.Plan
	// Full is Written with its ephemeral models inlined: every step a run
	// of the plan could execute.
	Full *plan.Plan
	// Plan is Full with the recorded selection applied: the steps this run
	// executes (Full itself when nothing was selected).
	Plan *plan.Plan
	// Context is what the steps are rendered with: the recorded vars and
	// data interval, the dialect and the secrets.
	Context plan.Context
	// Render renders the steps' SQL with Context.
	Render *plan.Renderer
	// Redact knows every secret value the plan's steps resolve.
	Redact *engine.Redactor
}

// Prepare is PrepareRun: it inlines the ephemeral models of in.Plan,
// applies the recorded selection and builds the renderer and the redactor.
// The only error is a recorded selection that does not fit the plan. What
// must hold before anything is written or started — every secret resolves,
// every template renders — is checked by CheckSecrets and CheckContext,
// which each caller makes at its own point.
func Prepare(in Input) (*Prepared, error) {
	full := in.Plan.InlineEphemeral()
	sel, err := plan.Selected(full, in.Shape)
	if err != nil {
		return nil, err
	}
	lookup := in.Secrets
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	c := plan.Context{Dialect: in.Dialect, Vars: in.Shape.Vars, Interval: in.Shape.DataInterval, AnyInterval: in.AnyInterval, Secrets: lookup}
	return &Prepared{Written: in.Plan, Full: full, Plan: sel, Context: c,
		Render: plan.NewRenderer(in.Plan, c), Redact: redactor(full, in.Secrets)}, nil
}

// CheckSecrets resolves every secret the run's steps declare, so that a
// missing one is refused (SECRET_NOT_FOUND) before the run is recorded or
// continued rather than mid-run.
func (p *Prepared) CheckSecrets() error {
	return plan.CheckSecrets(p.Plan, p.Context.Secrets)
}

// CheckContext renders every step the run executes with its recorded
// context, so that a var without value or default, or an interval name in
// a run without an interval, is refused (PLAN_INVALID) before anything is
// written.
func (p *Prepared) CheckContext() error {
	return plan.CheckContext(p.Written, p.Plan, p.Context)
}

// MatchesRun refuses (PLAN_HASH_MISMATCH) a plan other than the one the run
// was recorded with.
func MatchesRun(meta engine.RunMetadata, p *plan.Plan) error {
	if meta.PlanID != p.PlanID || meta.PlanVersion != p.PlanVersion {
		return engine.Errorf(engine.CodePlanHashMismatch, "run %s runs plan %s@%s, not %s@%s", meta.RunID, meta.PlanID, meta.PlanVersion, p.PlanID, p.PlanVersion)
	}
	return nil
}

// redactor knows every secret value the plan's steps resolve: each step's
// output is redacted of all of them, declared by that step or not (a step
// may read back what another one stored).
func redactor(p *plan.Plan, secrets plan.SecretLookup) *engine.Redactor {
	red := engine.NewRedactor()
	if secrets == nil {
		return red
	}
	for _, s := range p.Steps {
		for _, ref := range s.Secrets {
			if v, ok := secrets(ref.Name); ok {
				red.Add(v)
			}
		}
	}
	return red
}
