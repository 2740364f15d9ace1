package engine

import "time"

// TimeFormat is how dvtrun writes timestamps it stores as text: RFC 3339 in
// UTC with a fixed nine-digit fraction, so that text order is time order and
// SQL can cut milliseconds out by position.
const TimeFormat = "2006-01-02T15:04:05.000000000Z"

// ErrorInfo is the error a StepFailed or RunFailed payload carries under
// "error".
type ErrorInfo struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable,omitempty"`
}

// ArtifactRef points at an artifact; the store keeps references, never bytes
// (ExecutionSemantics §2).
type ArtifactRef struct {
	URI       string `json:"uri"`
	Kind      string `json:"kind"`
	SHA256    string `json:"sha256,omitempty"`
	SizeBytes int64  `json:"sizeBytes,omitempty"`
	ExpiresAt string `json:"expiresAt,omitempty"`
}

// Violation is an event Policy A ignored: the §5.4 alert payload minus the
// run's tenancy, which the Snapshot holds.
type Violation struct {
	EventID        string    `json:"eventId"`
	EventType      EventType `json:"eventType"`
	RunSeq         int64     `json:"runSeq"`
	PersistedAt    time.Time `json:"persistedAt"`
	Entity         string    `json:"entity"` // RUN or STEP
	StepID         string    `json:"stepId,omitempty"`
	PriorState     string    `json:"priorState"`
	AttemptedState string    `json:"attemptedState"`
}

// StepSnapshot is a step's derived state. Times are the emittedAt of the
// events that set them, except that an outcome whose payload says when its
// engine attempt started (attemptStartedAt: a step run again after a
// resume, see payloadAttemptStart) moves StartedAt there; DurationMs is
// CompletedAt-StartedAt in whole milliseconds (both truncated to the
// millisecond), 0 when either is unset.
type StepSnapshot struct {
	StepID           string        `json:"stepId"`
	Status           StepStatus    `json:"status"`
	LogicalAttemptID int           `json:"logicalAttemptId"`
	EngineAttemptID  int           `json:"engineAttemptId"`
	StartedAt        time.Time     `json:"startedAt,omitzero"`
	CompletedAt      time.Time     `json:"completedAt,omitzero"`
	DurationMs       int64         `json:"durationMs,omitempty"`
	Error            *ErrorInfo    `json:"error,omitempty"`
	SkipReason       string        `json:"skipReason,omitempty"`
	Artifacts        []ArtifactRef `json:"artifacts,omitempty"`
	LastEventSeq     int64         `json:"lastEventSeq"`
}

// Snapshot is a run's derived state. It is a value: Project and Incremental
// return new snapshots and never modify their input.
type Snapshot struct {
	RunID         string      `json:"runId"`
	TenantID      string      `json:"tenantId,omitempty"`
	ProjectID     string      `json:"projectId,omitempty"`
	EnvironmentID string      `json:"environmentId,omitempty"`
	Status        RunStatus   `json:"status"`
	Substatus     string      `json:"substatus,omitempty"`
	LastEventSeq  int64       `json:"lastEventSeq"`
	Inconsistent  bool        `json:"inconsistent,omitempty"`
	Stale         bool        `json:"stale,omitempty"`
	Violations    []Violation `json:"violations,omitempty"`
	StartedAt     time.Time   `json:"startedAt,omitzero"`
	CompletedAt   time.Time   `json:"completedAt,omitzero"`
	DurationMs    int64       `json:"durationMs,omitempty"`
	Error         *ErrorInfo  `json:"error,omitempty"`
	// Steps are in the order of the first event that applied to each: an
	// invalid event about a step the log has not started creates no step
	// (Policy A).
	Steps []StepSnapshot `json:"steps"`
	// StaleThrough is, while Stale, the watermark of the resync that marked
	// it: the snapshot is trusted again once a resync reads a log without
	// holes or the watermark has moved past this (ExecutionSemantics §1.1).
	StaleThrough int64 `json:"staleThrough,omitempty"`

	index map[string]int // stepId -> position in Steps
	// seen holds the state-changing events reduced so far: a re-delivered
	// event advances the watermark and changes nothing else.
	seen seenSet
}
