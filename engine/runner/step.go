package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// queryTag is StepRequest.QueryTag: what lets an auditor join the
// warehouse's query history to the run's events.
type queryTag struct {
	RunID          string `json:"run_id"`
	StepID         string `json:"step_id"`
	LogicalAttempt int    `json:"logical_attempt"`
	EngineAttempt  int    `json:"engine_attempt"`
}

// runStep executes step i on the warehouse, retrying transient errors as
// new engine attempts, within the step's timeout. runCtx is the run's
// context, sctx the step's own (cancelled by a CANCEL signal). A rerun
// step (RUNNING in the log) whose logical attempt the warehouse's ledger
// shows committed completes with the recorded result and does not run.
//
// The run stops, leaving the step RUNNING for resume, when the lease is
// lost (the warehouse saw a newer fence, or renewals failed past the TTL)
// or the warehouse stays unavailable.
func (r *execution) runStep(runCtx, sctx context.Context, i, logical, engineAttempt int, rerun bool) outcome {
	s := r.steps[i]
	o := outcome{i: i, engineAttempt: engineAttempt}
	fail := func(code engine.Code, msg string, retryable bool, cause error) outcome {
		msg = r.redact.Redact(msg)
		o.err = &engine.ErrorInfo{Code: string(code), Message: msg, Retryable: retryable}
		e := &engine.Error{Code: code, Msg: msg}
		if cause != nil && r.redact.Redact(cause.Error()) == cause.Error() {
			e.Err = cause // keep the chain only when it cannot leak a secret
		}
		o.progressErr = e
		return o
	}
	if l, ok := r.wh.(engine.Ledger); ok && rerun {
		if e, found, err := l.LookupStep(sctx, r.runID, s.ID, logical); err == nil && found {
			o.res = e.Result
			return o
		} // an error: RunStep checks the ledger again in its transaction
	}
	req := engine.StepRequest{RunID: r.runID, StepID: s.ID, Kind: s.Kind, Relation: s.Relation(), Materialized: materialized(s),
		UniqueKey: s.UniqueKey, IncrementalFilter: s.IncrementalFilter, FullRefresh: r.fullRefresh,
		LogicalAttempt: logical, Fence: r.lease.Fence}
	switch s.Kind {
	case plan.KindSeed:
		// The bytes LoadBundle hashed (and the store keeps), not the file;
		// the path names it in messages (and is read for a plan built
		// without LoadBundle).
		req.SeedPath, req.SeedData = r.p.FilePath(s.Path), r.p.Seeds[s.Path]
	default:
		lookup := r.e.Secrets
		if lookup == nil {
			lookup = func(string) (string, bool) { return "", false }
		}
		sql, params, err := plan.ResolveSecrets(s.SQL, s.Secrets, lookup)
		if err != nil {
			return fail(engine.CodeOf(err), errMessage(err), false, err)
		}
		req.SQL, req.Params = sql, params
		o.sql = sql
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
	maxRetries := r.cfg.Retry.Max
	if s.Retries > 0 {
		maxRetries = s.Retries
	}
	for retries := 0; ; retries++ {
		tag, _ := json.Marshal(queryTag{RunID: r.runID, StepID: s.ID, LogicalAttempt: logical, EngineAttempt: o.engineAttempt})
		req.QueryTag = string(tag)
		req.EngineAttempt = o.engineAttempt
		if !r.leaseValid() {
			return outcome{i: i, aborted: true, stop: r.selfFenced()}
		}
		res, err := r.wh.RunStep(ctx, req)
		o.res = res
		if err == nil && ctx.Err() == nil {
			if s.Kind == plan.KindTest && res.Failures > 0 {
				if req.Severity == plan.SeverityWarn {
					o.warning = fmt.Sprintf("test %s returned %d row(s); its severity is warn", s.ID, res.Failures)
					return o
				}
				return fail(engine.CodeStepFailed, fmt.Sprintf("test %s returned %d failing row(s)", s.ID, res.Failures), false, nil)
			}
			return o
		}
		if stop, out := r.interrupted(runCtx, sctx, ctx, s, fail); stop {
			out.i = i
			return out
		}
		if engine.CodeOf(err) == engine.CodeLeaseLost {
			return outcome{i: i, aborted: true, stop: engine.Errorf(engine.CodeLeaseLost, "%s", r.redact.Redact(errMessage(err)))}
		}
		if !engine.IsTransient(err) || maxRetries < 0 || retries >= maxRetries {
			if engine.CodeOf(err) == engine.CodeStoreUnavailable {
				// The warehouse, not the step, failed: stop the run and keep
				// it resumable rather than fail the step.
				return outcome{i: i, aborted: true, stop: engine.Errorf(engine.CodeStoreUnavailable,
					"run %s stopped, resumable once the warehouse is back: %s", r.runID, r.redact.Redact(errMessage(err)))}
			}
			code := engine.CodeOf(err)
			if code == "" {
				code = engine.CodeStepFailed
			}
			return fail(code, errMessage(err), engine.IsTransient(err), err)
		}
		r.e.report(Progress{Phase: PhaseStepRetry, RunID: r.runID, Index: r.order[i], Total: len(r.steps), Step: s,
			Err: &engine.Error{Code: engine.CodeOf(err), Msg: r.redact.Redact(errMessage(err))}, EngineAttempt: o.engineAttempt + 1, LogicalAttempt: logical})
		if serr := r.sleep(ctx, r.cfg.Retry.Backoff(retries+1, r.rand())); serr != nil {
			if stop, out := r.interrupted(runCtx, sctx, ctx, s, fail); stop {
				out.i = i
				return out
			}
			return fail(engine.CodeStepFailed, errMessage(err), true, err)
		}
		o.engineAttempt++
	}
}

// interrupted classifies a step whose context ended: the run stopped
// (record nothing), the operator cancelled, or the step's timeout passed.
func (r *execution) interrupted(runCtx, sctx, ctx context.Context, s plan.Step, fail func(engine.Code, string, bool, error) outcome) (bool, outcome) {
	switch {
	case ctx.Err() == nil:
		return false, outcome{}
	case runCtx.Err() != nil:
		return true, outcome{aborted: true}
	case sctx.Err() != nil:
		return true, fail(engine.CodeStepCancelled, fmt.Sprintf("step %s was cancelled", s.ID), false, nil)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return true, fail(engine.CodeStepTimeout, fmt.Sprintf("step %s exceeded its timeout of %s", s.ID, s.Timeout.Duration), true, nil)
	}
	return true, fail(engine.CodeStepCancelled, fmt.Sprintf("step %s was interrupted: %v", s.ID, ctx.Err()), false, nil)
}

// errMessage is err's text without the leading code an *Error prints, since
// the code travels separately.
func errMessage(err error) string {
	msg := err.Error()
	if c := engine.CodeOf(err); c != "" {
		msg = strings.TrimPrefix(msg, string(c)+": ")
	}
	return msg
}
