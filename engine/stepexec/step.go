// Package stepexec executes one step of a run: it renders the step's SQL
// with its secrets, runs it on the warehouse (whose step ledger makes a
// rerun of a committed attempt complete from the recorded result), retries
// transient errors, redacts what it reports, and builds the step's events.
// It is called from the local runner's goroutines and from Temporal
// activities alike.
package stepexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// Executor runs the steps of one run.
type Executor struct {
	RunID     string
	Plan      *plan.Plan
	Warehouse engine.Warehouse
	Secrets   plan.SecretLookup // nil: no secret resolves
	// Render renders a step's SQL and incremental filter with the run's
	// recorded context (vars, data interval, target relations, secrets);
	// nil: secrets only, as a plan without templates needs.
	Render      *plan.Renderer
	Redact      *engine.Redactor // see Redactor
	FullRefresh bool             // RunQueued's fullRefresh
	Fence       int64            // the run's lease fence, checked by the warehouse
	// MaxRetries is how many transient errors are retried in process
	// (new engine attempts); a step's own retries win; negative: none.
	MaxRetries int
	// Backoff is the wait before engine attempt n+1 (n >= 1).
	Backoff func(n int) time.Duration
	// Sleep waits d or until ctx ends (nil: a timer).
	Sleep func(ctx context.Context, d time.Duration) error
	// LeaseValid reports whether the run's lease is still surely held (nil:
	// always); when it is not, SelfFenced is the error the run stops with.
	LeaseValid func() bool
	SelfFenced func() error
	// OnRetry is told of a transient error about to be retried (nil: not).
	OnRetry func(s plan.Step, err error, nextEngineAttempt, logical int)
}

// Outcome is the result of one step's execution.
type Outcome struct {
	Res           engine.StepResult
	Err           *engine.ErrorInfo // nil: success
	ProgressErr   error             // Err as an error, secrets redacted
	Warning       string
	EngineAttempt int
	SQL           string // the step's SQL as sent to the warehouse (secrets resolved)
	Aborted       bool   // the run itself stopped (crash, store failure, lease lost): record nothing
	// Stop, on an aborted outcome, is why the whole run must stop now and
	// stay resumable: the lease is lost (LEASE_LOST) or the warehouse is
	// unavailable (STORE_UNAVAILABLE). The step stays RUNNING in the log.
	Stop error
}

// queryTag is StepRequest.QueryTag: what lets an auditor join the
// warehouse's query history to the run's events.
type queryTag struct {
	RunID          string `json:"run_id"`
	StepID         string `json:"step_id"`
	LogicalAttempt int    `json:"logical_attempt"`
	EngineAttempt  int    `json:"engine_attempt"`
}

// Run executes step s on the warehouse, retrying transient errors as
// new engine attempts, within the step's timeout. runCtx is the run's
// context, sctx the step's own (cancelled by a CANCEL signal). A rerun
// step (RUNNING in the log) whose logical attempt the warehouse's ledger
// shows committed completes with the recorded result and does not run.
//
// The run stops, leaving the step RUNNING for resume, when the lease is
// lost (the warehouse saw a newer fence, or renewals failed past the TTL)
// or the warehouse stays unavailable.
func (r *Executor) Run(runCtx, sctx context.Context, s plan.Step, logical, engineAttempt int, rerun bool) Outcome {
	o := Outcome{EngineAttempt: engineAttempt}
	fail := func(code engine.Code, msg string, retryable bool, cause error) Outcome {
		msg = r.Redact.Redact(msg)
		o.Err = &engine.ErrorInfo{Code: string(code), Message: msg, Retryable: retryable}
		e := &engine.Error{Code: code, Msg: msg}
		if cause != nil && r.Redact.Redact(cause.Error()) == cause.Error() {
			e.Err = cause // keep the chain only when it cannot leak a secret
		}
		o.ProgressErr = e
		return o
	}
	if l, ok := r.Warehouse.(engine.Ledger); ok && rerun {
		if e, found, err := l.LookupStep(sctx, r.RunID, s.ID, logical); err == nil && found {
			o.Res = e.Result
			return o
		} // an error: RunStep checks the ledger again in its transaction
	}
	req := engine.StepRequest{RunID: r.RunID, StepID: s.ID, Kind: s.Kind, Relation: s.Relation(), Materialized: Materialized(s),
		UniqueKey: s.UniqueKey, IncrementalFilter: s.IncrementalFilter, FullRefresh: r.FullRefresh,
		LogicalAttempt: logical, Fence: r.Fence}
	switch s.Kind {
	case plan.KindSeed:
		// The bytes LoadBundle hashed (and the store keeps), not the file;
		// the path names it in messages (and is read for a plan built
		// without LoadBundle).
		req.SeedPath, req.SeedData = r.Plan.FilePath(s.Path), r.Plan.Seeds[s.Path]
	default:
		render := r.Render
		if render == nil {
			lookup := r.Secrets
			if lookup == nil {
				lookup = func(string) (string, bool) { return "", false }
			}
			render = plan.NewRenderer(r.Plan, plan.Context{Secrets: lookup})
		}
		sql, params, err := render.SQL(s)
		if err != nil {
			return fail(engine.CodeOf(err), ErrMessage(err), false, err)
		}
		if req.IncrementalFilter, err = render.Filter(s); err != nil {
			return fail(engine.CodeOf(err), ErrMessage(err), false, err)
		}
		req.SQL, req.Params = sql, params
		o.SQL = sql
	}
	if s.Kind == plan.KindTest {
		req.Severity = s.Severity
		if req.Severity == "" {
			req.Severity = plan.SeverityError
		}
	}
	ctx := sctx
	if s.Timeout.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(sctx, s.Timeout.Duration)
		defer cancel()
	}
	maxRetries := r.MaxRetries
	if s.Retries > 0 {
		maxRetries = s.Retries
	}
	for retries := 0; ; retries++ {
		tag, _ := json.Marshal(queryTag{RunID: r.RunID, StepID: s.ID, LogicalAttempt: logical, EngineAttempt: o.EngineAttempt})
		req.QueryTag = string(tag)
		req.EngineAttempt = o.EngineAttempt
		if r.LeaseValid != nil && !r.LeaseValid() {
			return Outcome{Aborted: true, Stop: r.SelfFenced()}
		}
		res, err := r.Warehouse.RunStep(ctx, req)
		o.Res = res
		if err == nil && ctx.Err() == nil {
			if s.Kind == plan.KindTest && res.Failures > 0 {
				if req.Severity == plan.SeverityWarn {
					o.Warning = fmt.Sprintf("test %s returned %d row(s); its severity is warn", s.ID, res.Failures)
					return o
				}
				return fail(engine.CodeStepFailed, fmt.Sprintf("test %s returned %d failing row(s)", s.ID, res.Failures), false, nil)
			}
			return o
		}
		if stop, out := r.interrupted(runCtx, sctx, ctx, s, fail); stop {
			return out
		}
		if engine.CodeOf(err) == engine.CodeLeaseLost {
			return Outcome{Aborted: true, Stop: engine.Errorf(engine.CodeLeaseLost, "%s", r.Redact.Redact(ErrMessage(err)))}
		}
		if !engine.IsTransient(err) || maxRetries < 0 || retries >= maxRetries {
			if engine.CodeOf(err) == engine.CodeStoreUnavailable {
				// The warehouse, not the step, failed: stop the run and keep
				// it resumable rather than fail the step.
				return Outcome{Aborted: true, Stop: engine.Errorf(engine.CodeStoreUnavailable,
					"run %s stopped, resumable once the warehouse is back: %s", r.RunID, r.Redact.Redact(ErrMessage(err)))}
			}
			code := engine.CodeOf(err)
			if code == "" {
				code = engine.CodeStepFailed
			}
			return fail(code, ErrMessage(err), engine.IsTransient(err), err)
		}
		if r.OnRetry != nil {
			r.OnRetry(s, &engine.Error{Code: engine.CodeOf(err), Msg: r.Redact.Redact(ErrMessage(err))}, o.EngineAttempt+1, logical)
		}
		if serr := r.sleep(ctx, r.Backoff(retries+1)); serr != nil {
			if stop, out := r.interrupted(runCtx, sctx, ctx, s, fail); stop {
				return out
			}
			return fail(engine.CodeStepFailed, ErrMessage(err), true, err)
		}
		o.EngineAttempt++
	}
}

// interrupted classifies a step whose context ended: the run stopped
// (record nothing), the operator cancelled, or the step's timeout passed.
func (r *Executor) interrupted(runCtx, sctx, ctx context.Context, s plan.Step, fail func(engine.Code, string, bool, error) Outcome) (bool, Outcome) {
	switch {
	case ctx.Err() == nil:
		return false, Outcome{}
	case runCtx.Err() != nil:
		return true, Outcome{Aborted: true}
	case sctx.Err() != nil:
		return true, fail(engine.CodeStepCancelled, fmt.Sprintf("step %s was cancelled", s.ID), false, nil)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return true, fail(engine.CodeStepTimeout, fmt.Sprintf("step %s exceeded its timeout of %s", s.ID, s.Timeout.Duration), true, nil)
	}
	return true, fail(engine.CodeStepCancelled, fmt.Sprintf("step %s was interrupted: %v", s.ID, ctx.Err()), false, nil)
}

// ErrMessage is err's text without the leading code an *Error prints, since
// the code travels separately.
func ErrMessage(err error) string {
	msg := err.Error()
	if c := engine.CodeOf(err); c != "" {
		msg = strings.TrimPrefix(msg, string(c)+": ")
	}
	return msg
}

func (r *Executor) sleep(ctx context.Context, d time.Duration) error {
	if r.Sleep != nil {
		return r.Sleep(ctx, d)
	}
	return engine.Sleep(ctx, d)
}

// StartedPayload is StepStarted's payload.
func StartedPayload(s plan.Step) map[string]any {
	m := map[string]any{"kind": s.Kind}
	if s.Kind == plan.KindSeed || s.Kind == plan.KindModel {
		m["relation"] = s.Relation()
	}
	if s.Kind == plan.KindModel {
		m["materialized"] = Materialized(s)
	}
	return m
}

// Materialized is a model's materialization; models without one are views,
// dbt's default.
func Materialized(s plan.Step) string {
	if s.Kind != plan.KindModel {
		return ""
	}
	if s.Materialized == "" {
		return plan.MaterializedView // dbt's default
	}
	return s.Materialized
}

// Payload is StepCompleted's and StepFailed's payload.
type Payload struct {
	engine.StepResult
	DurationMs int64             `json:"durationMs"`
	Warning    string            `json:"warning,omitempty"`
	Error      *engine.ErrorInfo `json:"error,omitempty"`
	Ledger     *LedgerRef        `json:"ledger,omitempty"`
	// SQL is the step's SQL as rendered and sent to the warehouse, which
	// wraps it in the statement its kind needs (CREATE … AS, a count for a
	// test); the payload is redacted, so a secret spliced in never shows.
	SQL string `json:"sql,omitempty"`
	// AttemptStartedAt is when the engine attempt that produced this
	// outcome started, when that is not the logical attempt's StepStarted
	// (engine.TimeFormat; see engine's reducer).
	AttemptStartedAt string `json:"attemptStartedAt,omitempty"`
}

// LedgerRef says, in a StepCompleted, that the step's work had committed
// before (found in the warehouse's step ledger) and was not run again.
type LedgerRef struct {
	EngineAttempt int       `json:"engineAttempt"`
	Fence         int64     `json:"fence"`
	CommittedAt   time.Time `json:"committedAt"`
}

func ledgerOf(res engine.StepResult) *LedgerRef {
	if res.Ledger == nil {
		return nil
	}
	return &LedgerRef{EngineAttempt: res.Ledger.EngineAttempt, Fence: res.Ledger.Fence, CommittedAt: res.Ledger.CommittedAt.UTC()}
}

// Event is the step's closing event for outcome o at logical attempt
// logical: StepCompleted or StepFailed, its payload redacted of every
// secret the run resolves. attemptStarted, when not zero, is when this
// engine attempt started, for a step whose StepStarted an earlier runner
// wrote (a ledger hit keeps the StepStarted's: it did its work then).
func (r *Executor) Event(s plan.Step, logical int, o Outcome, elapsed time.Duration, attemptStarted time.Time) engine.Emission {
	pl := Payload{StepResult: o.Res, DurationMs: elapsed.Milliseconds(), Warning: o.Warning, Error: o.Err, Ledger: ledgerOf(o.Res), SQL: o.SQL}
	if !attemptStarted.IsZero() && o.Res.Ledger == nil {
		pl.AttemptStartedAt = attemptStarted.UTC().Format(engine.TimeFormat)
	}
	t := engine.StepCompleted
	if o.Err != nil {
		t = engine.StepFailed
	}
	return engine.Emission{Type: t, Step: s.ID, Attempt: logical, EngineAttempt: o.EngineAttempt, Payload: r.Redact.RedactJSON(engine.EncodePayload(pl))}
}
