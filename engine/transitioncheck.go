package engine

import "fmt"

// StepState is what an append-time transition check needs to know of a step.
type StepState struct {
	Status           StepStatus
	LogicalAttemptID int
}

// CheckTransitions is Layer 2 of RunEvents §5.3: the append authority applies
// the batch's new events (duplicates already removed), in order, to the run's
// current status and the current states of the steps they touch (a step not
// in steps is PENDING). It returns the states after the batch, or an
// INVALID_TRANSITION error for the first event the transition table does not
// allow. The error depends only on its inputs, so a retried append gets the
// same answer. steps is not modified.
func CheckTransitions(run RunStatus, steps map[string]StepState, events []RunEventWrite) (RunStatus, map[string]StepState, error) {
	out := make(map[string]StepState, len(steps)+len(events))
	for k, v := range steps {
		out[k] = v
	}
	for _, e := range events {
		target, changes := TargetOf(e.EventType)
		if !changes {
			continue
		}
		if e.EventType.StepLevel() {
			st, ok := out[e.StepID]
			if !ok {
				st = StepState{Status: StepStatusPending}
			}
			to, valid := StepTransition(st.Status, e.EventType, run, st.LogicalAttemptID, e.LogicalAttemptID)
			if !valid {
				return run, steps, invalidTransition(e, EntityStep, string(st.Status), target, run, st.LogicalAttemptID)
			}
			st.Status = to
			if e.EventType == StepStarted || e.EventType == StepSkipped {
				st.LogicalAttemptID = e.LogicalAttemptID
			}
			out[e.StepID] = st
			continue
		}
		to, valid := RunTransition(run, e.EventType)
		if !valid {
			return run, steps, invalidTransition(e, EntityRun, string(run), target, run, 0)
		}
		run = to
	}
	return run, out, nil
}

func invalidTransition(e RunEventWrite, entity, prior, attempted string, run RunStatus, attempt int) *Error {
	subject := "run " + e.RunID
	if entity == EntityStep {
		subject = fmt.Sprintf("step %s of run %s (run %s, step at logical attempt %d)", e.StepID, e.RunID, run, attempt)
	}
	return &Error{
		Code: CodeInvalidTransition,
		Msg: fmt.Sprintf("%s (logical attempt %d) cannot move %s from %s to %s; nothing was written",
			e.EventType, e.LogicalAttemptID, subject, prior, attempted),
		Meta: map[string]any{
			"runId":          e.RunID,
			"entity":         entity,
			"stepId":         e.StepID,
			"eventType":      string(e.EventType),
			"idempotencyKey": e.IdempotencyKey,
			"priorState":     prior,
			"attemptedState": attempted,
		},
	}
}

// SkipInvalidTransitions applies the events the transition table allows and
// skips the others, as Policy A does: the state an append authority keeps
// when its Layer 2 check is switched off. steps is not modified.
func SkipInvalidTransitions(run RunStatus, steps map[string]StepState, events []RunEventWrite) (RunStatus, map[string]StepState) {
	out := make(map[string]StepState, len(steps))
	for k, v := range steps {
		out[k] = v
	}
	for _, e := range events {
		if r, st, err := CheckTransitions(run, out, []RunEventWrite{e}); err == nil {
			run, out = r, st
		}
	}
	return run, out
}
