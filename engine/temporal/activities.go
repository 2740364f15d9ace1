// Package temporal is dvtrun's Temporal adapter: a run is a workflow (its
// id is the run id), each step an activity. The workflow schedules with
// engine/dag's rules and does no I/O; activities run steps with
// engine/stepexec and append every event to dvtrun's state store through
// the same fenced, idempotent Emitter as the local runner, so the store
// stays the run's source of truth (status, verify and the audit views work
// unchanged).
package temporal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/dag"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/run"
	"github.com/dvtrun/dvtrun/engine/stepexec"
)

// EngineType is RunStarted's payload.engineType for this adapter.
const EngineType = "temporal"

// Log is what the activities need of the state store; store.Store
// satisfies it.
type Log interface {
	engine.EventReader
	engine.EventAppender
	engine.FencedAppender
	GetRun(ctx context.Context, runID string) (engine.RunMetadata, error)
	SetProviderRunRef(ctx context.Context, runID, ref string) error
	AcquireFencedLease(ctx context.Context, runID, owner string, ttl time.Duration) (engine.Lease, error)
}

// PlanSource gives the plan a run runs (the CLI reads the bundle the state
// store kept for it, so a worker on another machine runs the same plan).
type PlanSource interface {
	RunPlan(ctx context.Context, runID string) (*plan.Plan, error)
}

// PlanFunc adapts a function to PlanSource.
type PlanFunc func(ctx context.Context, runID string) (*plan.Plan, error)

// RunPlan calls f.
func (f PlanFunc) RunPlan(ctx context.Context, runID string) (*plan.Plan, error) {
	return f(ctx, runID)
}

// SignalAuthorizer reports whether actor may send a signal of type t to a
// run in environment and, when not, why (engine/config's SignalPolicy).
type SignalAuthorizer interface {
	Allows(actor string, t engine.SignalType, environment string) (bool, string)
}

// Activities are the adapter's activities, registered on a worker with
// Register. One value serves every run the worker executes.
type Activities struct {
	Log       Log
	Clock     engine.Clock
	IDs       engine.IDSource
	Plans     PlanSource
	Warehouse engine.Warehouse
	Secrets   plan.SecretLookup
	Signals   SignalAuthorizer // nil: every signal is allowed
	Namespace string           // for engineRunRef
	// LeaseTTL is the run lease each activity renews (default 2m): a local
	// runner may take a run over only once Temporal stopped renewing it.
	LeaseTTL time.Duration
	// Heartbeat is how often a running step heartbeats (default 2s).
	Heartbeat time.Duration
	// Config goes into RunStarted's context (trigger).
	Config engine.Config

	mu   sync.Mutex
	runs map[string]*runCtx
}

// runCtx is what the activities of one run share on this worker.
type runCtx struct {
	meta        engine.RunMetadata
	plan        *plan.Plan // selected, ephemeral models inlined
	redact      *engine.Redactor
	fullRefresh bool
	// render renders steps with the run's recorded vars and data interval,
	// as the local runner does.
	render *plan.Renderer
}

// StepInfo is what the workflow knows of a step: enough for the DAG rules
// and the activity options, never its SQL (history stays small).
type StepInfo struct {
	ID        string   `json:"id"`
	DependsOn []string `json:"dependsOn,omitempty"`
	Retries   int      `json:"retries,omitempty"`
	TimeoutMs int64    `json:"timeoutMs,omitempty"`
}

// StartInput is the Start activity's input.
type StartInput struct {
	RunID   string
	Threads int
}

// StartResult is what the Start activity read of the run: its steps and,
// from its log, their statuses (a workflow that takes over a run carries
// on from there).
type StartResult struct {
	Steps     []StepInfo
	Status    []engine.StepStatus
	Logical   []int
	Run       engine.RunStatus
	SignalSeq int64 // the last signal the log shows decided
	// Retry lists steps an accepted RETRY_STEP queued and nobody started,
	// with the logical attempt to start.
	Retry map[string]int
}

func (a *Activities) owner(wfID string) string {
	return fmt.Sprintf("temporal:%s/%s", a.Namespace, wfID)
}

func (a *Activities) ttl() time.Duration {
	if a.LeaseTTL <= 0 {
		return 2 * time.Minute
	}
	return a.LeaseTTL
}

// run loads (once per worker) what the run's activities need.
func (a *Activities) run(ctx context.Context, runID string) (*runCtx, []engine.RunEventRecord, error) {
	a.mu.Lock()
	rc := a.runs[runID]
	a.mu.Unlock()
	if rc != nil {
		return rc, nil, nil
	}
	meta, err := a.Log.GetRun(ctx, runID)
	if err != nil {
		return nil, nil, err
	}
	events, err := a.Log.ListEvents(ctx, runID, 0, 0)
	if err != nil {
		return nil, nil, err
	}
	p, err := a.Plans.RunPlan(ctx, runID)
	if err != nil {
		return nil, nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, nil, err
	}
	if err := run.MatchesRun(meta, p); err != nil {
		return nil, nil, err
	}
	q, err := engine.QueuedRequest(events)
	if err != nil {
		return nil, nil, err
	}
	dialect, _ := a.Warehouse.(plan.Dialect) // nil: plain names
	prep, err := run.Prepare(run.Input{Plan: p, Shape: q, Secrets: a.Secrets, Dialect: dialect})
	if err != nil {
		return nil, nil, err
	}
	if err := prep.CheckContext(); err != nil {
		return nil, nil, err
	}
	rc = &runCtx{meta: meta, plan: prep.Plan, redact: prep.Redact, fullRefresh: q.FullRefresh, render: prep.Render}
	a.mu.Lock()
	if a.runs == nil {
		a.runs = map[string]*runCtx{}
	}
	a.runs[runID] = rc
	a.mu.Unlock()
	return rc, events, nil
}

// Forget drops what the worker cached of a run (its workflow ended).
func (a *Activities) Forget(runID string) {
	a.mu.Lock()
	delete(a.runs, runID)
	a.mu.Unlock()
}

// emitter is a fenced Emitter of the run whose view is what the workflow
// says: the run's status and the states of the steps the batch touches.
func (a *Activities) emitter(ctx context.Context, rc *runCtx, wfID string, run engine.RunStatus, steps map[string]engine.StepState) (*engine.Emitter, engine.Lease, error) {
	lease, err := a.Log.AcquireFencedLease(ctx, rc.meta.RunID, a.owner(wfID), a.ttl())
	if err != nil {
		return nil, lease, err
	}
	em := engine.NewEmitter(a.Log, a.Clock, a.IDs, rc.meta)
	em.SetLease(lease)
	em.SetRunStatus(run)
	for id, st := range steps {
		em.SetStepState(id, st)
	}
	return em, lease, nil
}

// Start reads the run, takes its lease for the workflow and, for a queued
// run, records RunStarted with engineType temporal and the workflow's
// engineRunRef.
func (a *Activities) Start(ctx context.Context, in StartInput) (StartResult, error) {
	info := activity.GetInfo(ctx)
	a.Forget(in.RunID) // a (re)started workflow reads the run afresh
	rc, events, err := a.run(ctx, in.RunID)
	if err != nil {
		return StartResult{}, nonRetryable(err)
	}
	snap := engine.Project(in.RunID, events)
	em, _, err := a.emitter(ctx, rc, info.WorkflowExecution.ID, snap.Status, nil)
	if err != nil {
		return StartResult{}, err
	}
	out := StartResult{Run: snap.Status, Retry: map[string]int{}}
	pos := map[string]int{}
	for i, s := range rc.plan.Steps {
		pos[s.ID] = i
		out.Steps = append(out.Steps, StepInfo{ID: s.ID, DependsOn: s.DependsOn, Retries: s.Retries, TimeoutMs: s.Timeout.Duration.Milliseconds()})
		out.Status = append(out.Status, engine.StepStatusPending)
		out.Logical = append(out.Logical, 1)
	}
	for _, st := range snap.Steps {
		if i, ok := pos[st.StepID]; ok {
			out.Status[i] = st.Status
			out.Logical[i] = max(st.LogicalAttemptID, 1)
		}
	}
	for _, ev := range events {
		if ev.EventType != engine.SignalAccepted && ev.EventType != engine.SignalRejected {
			continue
		}
		out.SignalSeq = max(out.SignalSeq, int64(ev.LogicalAttemptID))
		var sp dag.SignalPayload
		if ev.EventType == engine.SignalAccepted && json.Unmarshal(ev.Payload, &sp) == nil && sp.SignalType == engine.SignalRetryStep {
			if i, ok := pos[sp.StepID]; ok && out.Status[i] == engine.StepStatusFailed && out.Logical[i] < sp.RetryAttempt {
				out.Retry[sp.StepID] = sp.RetryAttempt
			}
		}
	}
	ref := fmt.Sprintf("temporal://%s/%s/%s", a.Namespace, info.WorkflowExecution.ID, info.WorkflowExecution.RunID)
	if snap.Status != engine.StatusQueued && snap.Status != engine.StatusApproved {
		// A run resumed on a new execution of its workflow (the last one
		// failed or was terminated): its providerRunRef names this one.
		if !snap.Status.Terminal() && rc.meta.ProviderRunRef != ref {
			if err := a.Log.SetProviderRunRef(ctx, in.RunID, ref); err != nil {
				return out, err
			}
		}
		return out, nil
	}
	if pg, ok := a.Warehouse.(interface{ Ping(context.Context) error }); ok {
		if err := pg.Ping(ctx); err != nil {
			return out, fmt.Errorf("run %s: the warehouse is unusable: %w", in.RunID, err)
		}
	}
	// Who triggered the run is what its RunQueued says (a schedule, the
	// queue), as the local runner's RunStarted; this worker's own config
	// only for a RunQueued that does not say.
	by, source := a.Config.TriggeredBy, a.Config.TriggerSource
	if rq, err := engine.QueuedRequest(events); err == nil && rq.TriggerSource != "" {
		by, source = rq.TriggeredBy, rq.TriggerSource
	}
	if err := a.Log.SetProviderRunRef(ctx, in.RunID, ref); err != nil {
		return out, err
	}
	if _, err := em.Emit(ctx, engine.Emission{Type: engine.RunStarted, Attempt: 1, Payload: map[string]any{
		"engineRunRef": ref, "engineType": EngineType, "owner": a.owner(info.WorkflowExecution.ID), "threads": in.Threads,
		"context": map[string]any{"tenantId": rc.meta.TenantID, "projectId": rc.meta.ProjectID, "environmentId": rc.meta.EnvironmentID,
			"triggeredBy": by, "triggerSource": source},
	}}); err != nil {
		return out, err
	}
	out.Run = engine.StatusRunning
	return out, nil
}

// StepInput is the Step activity's input.
type StepInput struct {
	RunID   string
	StepID  string
	Logical int
	// Rerun: the step may have started before (the log showed it RUNNING,
	// or a PAUSE interrupted it): the ledger is asked first and no new
	// StepStarted is needed.
	Rerun bool
	// Prior is the step's status before this start (PENDING, or FAILED for
	// a RETRY_STEP), for the Emitter's view.
	Prior engine.StepStatus
	// MaxAttempts is the RetryPolicy's maximum attempts: the last one
	// records StepFailed for a transient error instead of returning it.
	MaxAttempts int
}

// StepOutput is a step's outcome as the workflow needs it.
type StepOutput struct {
	Failed        bool
	Code          string
	EngineAttempt int
}

// heartbeatDetails is what a running step heartbeats: the warehouse query
// tag, which names the step's query in the warehouse's query history.
type heartbeatDetails struct {
	QueryTag string `json:"queryTag"`
}

// Step runs one step: StepStarted (first attempt), the warehouse work
// through the step executor (the ledger makes an activity retry complete
// from the recorded result instead of repeating the effect), and
// StepCompleted or StepFailed. A transient error is returned to Temporal,
// which retries the activity (engineAttemptId = the activity's attempt),
// until the last attempt, which records StepFailed. A cancelled activity
// records nothing: the workflow records what the cancel means.
func (a *Activities) Step(ctx context.Context, in StepInput) (StepOutput, error) {
	info := activity.GetInfo(ctx)
	attempt := int(info.Attempt)
	rc, _, err := a.run(ctx, in.RunID)
	if err != nil {
		return StepOutput{}, nonRetryable(err)
	}
	var s plan.Step
	found := false
	for _, st := range rc.plan.Steps {
		if st.ID == in.StepID {
			s, found = st, true
			break
		}
	}
	if !found {
		return StepOutput{}, nonRetryable(engine.Errorf(engine.CodeInvalidArgument, "run %s has no step %s", in.RunID, in.StepID))
	}
	prior := in.Prior
	if prior == "" {
		prior = engine.StepStatusPending
	}
	view := engine.StepState{Status: prior, LogicalAttemptID: in.Logical}
	if prior == engine.StepStatusFailed {
		view.LogicalAttemptID = in.Logical - 1
	}
	if in.Rerun {
		view = engine.StepState{Status: engine.StepStatusRunning, LogicalAttemptID: in.Logical}
	}
	em, lease, err := a.emitter(ctx, rc, info.WorkflowExecution.ID, engine.StatusRunning, map[string]engine.StepState{s.ID: view})
	if err != nil {
		return StepOutput{}, err
	}
	started := a.Clock.Now()
	if !in.Rerun {
		// On a retried activity the store already holds it and dedupes.
		if _, err := em.Emit(ctx, engine.Emission{Type: engine.StepStarted, Step: s.ID, Attempt: in.Logical, Payload: stepexec.StartedPayload(s)}); err != nil {
			return StepOutput{}, err
		}
	}
	x := &stepexec.Executor{RunID: in.RunID, Plan: rc.plan, Warehouse: a.Warehouse, Secrets: a.Secrets, Redact: rc.redact,
		FullRefresh: rc.fullRefresh, Fence: lease.Fence, MaxRetries: -1, Render: rc.render}
	tag, _ := json.Marshal(map[string]any{"run_id": in.RunID, "step_id": s.ID, "logical_attempt": in.Logical, "engine_attempt": attempt})
	stopHB := make(chan struct{})
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		a.heartbeat(ctx, stopHB, heartbeatDetails{QueryTag: string(tag)})
	}()
	o := x.Run(ctx, ctx, s, in.Logical, attempt, in.Rerun || attempt > 1)
	close(stopHB)
	<-hbDone
	if ctx.Err() != nil {
		// Cancelled (PAUSE, CANCEL) or timed out by Temporal: its SQL was
		// cancelled with ctx; the workflow records the outcome.
		return StepOutput{}, ctx.Err()
	}
	if o.Aborted {
		return StepOutput{}, o.Stop
	}
	if o.Err != nil && o.Err.Retryable && attempt < in.MaxAttempts {
		return StepOutput{}, temporal.NewApplicationError(o.Err.Message, o.Err.Code)
	}
	var attemptStarted time.Time
	if attempt > 1 || in.Rerun {
		attemptStarted = started
	}
	ev := x.Event(s, in.Logical, o, a.Clock.Now().Sub(started), attemptStarted)
	// The view after StepStarted.
	em.SetStepState(s.ID, engine.StepState{Status: engine.StepStatusRunning, LogicalAttemptID: in.Logical})
	if _, err := em.Emit(ctx, ev); err != nil {
		return StepOutput{}, err
	}
	out := StepOutput{Failed: o.Err != nil, EngineAttempt: attempt}
	if o.Err != nil {
		out.Code = o.Err.Code
	}
	return out, nil
}

// heartbeat records d until stop closes or ctx ends; Temporal cancels ctx
// when the activity is cancelled or its heartbeat times out.
func (a *Activities) heartbeat(ctx context.Context, stop <-chan struct{}, d heartbeatDetails) {
	every := a.Heartbeat
	if every <= 0 {
		every = 2 * time.Second
	}
	activity.RecordHeartbeat(ctx, d)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-t.C:
			activity.RecordHeartbeat(ctx, d)
		}
	}
}

// EmitInput is the Emit activity's input: events the workflow decided,
// and the view they are checked against (Layer 1).
type EmitInput struct {
	RunID string
	Run   engine.RunStatus
	Steps map[string]engine.StepState
	Batch []Emission
	// Authorize, when set, is a signal to check against the signals policy
	// first: when the policy refuses it, SignalRejected with the policy's
	// reason is recorded instead of Batch.
	Authorize *engine.Signal
}

// Emission is engine.Emission with its payload encoded, as it travels
// through Temporal.
type Emission struct {
	Type          engine.EventType `json:"type"`
	Step          string           `json:"step,omitempty"`
	Attempt       int              `json:"attempt"`
	EngineAttempt int              `json:"engineAttempt,omitempty"`
	Payload       json.RawMessage  `json:"payload,omitempty"`
}

func encode(ems ...engine.Emission) []Emission {
	out := make([]Emission, len(ems))
	for i, x := range ems {
		out[i] = Emission{Type: x.Type, Step: x.Step, Attempt: x.Attempt, EngineAttempt: x.EngineAttempt, Payload: engine.EncodePayload(x.Payload)}
	}
	return out
}

// EmitOutput says whether the policy refused the signal to authorize.
type EmitOutput struct {
	Refused string
}

// Emit appends the events the workflow decided (skips, signal decisions,
// the run's end) as one fenced batch.
func (a *Activities) Emit(ctx context.Context, in EmitInput) (EmitOutput, error) {
	info := activity.GetInfo(ctx)
	rc, _, err := a.run(ctx, in.RunID)
	if err != nil {
		return EmitOutput{}, nonRetryable(err)
	}
	batch := in.Batch
	var out EmitOutput
	if sg := in.Authorize; sg != nil && a.Signals != nil {
		if ok, why := a.Signals.Allows(sg.RequestedBy, sg.Type, rc.meta.EnvironmentID); !ok {
			out.Refused = why
			batch = encode(dag.Decision(*sg, false, why, 0))
		}
	}
	em, _, err := a.emitter(ctx, rc, info.WorkflowExecution.ID, in.Run, in.Steps)
	if err != nil {
		return out, err
	}
	ems := make([]engine.Emission, len(batch))
	for i, x := range batch {
		ems[i] = engine.Emission{Type: x.Type, Step: x.Step, Attempt: x.Attempt, EngineAttempt: x.EngineAttempt}
		if len(x.Payload) > 0 {
			ems[i].Payload = x.Payload
		}
	}
	if _, err := em.Emit(ctx, ems...); err != nil {
		if engine.CodeOf(err) == engine.CodeInvalidTransition {
			return out, nonRetryable(err)
		}
		return out, err
	}
	return out, nil
}

// nonRetryable marks errors that another attempt cannot fix (a missing
// run, an invalid plan, a refused transition) so Temporal does not retry
// them; store and warehouse outages stay retryable.
func nonRetryable(err error) error {
	if err == nil || engine.IsTransient(err) || engine.CodeOf(err) == engine.CodeStoreUnavailable {
		return err
	}
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		return err
	}
	return temporal.NewNonRetryableApplicationError(err.Error(), string(engine.CodeOf(err)), err)
}
