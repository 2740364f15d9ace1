package engine

import (
	"context"
	"encoding/json"
	"fmt"
)

// AdapterName is the name of dvtrun's own adapter: the local runner.
const AdapterName = "local"

// EventLog is what the engine's verbs need of the state store; store.Store
// satisfies it.
type EventLog interface {
	EventReader
	AlertRecorder
	EventAppender
	BootstrapRun(ctx context.Context, meta RunMetadata, first []RunEventWrite) (AppendResult, error)
	GetRun(ctx context.Context, runID string) (RunMetadata, error)
	SendSignal(ctx context.Context, s Signal) (Signal, error)
}

// Config is the engine's configuration: the run's tenancy and trigger. The
// CLI fills it from flags and the environment; the runner's own settings
// are in engine/runner.
type Config struct {
	TenantID, ProjectID, EnvironmentID string
	TriggeredBy, TriggerSource         string
}

// WithDefaults returns c with its unset fields defaulted.
func (c Config) WithDefaults() Config {
	if c.TriggerSource == "" {
		c.TriggerSource = "manual"
	}
	return c
}

// Engine is dvtrun's workflow engine. Its four verbs are StartRun,
// CancelRun, GetRunStatus and Signal; the local adapter's side of a run
// (Execute, Resume) is engine/runner's.
type Engine struct {
	Log    EventLog
	Clock  Clock
	IDs    IDSource
	Config Config
}

// StartPlan is what StartRun needs of the plan it starts (engine/plan's
// *plan.Plan): its identity, and the checks made before anything is written.
type StartPlan interface {
	// Identity is the plan's id and version.
	Identity() (planID, planVersion string)
	// CheckStart validates the plan, refuses one the local adapter cannot
	// run, and checks that sel (nil: the whole plan) names steps it has.
	CheckStart(sel *Selection) error
}

// StartRequest asks for a run of a plan.
type StartRequest struct {
	Plan         StartPlan
	Ref          PlanRef // from LoadBundle: the bundle's sha256 and files
	RunRequestID string
	// Selection, when set, limits the run to Selection.Steps (recorded in
	// RunQueued; the runner executes only those). ParentRunID is the run a
	// `dvtrun retry` retries (recorded in RunQueued as parentRunId).
	Selection   *Selection
	ParentRunID string
	// FullRefresh rebuilds incremental models from their full select
	// (dvtrun run --full-refresh); recorded in RunQueued as fullRefresh.
	FullRefresh bool
	// Target, Vars and DataInterval are the run's context, recorded in
	// RunQueued (RunQueuedRequest has their meaning).
	Target       string
	Vars         map[string]any
	DataInterval *DataInterval
	// RunID is the run's id when the caller decided it beforehand (a queue
	// worker records it with its claim first, so a crash cannot leave an
	// orphan run); "" draws a new one.
	RunID string
}

// StartRun validates the plan and its PlanRef, checks that this adapter can
// run it, and bootstraps the run with RunQueued alone: RunStarted is the
// adapter's (Execute's) to emit. Nothing is written when a check fails.
func (e *Engine) StartRun(ctx context.Context, req StartRequest) (string, error) {
	cfg := e.Config.WithDefaults()
	p := req.Plan
	if p == nil {
		return "", Errorf(CodeInvalidArgument, "no plan")
	}
	planID, planVersion := p.Identity()
	if req.Ref.PlanID != "" && (req.Ref.PlanID != planID || req.Ref.PlanVersion != planVersion) {
		return "", Errorf(CodePlanHashMismatch, "PlanRef names %s@%s but the plan is %s@%s", req.Ref.PlanID, req.Ref.PlanVersion, planID, planVersion)
	}
	if sel := req.Selection; sel != nil && len(sel.Steps) == 0 {
		return "", Errorf(CodeInvalidArgument, "the selection of plan %s has no steps", planID)
	}
	if err := p.CheckStart(req.Selection); err != nil {
		return "", err
	}
	runID := req.RunID
	if runID == "" {
		runID = e.IDs.NewID()
	}
	meta := RunMetadata{
		RunID: runID, TenantID: cfg.TenantID, ProjectID: cfg.ProjectID, EnvironmentID: cfg.EnvironmentID,
		PlanID: planID, PlanVersion: planVersion, PlanSHA256: req.Ref.SHA256, TargetAdapter: AdapterName,
		RunRequestID: req.RunRequestID,
	}
	em := NewEmitter(e.Log, e.Clock, e.IDs, meta)
	// The payload is what QueuedRequest reads back: one type for both.
	payload := RunQueuedRequest{
		PlanRef: req.Ref, Selection: req.Selection, ParentRunID: req.ParentRunID, FullRefresh: req.FullRefresh,
		TriggeredBy: cfg.TriggeredBy, TriggerSource: cfg.TriggerSource,
		Target: req.Target, Vars: req.Vars, DataInterval: req.DataInterval,
	}
	queued, err := em.build(RunQueued, "", 1, 1, payload)
	if err != nil {
		return "", err
	}
	// No reservation first: BootstrapRun binds the eventId in the registry
	// in its own transaction (keeping one reserved before), so a run starts
	// in one store call.
	queued.EventID = e.IDs.NewID()
	if _, err := e.Log.BootstrapRun(ctx, meta, []RunEventWrite{queued}); err != nil {
		return "", err
	}
	return runID, nil
}

// GetRunStatus projects the run's snapshot from its log, recording any
// INVALID_TRANSITION alerts once.
func (e *Engine) GetRunStatus(ctx context.Context, runID string) (Snapshot, error) {
	if _, err := e.Log.GetRun(ctx, runID); err != nil {
		return Snapshot{}, err
	}
	events, err := e.Log.ListEvents(ctx, runID, 0, 0)
	if err != nil {
		return Snapshot{}, err
	}
	snap := Project(runID, events)
	return snap, RecordAlerts(ctx, e.Log, snap.InvalidTransitionAlerts())
}

// Signal stores a signal for the run's runner, wherever it runs.
func (e *Engine) Signal(ctx context.Context, runID string, t SignalType, stepID, reason string) (Signal, error) {
	if !t.Valid() {
		return Signal{}, Errorf(CodeInvalidArgument, "unknown signal %q (want PAUSE, RESUME, CANCEL or RETRY_STEP)", t)
	}
	if t == SignalRetryStep && stepID == "" {
		return Signal{}, Errorf(CodeInvalidArgument, "RETRY_STEP needs the step to retry")
	}
	return e.Log.SendSignal(ctx, Signal{SignalID: e.IDs.NewID(), RunID: runID, Type: t, StepID: stepID, Reason: reason, RequestedBy: e.Config.TriggeredBy})
}

// CancelRun asks the run's runner to cancel it.
func (e *Engine) CancelRun(ctx context.Context, runID, reason string) error {
	_, err := e.Signal(ctx, runID, SignalCancel, "", reason)
	return err
}

// EncodePayload encodes an event payload. A value that cannot be encoded
// becomes {"marshalError": ...} so that the event is still written.
func EncodePayload(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`{"marshalError":` + fmt.Sprintf("%q", err.Error()) + `}`)
	}
	return b
}
