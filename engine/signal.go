package engine

import (
	"encoding/json"
	"time"
)

// SignalType is an operator's request to a running run.
type SignalType string

const (
	SignalPause     SignalType = "PAUSE"
	SignalResume    SignalType = "RESUME"
	SignalCancel    SignalType = "CANCEL"
	SignalRetryStep SignalType = "RETRY_STEP"
)

// Valid reports whether t is one of the four signal types.
func (t SignalType) Valid() bool {
	switch t {
	case SignalPause, SignalResume, SignalCancel, SignalRetryStep:
		return true
	}
	return false
}

// Signal is stored in the state store so that any process can send it; the
// run's runner consumes signals in Seq order. Seq and CreatedAt are assigned
// by the store; SignalID makes sending idempotent.
type Signal struct {
	SignalID    string     `json:"signalId" db:"signal_id"`
	RunID       string     `json:"runId" db:"run_id"`
	Seq         int64      `json:"seq" db:"signal_seq"`
	Type        SignalType `json:"type" db:"signal_type"`
	StepID      string     `json:"stepId,omitempty" db:"step_id"`
	Reason      string     `json:"reason,omitempty" db:"reason"`
	RequestedBy string     `json:"requestedBy,omitempty" db:"requested_by"`
	CreatedAt   time.Time  `json:"createdAt" db:"created_at"`
}

// Severity of an alert (ExecutionSemantics uses P1/P2).
const (
	SeverityP1 = "P1"
	SeverityP2 = "P2"
)

// Alert is an operational alert. Key makes recording idempotent: recording
// the same key twice stores one row.
type Alert struct {
	Key           string          `json:"key"`
	Code          Code            `json:"code"`
	Severity      string          `json:"severity"`
	RunID         string          `json:"runId,omitempty"`
	TenantID      string          `json:"tenantId,omitempty"`
	ProjectID     string          `json:"projectId,omitempty"`
	EnvironmentID string          `json:"environmentId,omitempty"`
	Message       string          `json:"message"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	CreatedAt     time.Time       `json:"createdAt"`
}
