// Package runner is dvtrun's local adapter: it executes a queued run's
// steps on a warehouse and records their events through engine's Emitter.
package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/pulse"
)

// Log is what the runner needs of the state store; store.Store satisfies
// it.
type Log interface {
	engine.EventReader
	engine.AlertRecorder
	engine.EventAppender
	engine.FencedAppender
	GetRun(ctx context.Context, runID string) (engine.RunMetadata, error)
	SetProviderRunRef(ctx context.Context, runID, ref string) error
	AcquireFencedLease(ctx context.Context, runID, owner string, ttl time.Duration) (engine.Lease, error)
	ReleaseLease(ctx context.Context, runID, owner string) error
	// Pulse renews leases and fetches signals for a private pulse
	// (Runner.Pulse nil).
	pulse.Store
}

// Pulse is a process's heartbeat (*pulse.Pulse, started): it renews the
// leases of all the process's runs and fetches their signals in one store
// call per interval. Owner is the owner id of every lease it renews.
type Pulse interface {
	Owner() string
	Join(lease engine.Lease, validUntil time.Time, afterSignal int64) *pulse.Member
}

// Config is the runner's configuration; the CLI fills it from flags and
// the environment. The embedded engine.Config's trigger goes into
// RunStarted's context.
type Config struct {
	engine.Config
	Threads      int           // parallel steps (default 4)
	FailFast     bool          // stop scheduling after the first failure
	Owner        string        // this runner's id, for leases
	LeaseTTL     time.Duration // default 30s
	SignalPoll   time.Duration // lease-deadline and drain checks; without a Runner.Pulse, its private pulse's interval (default 250ms)
	DrainTimeout time.Duration // PAUSE drain limit (default 5m)
	Retry        RetryPolicy
	// WriteBudget is ExecutionSemantics §5's writeLatencyBudgetMs (default
	// 3s): how long an event may wait to be stored. A StepStarted that
	// waited longer goes to the Spool (fail open); a StepCompleted,
	// StepFailed or run event that waited longer stops the run, resumable
	// (never fail open).
	WriteBudget time.Duration
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
	return engine.Backoff(p.Initial, p.Ceiling, n, p.Jitter, r)
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
	if c.WriteBudget <= 0 {
		c.WriteBudget = 3 * time.Second
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
	c.Config = c.Config.WithDefaults()
	return c
}

// Runner is the local adapter's side of a run: Execute, Resume and
// AbortStart. A run is started with engine.Engine's StartRun.
type Runner struct {
	Log     Log
	Clock   engine.Clock
	IDs     engine.IDSource
	Rand    func() float64                                   // uniform in [0,1), for jitter (nil: no jitter)
	Sleep   func(ctx context.Context, d time.Duration) error // waits d or until ctx ends (nil: a timer)
	Secrets plan.SecretLookup
	Observe Observer // nil: no progress reports
	Config  Config
	// Signals decides who may send which signal (engine/config's
	// SignalPolicy); nil: everyone may. The runner is where it is enforced:
	// every signal reaches the run through this check, whoever stored it.
	Signals SignalAuthorizer
	// Artifacts, when set, receives the run's run_results.json when the
	// run ends; its reference goes into the closing event (see
	// ArtifactWriter). nil: no artifact is written.
	Artifacts ArtifactWriter
	// Pulse, when set, is the process's pulse the run joins once it holds
	// the lease (the lease's owner is the pulse's); nil: Execute runs a
	// private pulse for its run.
	Pulse Pulse
	// Spool keeps StepStarted events the store could not take within
	// Config.WriteBudget on local disk until they are appended; nil: a
	// StepStarted never fails open.
	Spool Spool
}

// Spool is a local durable journal of a run's events that are not in the
// state store yet (engine/spool). Put is durable when it returns; Pending
// returns what was put, in put order, after a crash too; Clear forgets a
// run's events once they are all stored.
type Spool interface {
	Put(runID string, events []engine.RunEventWrite) error
	Pending(runID string) ([]engine.RunEventWrite, error)
	Clear(runID string) error
}

// SignalAuthorizer reports whether actor may send a signal of type t to a
// run in environment and, when not, why.
type SignalAuthorizer interface {
	Allows(actor string, t engine.SignalType, environment string) (bool, string)
}

// ArtifactWriter stores an artifact of a run where its reference can
// point (the CLI writes a file and answers a file:// URI with the bytes'
// sha256 and size); the state store keeps the reference, never the bytes
// (ExecutionSemantics §2).
type ArtifactWriter interface {
	WriteArtifact(ctx context.Context, runID, kind, name string, data []byte) (engine.ArtifactRef, error)
}

// AbortStart records that the adapter could not start a queued run:
// RunQueued is followed by RunFailed, and no RunStarted is ever written.
func (e *Runner) AbortStart(ctx context.Context, runID string, cause error) error {
	meta, err := e.Log.GetRun(ctx, runID)
	if err != nil {
		return err
	}
	em := engine.NewEmitter(e.Log, e.Clock, e.IDs, meta)
	em.SetRunStatus(engine.StatusQueued)
	if e.Artifacts != nil {
		em.OnClose(e.runResults(runID, nil, func(ctx context.Context) ([]engine.RunEventRecord, error) {
			return e.Log.ListEvents(ctx, runID, 0, 0)
		}))
	}
	_, err = em.Emit(ctx, engine.Emission{Type: engine.RunFailed, Attempt: 1, Payload: map[string]any{
		"error": engine.ErrorInfo{Code: "ADAPTER_START_FAILED", Message: fmt.Sprintf("the %s adapter could not start: %v", engine.AdapterName, cause)},
	}})
	return err
}

// Observer receives the runner's progress reports; the CLI prints them in
// dbt's console style. Reports arrive from several goroutines (one per
// thread), so an Observer must be safe for concurrent use.
type Observer interface {
	Report(Progress)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Progress)

// Report calls f.
func (f ObserverFunc) Report(p Progress) { f(p) }

// Phase says what a Progress report is about.
type Phase string

const (
	PhaseRunStarted  Phase = "run_started"  // Threads and Total are set
	PhaseStepStarted Phase = "step_started" // Index, Total, Step
	PhaseStepDone    Phase = "step_done"    // + Status, Result, Err, Elapsed
	PhaseStepRetry   Phase = "step_retry"   // a transient error; EngineAttempt is the next attempt
	PhaseRunDone     Phase = "run_done"     // Snapshot
	// PhaseSignal: a signal sent from elsewhere was decided. Signal is set;
	// Rejected says why it was refused ("" when applied); InFlight counts
	// the steps still running (draining, after a PAUSE).
	PhaseSignal Phase = "signal"
	// PhaseDrained: the last step in flight during a PAUSE has finished.
	PhaseDrained  Phase = "drained"
	PhaseArtifact Phase = "artifact" // Artifact written, or Err: it could not be
)

// Progress is one report of a run's progress.
type Progress struct {
	Phase         Phase
	RunID         string
	Threads       int
	Index         int // 1-based position of the step in start order
	Total         int // number of steps in the plan
	Step          plan.Step
	Status        engine.StepStatus // SUCCESS, FAILED or SKIPPED for PhaseStepDone
	Result        engine.StepResult
	Err           error  // the step's error (secrets redacted), PhaseStepDone/PhaseStepRetry
	SkipReason    string // for SKIPPED
	EngineAttempt int
	Elapsed       time.Duration
	Snapshot      *engine.Snapshot // PhaseRunDone
	// Warning is set on a SUCCESS step that succeeded with a warning: a
	// warn-severity test that returned rows (Result.Failures says how many).
	Warning string
	// LogicalAttempt is the step's logical attempt (2 and up after RETRY_STEP).
	LogicalAttempt int
	// Signal, Rejected and InFlight describe a PhaseSignal report.
	Signal   *engine.Signal
	Rejected string
	InFlight int
	// Artifact is the artifact written (PhaseArtifact).
	Artifact *engine.ArtifactRef
}

func (e *Runner) report(p Progress) {
	if e.Observe != nil {
		e.Observe.Report(p)
	}
}

// Execute is the local adapter's side of a queued run: it takes the run's
// lease, emits RunStarted, runs the plan's steps on the warehouse in
// dependency order, and ends the run with RunCompleted, RunFailed or
// RunCancelled. It returns the final snapshot; a run that failed is not an
// error (the snapshot says FAILED), a store that failed is.
//
// Execute on a run that already progressed (after a crash, or by another
// runner whose lease expired) rebuilds the run's state from its log and
// carries on: SUCCESS steps never run again, and steps the log shows RUNNING
// run again as new engine attempts of the same logical attempt. A warehouse
// that cannot start (its optional Ping fails) fails a queued run with
// RunQueued → RunFailed and no RunStarted; that too is reported in the
// snapshot, not as an error.
//
// A run started with a selection (RunQueued's payload.selection) executes
// only the selected steps of p, read back from the log on every start, so
// only they get events and the snapshot counts only them.
//
// Models without a materialization are built as views, dbt's default.
func (e *Runner) Execute(ctx context.Context, runID string, p *plan.Plan, wh engine.Warehouse) (engine.Snapshot, error) {
	return e.execute(ctx, runID, p, wh)
}

// Resume rebuilds a run's state from its log and carries on where it
// stopped: no SUCCESS step runs again and nothing is duplicated in the log.
func (e *Runner) Resume(ctx context.Context, runID string, p *plan.Plan, wh engine.Warehouse) (engine.Snapshot, error) {
	return e.Execute(ctx, runID, p, wh)
}
