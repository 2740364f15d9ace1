package engine

import (
	"context"
	"time"
)

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
)

// Progress is one report of a run's progress.
type Progress struct {
	Phase         Phase
	RunID         string
	Threads       int
	Index         int // 1-based position of the step in start order
	Total         int // number of steps in the plan
	Step          PlanStep
	Status        StepStatus // SUCCESS, FAILED or SKIPPED for PhaseStepDone
	Result        StepResult
	Err           error  // the step's error (secrets redacted), PhaseStepDone/PhaseStepRetry
	SkipReason    string // for SKIPPED
	EngineAttempt int
	Elapsed       time.Duration
	Snapshot      *Snapshot // PhaseRunDone
	// Warning is set on a SUCCESS step that succeeded with a warning: a
	// warn-severity test that returned rows (Result.Failures says how many).
	Warning string
	// LogicalAttempt is the step's logical attempt (2 and up after RETRY_STEP).
	LogicalAttempt int
}

func (e *Engine) report(p Progress) {
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
// Models without a materialization are built as views, dbt's default.
func (e *Engine) Execute(ctx context.Context, runID string, p *Plan, wh Warehouse) (Snapshot, error) {
	return e.execute(ctx, runID, p, wh)
}

// Resume rebuilds a run's state from its log and carries on where it
// stopped: no SUCCESS step runs again and nothing is duplicated in the log.
func (e *Engine) Resume(ctx context.Context, runID string, p *Plan, wh Warehouse) (Snapshot, error) {
	return e.Execute(ctx, runID, p, wh)
}
