package dag

import "github.com/dvtrun/dvtrun/engine"

// SignalPayload is SignalAccepted's and SignalRejected's payload. The
// events are run-level, so the step a RETRY_STEP names travels here.
type SignalPayload struct {
	SignalType  engine.SignalType `json:"signalType"`
	SignalID    string            `json:"signalId"`
	SignalSeq   int64             `json:"signalSeq"`
	StepID      string            `json:"stepId,omitempty"`
	Reason      string            `json:"reason,omitempty"`
	RequestedBy string            `json:"requestedBy,omitempty"`
	// RetryAttempt is the logical attempt an accepted RETRY_STEP starts, so
	// a runner that crashed before starting it finds it in the log.
	RetryAttempt int `json:"retryAttempt,omitempty"`
}

// Decision is the event recording whether signal sg was accepted. Each
// signal decision, and the run event it causes, carries the signal's seq as
// logicalAttemptId: the idempotency key of run-level events has no other
// field that tells two PAUSEs apart, and a signal handled again after a
// crash dedupes.
func Decision(sg engine.Signal, accepted bool, reason string, retryAttempt int) engine.Emission {
	t := engine.SignalAccepted
	if !accepted {
		t = engine.SignalRejected
	}
	if reason == "" {
		reason = sg.Reason
	}
	return engine.Emission{Type: t, Attempt: int(sg.Seq), Payload: SignalPayload{
		SignalType: sg.Type, SignalID: sg.SignalID, SignalSeq: sg.Seq, StepID: sg.StepID,
		Reason: reason, RequestedBy: sg.RequestedBy, RetryAttempt: retryAttempt,
	}}
}

// SignalEvent is the run event (RunPaused, RunResumed, RunCancelled) an
// accepted signal sg causes.
func SignalEvent(sg engine.Signal, t engine.EventType) engine.Emission {
	return engine.Emission{Type: t, Attempt: int(sg.Seq), Payload: map[string]any{"signalId": sg.SignalID, "reason": sg.Reason, "requestedBy": sg.RequestedBy}}
}
