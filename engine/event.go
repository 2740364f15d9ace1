package engine

import (
	"encoding/json"
	"time"
)

// EventType names a lifecycle event. Values outside the known set are valid
// (RunEvents §1.3): they are stored and projected as opaque.
type EventType string

// The known event types (DESIGN.md; RunEvents §1.2 plus RunApproved and the
// signal decisions of ExecutionSemantics §1.2).
const (
	RunQueued      EventType = "RunQueued"
	RunApproved    EventType = "RunApproved"
	RunStarted     EventType = "RunStarted"
	RunPaused      EventType = "RunPaused"
	RunResumed     EventType = "RunResumed"
	RunCompleted   EventType = "RunCompleted"
	RunFailed      EventType = "RunFailed"
	RunCancelled   EventType = "RunCancelled"
	StepStarted    EventType = "StepStarted"
	StepCompleted  EventType = "StepCompleted"
	StepFailed     EventType = "StepFailed"
	StepSkipped    EventType = "StepSkipped"
	SignalAccepted EventType = "SignalAccepted"
	SignalRejected EventType = "SignalRejected"
)

// KnownEventTypes lists every known type, run-level first.
var KnownEventTypes = []EventType{
	RunQueued, RunApproved, RunStarted, RunPaused, RunResumed, RunCompleted,
	RunFailed, RunCancelled, StepStarted, StepCompleted, StepFailed, StepSkipped,
	SignalAccepted, SignalRejected,
}

// Known reports whether t is one of KnownEventTypes.
func (t EventType) Known() bool {
	for _, k := range KnownEventTypes {
		if k == t {
			return true
		}
	}
	return false
}

// StepLevel reports whether events of type t must carry a stepId (RunEvents
// §2.2). Every other known type is run-level and must not carry one; unknown
// types may do either.
func (t EventType) StepLevel() bool {
	switch t {
	case StepStarted, StepCompleted, StepFailed, StepSkipped:
		return true
	}
	return false
}

// RunEventWrite is an event as a producer writes it (RunEvents §4).
// Timestamps are UTC; Payload, when present, is a JSON object.
type RunEventWrite struct {
	EventID          string          `json:"eventId"`
	EventType        EventType       `json:"eventType"`
	EmittedAt        time.Time       `json:"emittedAt"`
	RunID            string          `json:"runId"`
	TenantID         string          `json:"tenantId"`
	ProjectID        string          `json:"projectId"`
	EnvironmentID    string          `json:"environmentId"`
	PlanID           string          `json:"planId"`
	PlanVersion      string          `json:"planVersion"`
	EngineAttemptID  int             `json:"engineAttemptId"`
	LogicalAttemptID int             `json:"logicalAttemptId"`
	IdempotencyKey   string          `json:"idempotencyKey"`
	StepID           string          `json:"stepId,omitempty"`
	Payload          json.RawMessage `json:"payload,omitempty"`
}

// RunEventRecord is a persisted event: the write plus what the append
// authority assigned.
type RunEventRecord struct {
	RunEventWrite
	RunSeq      int64     `json:"runSeq"`
	PersistedAt time.Time `json:"persistedAt"`
}

// RunMetadata is the dvt_runs row of a run. CreatedAt is the store's clock.
type RunMetadata struct {
	RunID          string    `json:"runId" db:"run_id"`
	TenantID       string    `json:"tenantId" db:"tenant_id"`
	ProjectID      string    `json:"projectId" db:"project_id"`
	EnvironmentID  string    `json:"environmentId" db:"environment_id"`
	PlanID         string    `json:"planId" db:"plan_id"`
	PlanVersion    string    `json:"planVersion" db:"plan_version"`
	PlanSHA256     string    `json:"planSha256" db:"plan_sha256"`
	TargetAdapter  string    `json:"targetAdapter" db:"target_adapter"`
	ProviderRunRef string    `json:"providerRunRef,omitempty" db:"provider_run_ref"`
	RunRequestID   string    `json:"runRequestId,omitempty" db:"run_request_id"`
	CreatedAt      time.Time `json:"createdAt" db:"created_at"`
}

// AppendResult says what an append did: Appended holds the records written
// by this call, Deduped the records that already existed for an idempotency
// key in the batch (with their stored eventId, runSeq and persistedAt).
// Only Appended events are enqueued in the outbox.
type AppendResult struct {
	Appended []RunEventRecord `json:"appended"`
	Deduped  []RunEventRecord `json:"deduped"`
}

// Records returns Appended and Deduped in runSeq order.
func (r AppendResult) Records() []RunEventRecord {
	out := make([]RunEventRecord, 0, len(r.Appended)+len(r.Deduped))
	out = append(out, r.Appended...)
	out = append(out, r.Deduped...)
	sortBySeq(out)
	return out
}

func sortBySeq(recs []RunEventRecord) {
	// Insertion sort: batches are small and usually already ordered.
	for i := 1; i < len(recs); i++ {
		for j := i; j > 0 && recs[j-1].RunSeq > recs[j].RunSeq; j-- {
			recs[j-1], recs[j] = recs[j], recs[j-1]
		}
	}
}

// Clock is the engine's source of time. Production wires the wall clock;
// tests wire a fake.
type Clock interface {
	Now() time.Time
}

// IDSource produces identifiers: UUID v4 strings for event, run and signal ids.
type IDSource interface {
	NewID() string
}

// ClockFunc adapts a function to Clock.
type ClockFunc func() time.Time

// Now calls f.
func (f ClockFunc) Now() time.Time { return f() }

// IDFunc adapts a function to IDSource.
type IDFunc func() string

// NewID calls f.
func (f IDFunc) NewID() string { return f() }
