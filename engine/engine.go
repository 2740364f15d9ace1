package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// AdapterName is the name of dvtrun's own adapter: the local runner.
const AdapterName = "local"

// EventLog is what the engine needs of the state store; store.Store
// satisfies it.
type EventLog interface {
	EventReader
	AlertRecorder
	BootstrapRun(ctx context.Context, meta RunMetadata, first []RunEventWrite) (AppendResult, error)
	AppendAndEnqueue(ctx context.Context, runID string, events []RunEventWrite) (AppendResult, error)
	ReserveEventIDs(ctx context.Context, runID string, candidates map[string]string) (map[string]string, error)
	GetRun(ctx context.Context, runID string) (RunMetadata, error)
	SetProviderRunRef(ctx context.Context, runID, ref string) error
	SendSignal(ctx context.Context, s Signal) (Signal, error)
	ListSignals(ctx context.Context, runID string, afterSeq int64) ([]Signal, error)
	AcquireLease(ctx context.Context, runID, owner string, ttl time.Duration) error
	ReleaseLease(ctx context.Context, runID, owner string) error
}

// Config is the engine's configuration; the CLI fills it from flags and
// the environment.
type Config struct {
	TenantID, ProjectID, EnvironmentID string
	Threads                            int           // parallel steps (default 4)
	FailFast                           bool          // stop scheduling after the first failure
	Owner                              string        // this runner's id, for leases
	LeaseTTL                           time.Duration // default 30s
	SignalPoll                         time.Duration // default 250ms
	DrainTimeout                       time.Duration // PAUSE drain limit (default 5m)
	Retry                              RetryPolicy
	TriggeredBy, TriggerSource         string
}

// RetryPolicy governs transient-error retries of a step (new engine
// attempts of the same logical attempt).
type RetryPolicy struct {
	Max     int           // retries after the first attempt (default 3; negative: none)
	Initial time.Duration // first backoff (default 200ms)
	Ceiling time.Duration // largest backoff (default 5s)
	Jitter  float64       // ± fraction of each backoff (default 0.2)
}

// Backoff is the wait before engine attempt n+1 (n >= 1), exponential with
// jitter; r is a uniform draw in [0, 1).
func (p RetryPolicy) Backoff(n int, r float64) time.Duration {
	d := p.Initial << (n - 1)
	if d > p.Ceiling || d <= 0 {
		d = p.Ceiling
	}
	return time.Duration(float64(d) * (1 + p.Jitter*(2*r-1)))
}

func (c Config) withDefaults() Config {
	if c.Threads <= 0 {
		c.Threads = 4
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 30 * time.Second
	}
	if c.SignalPoll <= 0 {
		c.SignalPoll = 250 * time.Millisecond
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 5 * time.Minute
	}
	if c.Retry.Max == 0 {
		c.Retry.Max = 3
	}
	if c.Retry.Initial <= 0 {
		c.Retry.Initial = 200 * time.Millisecond
	}
	if c.Retry.Ceiling <= 0 {
		c.Retry.Ceiling = 5 * time.Second
	}
	if c.Retry.Jitter == 0 {
		c.Retry.Jitter = 0.2
	}
	if c.TriggerSource == "" {
		c.TriggerSource = "manual"
	}
	return c
}

// Engine is dvtrun's workflow engine with its local adapter. Its four verbs
// are StartRun, CancelRun, GetRunStatus and Signal; Execute and Resume are
// the adapter's side of a run.
type Engine struct {
	Log     EventLog
	Clock   Clock
	IDs     IDSource
	Rand    func() float64                                   // uniform in [0,1), for jitter (nil: no jitter)
	Sleep   func(ctx context.Context, d time.Duration) error // waits d or until ctx ends (nil: a timer)
	Secrets SecretLookup
	Observe Observer // nil: no progress reports
	Config  Config
}

// StartRequest asks for a run of a plan.
type StartRequest struct {
	Plan         *Plan
	Ref          PlanRef
	PlanBytes    []byte // when set, checked against Ref.SHA256
	RunRequestID string
}

// StartRun validates the plan and its PlanRef, checks that this adapter can
// run it, and bootstraps the run with RunQueued alone: RunStarted is the
// adapter's (Execute's) to emit. Nothing is written when a check fails.
func (e *Engine) StartRun(ctx context.Context, req StartRequest) (string, error) {
	cfg := e.Config.withDefaults()
	p := req.Plan
	if p == nil {
		return "", Errorf(CodeInvalidArgument, "no plan")
	}
	if req.PlanBytes != nil {
		if err := CheckPlanRef(req.Ref, req.PlanBytes); err != nil {
			return "", err
		}
	}
	if req.Ref.PlanID != "" && (req.Ref.PlanID != p.PlanID || req.Ref.PlanVersion != p.PlanVersion) {
		return "", Errorf(CodePlanHashMismatch, "PlanRef names %s@%s but the plan is %s@%s", req.Ref.PlanID, req.Ref.PlanVersion, p.PlanID, p.PlanVersion)
	}
	if err := p.Validate(); err != nil {
		return "", err
	}
	if n := len(p.Metadata.RequiresCapabilities); n > 0 {
		return "", Errorf(CodeCapabilitiesNotSupported, "plan %s requires capabilities %v; the %s adapter evaluates none", p.PlanID, p.Metadata.RequiresCapabilities, AdapterName)
	}
	if t := p.Metadata.TargetAdapter; t != "" && t != "any" && t != AdapterName {
		return "", Errorf(CodeTargetAdapterMismatch, "plan %s targets adapter %q; this is the %q adapter", p.PlanID, t, AdapterName)
	}
	runID := e.IDs.NewID()
	meta := RunMetadata{
		RunID: runID, TenantID: cfg.TenantID, ProjectID: cfg.ProjectID, EnvironmentID: cfg.EnvironmentID,
		PlanID: p.PlanID, PlanVersion: p.PlanVersion, PlanSHA256: req.Ref.SHA256, TargetAdapter: AdapterName,
		RunRequestID: req.RunRequestID,
	}
	em := newEmitter(e, meta)
	queued, err := em.build(RunQueued, "", 1, 1, map[string]any{
		"planRef": req.Ref, "triggeredBy": cfg.TriggeredBy, "triggerSource": cfg.TriggerSource,
	})
	if err != nil {
		return "", err
	}
	if err := em.reserve(ctx, []RunEventWrite{queued}); err != nil {
		return "", err
	}
	queued.EventID = em.ids[queued.IdempotencyKey]
	if _, err := e.Log.BootstrapRun(ctx, meta, []RunEventWrite{queued}); err != nil {
		return "", err
	}
	return runID, nil
}

// AbortStart records that the adapter could not start a queued run:
// RunQueued is followed by RunFailed, and no RunStarted is ever written.
func (e *Engine) AbortStart(ctx context.Context, runID string, cause error) error {
	meta, err := e.Log.GetRun(ctx, runID)
	if err != nil {
		return err
	}
	em := newEmitter(e, meta)
	em.run = StatusQueued
	_, err = em.emit(ctx, emission{typ: RunFailed, attempt: 1, payload: map[string]any{
		"error": ErrorInfo{Code: "ADAPTER_START_FAILED", Message: fmt.Sprintf("the %s adapter could not start: %v", AdapterName, cause)},
	}})
	return err
}

// GetRunStatus projects the run's snapshot from its log, recording any
// INVALID_TRANSITION alerts once.
func (e *Engine) GetRunStatus(ctx context.Context, runID string) (Snapshot, error) {
	if _, err := e.Log.GetRun(ctx, runID); err != nil {
		return Snapshot{}, err
	}
	p := Projector{Events: e.Log, Alerts: e.Log, Clock: e.Clock}
	return p.Load(ctx, runID)
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

func mustJSON(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`{"marshalError":` + fmt.Sprintf("%q", err.Error()) + `}`)
	}
	return b
}
