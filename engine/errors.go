package engine

import (
	"errors"
	"fmt"
)

// Code is a machine-readable error code from the contracts. Callers branch on
// codes with errors.Is against the Err* values below or with CodeOf.
type Code string

// Codes named by RunEvents v2.0.1, ExecutionSemantics v1.1 and the event
// model brief's engine and store changes (specs/PR-1-event-model-brief.md,
// CHANGE 3–5: RUN_ALREADY_EXISTS, CAPABILITIES_NOT_SUPPORTED,
// TARGET_ADAPTER_MISMATCH), plus the few dvtrun adds for its own input checks.
const (
	CodeRunAlreadyExists           Code = "RUN_ALREADY_EXISTS"
	CodeRunNotFound                Code = "RUN_NOT_FOUND"
	CodeInvalidTransition          Code = "INVALID_TRANSITION"
	CodeSchemaValidationFailed     Code = "SCHEMA_VALIDATION_FAILED"
	CodeCapabilitiesNotSupported   Code = "CAPABILITIES_NOT_SUPPORTED"
	CodeTargetAdapterMismatch      Code = "TARGET_ADAPTER_MISMATCH"
	CodePlanInvalid                Code = "PLAN_INVALID"
	CodePlanHashMismatch           Code = "PLAN_HASH_MISMATCH"
	CodeStoreUnavailable           Code = "STORE_UNAVAILABLE"
	CodeStoreCorrupt               Code = "STORE_CORRUPT"
	CodeInvalidArgument            Code = "INVALID_ARGUMENT"
	CodeConfigInvalid              Code = "CONFIG_INVALID"
	CodeStepFailed                 Code = "STEP_FAILED"
	CodeStepTimeout                Code = "STEP_TIMEOUT"
	CodeStepCancelled              Code = "STEP_CANCELLED"
	CodeSecretNotFound             Code = "SECRET_NOT_FOUND"
	CodeLeaseHeld                  Code = "LEASE_HELD"
	CodeRunQueueFull               Code = "RUN_QUEUE_FULL" // backpressure REJECT; Meta retryAfterSeconds
	CodeLeaseLost                  Code = "LEASE_LOST"
	CodeProjectorNonContiguous     Code = "PROJECTOR_NON_CONTIGUOUS_FETCH_DETECTED"
	CodeProjectorLagHigh           Code = "PROJECTOR_LAG_HIGH"
	CodePauseDrainTimeout          Code = "PAUSE_DRAIN_TIMEOUT"
	CodeEventBusDeliveryFailed     Code = "EVENT_BUS_DELIVERY_FAILED"
	CodeWriteLatencyBudgetExceeded Code = "WRITE_LATENCY_BUDGET_EXCEEDED"
	// CodeSignalRejected: the run's runner recorded SignalRejected for a
	// signal the CLI sent (not allowed by the signals policy, or not
	// applicable to the run's state).
	CodeSignalRejected Code = "SIGNAL_REJECTED"
	// CodeArtifactWriteFailed: a run's artifact (run_results.json) could not
	// be written; the run's end is recorded without its reference.
	CodeArtifactWriteFailed Code = "ARTIFACT_WRITE_FAILED"
)

// Error is an error with a contract code and a human sentence. Meta carries
// the machine-readable details a caller may need (for INVALID_TRANSITION: the
// offending event and the states), and is part of what makes a rejection
// deterministic on retry.
type Error struct {
	Code Code
	Msg  string
	Meta map[string]any
	Err  error
}

// Errorf returns an *Error with a formatted message. A %w verb in format is
// honoured: the wrapped error is kept for errors.Is/As.
func Errorf(code Code, format string, args ...any) *Error {
	wrapped := fmt.Errorf(format, args...)
	return &Error{Code: code, Msg: wrapped.Error(), Err: errors.Unwrap(wrapped)}
}

func (e *Error) Error() string {
	if e.Msg == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, engine.ErrRunAlreadyExists) works on any wrapped error.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) {
		return false
	}
	return t.Code == e.Code && t.Msg == ""
}

// Sentinels for errors.Is; they carry only a code.
var (
	ErrRunAlreadyExists         = &Error{Code: CodeRunAlreadyExists}
	ErrRunNotFound              = &Error{Code: CodeRunNotFound}
	ErrInvalidTransition        = &Error{Code: CodeInvalidTransition}
	ErrSchemaValidationFailed   = &Error{Code: CodeSchemaValidationFailed}
	ErrCapabilitiesNotSupported = &Error{Code: CodeCapabilitiesNotSupported}
	ErrTargetAdapterMismatch    = &Error{Code: CodeTargetAdapterMismatch}
	ErrPlanInvalid              = &Error{Code: CodePlanInvalid}
	ErrPlanHashMismatch         = &Error{Code: CodePlanHashMismatch}
	ErrStoreUnavailable         = &Error{Code: CodeStoreUnavailable}
	ErrStoreCorrupt             = &Error{Code: CodeStoreCorrupt}
	ErrInvalidArgument          = &Error{Code: CodeInvalidArgument}
	ErrLeaseHeld                = &Error{Code: CodeLeaseHeld}
	ErrLeaseLost                = &Error{Code: CodeLeaseLost}
)

// CodeOf returns the code of the first *Error in err's chain, or "".
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
