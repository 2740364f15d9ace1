package engine

// RunStatus is a run's derived status. StatusNone is the state before any event.
type RunStatus string

const (
	StatusNone      RunStatus = "NONE"
	StatusQueued    RunStatus = "QUEUED"
	StatusApproved  RunStatus = "APPROVED"
	StatusRunning   RunStatus = "RUNNING"
	StatusPaused    RunStatus = "PAUSED"
	StatusCompleted RunStatus = "COMPLETED"
	StatusFailed    RunStatus = "FAILED"
	StatusCancelled RunStatus = "CANCELLED"
)

// Terminal reports whether s is immutable.
func (s RunStatus) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// StepStatus is a step's derived status. Steps start PENDING.
type StepStatus string

const (
	StepStatusPending StepStatus = "PENDING"
	StepStatusRunning StepStatus = "RUNNING"
	StepStatusSuccess StepStatus = "SUCCESS"
	StepStatusFailed  StepStatus = "FAILED"
	StepStatusSkipped StepStatus = "SKIPPED"
)

// Substatus values of a run snapshot.
const (
	SubstatusDraining = "DRAINING" // PAUSED while steps are still RUNNING
)

// AttemptRule constrains an event's logicalAttemptId against the step's
// current one.
type AttemptRule string

const (
	AttemptAny    AttemptRule = "ANY"
	AttemptSame   AttemptRule = "SAME"   // event's attempt == step's attempt
	AttemptHigher AttemptRule = "HIGHER" // event's attempt > step's attempt
)

// Entity names what a transition row applies to.
const (
	EntityRun  = "RUN"
	EntityStep = "STEP"
)

// Transition is one allowed move. For STEP rows RunStatus is the run status
// the step event requires (one row per allowed run status); RUN rows leave it
// empty. The same rows are shipped by the migrations as dvt_transitions, so
// the Go reducer and the SQL projection read one table; a test keeps them equal.
type Transition struct {
	Entity    string      `db:"entity"`
	From      string      `db:"from_status"`
	Event     EventType   `db:"event_type"`
	To        string      `db:"to_status"`
	RunStatus string      `db:"run_status"`
	Attempt   AttemptRule `db:"attempt_rule"`
}

// Transitions is the transition table of DESIGN.md.
var Transitions = []Transition{
	{EntityRun, "NONE", RunQueued, "QUEUED", "", AttemptAny},
	{EntityRun, "QUEUED", RunApproved, "APPROVED", "", AttemptAny},
	{EntityRun, "QUEUED", RunStarted, "RUNNING", "", AttemptAny},
	{EntityRun, "APPROVED", RunStarted, "RUNNING", "", AttemptAny},
	{EntityRun, "RUNNING", RunPaused, "PAUSED", "", AttemptAny},
	{EntityRun, "PAUSED", RunResumed, "RUNNING", "", AttemptAny},
	{EntityRun, "RUNNING", RunCompleted, "COMPLETED", "", AttemptAny},
	{EntityRun, "RUNNING", RunFailed, "FAILED", "", AttemptAny},
	{EntityRun, "QUEUED", RunFailed, "FAILED", "", AttemptAny},
	{EntityRun, "QUEUED", RunCancelled, "CANCELLED", "", AttemptAny},
	{EntityRun, "RUNNING", RunCancelled, "CANCELLED", "", AttemptAny},
	{EntityRun, "PAUSED", RunCancelled, "CANCELLED", "", AttemptAny},

	{EntityStep, "PENDING", StepStarted, "RUNNING", "RUNNING", AttemptAny},
	{EntityStep, "FAILED", StepStarted, "RUNNING", "RUNNING", AttemptHigher},
	{EntityStep, "RUNNING", StepCompleted, "SUCCESS", "RUNNING", AttemptSame},
	{EntityStep, "RUNNING", StepCompleted, "SUCCESS", "PAUSED", AttemptSame},
	{EntityStep, "RUNNING", StepFailed, "FAILED", "RUNNING", AttemptSame},
	{EntityStep, "RUNNING", StepFailed, "FAILED", "PAUSED", AttemptSame},
	{EntityStep, "PENDING", StepSkipped, "SKIPPED", "RUNNING", AttemptAny},
	{EntityStep, "PENDING", StepSkipped, "SKIPPED", "PAUSED", AttemptAny},
}

// TargetOf returns the state an event type moves its entity to, and whether
// the type changes state at all. Unknown types and signal decisions do not.
func TargetOf(t EventType) (string, bool) {
	switch t {
	case RunQueued:
		return string(StatusQueued), true
	case RunApproved:
		return string(StatusApproved), true
	case RunStarted, RunResumed:
		return string(StatusRunning), true
	case RunPaused:
		return string(StatusPaused), true
	case RunCompleted:
		return string(StatusCompleted), true
	case RunFailed:
		return string(StatusFailed), true
	case RunCancelled:
		return string(StatusCancelled), true
	case StepStarted:
		return string(StepStatusRunning), true
	case StepCompleted:
		return string(StepStatusSuccess), true
	case StepFailed:
		return string(StepStatusFailed), true
	case StepSkipped:
		return string(StepStatusSkipped), true
	}
	return "", false
}

// transitionIndex finds rows by (entity, from, event).
type transitionKey struct {
	entity, from string
	event        EventType
}

var transitionIndex = func() map[transitionKey][]Transition {
	m := make(map[transitionKey][]Transition, len(Transitions))
	for _, t := range Transitions {
		k := transitionKey{t.Entity, t.From, t.Event}
		m[k] = append(m[k], t)
	}
	return m
}()

// RunTransition returns the run status event t moves from to, or false when
// the move is not in the table.
func RunTransition(from RunStatus, t EventType) (RunStatus, bool) {
	rows := transitionIndex[transitionKey{EntityRun, string(from), t}]
	if len(rows) == 0 {
		return "", false
	}
	return RunStatus(rows[0].To), true
}

// StepTransition returns the step status event t moves from to, given the
// run's status and the step's and the event's logical attempts.
func StepTransition(from StepStatus, t EventType, run RunStatus, stepAttempt, eventAttempt int) (StepStatus, bool) {
	for _, row := range transitionIndex[transitionKey{EntityStep, string(from), t}] {
		if row.RunStatus != string(run) {
			continue
		}
		switch row.Attempt {
		case AttemptSame:
			if eventAttempt != stepAttempt {
				continue
			}
		case AttemptHigher:
			if eventAttempt <= stepAttempt {
				continue
			}
		}
		return StepStatus(row.To), true
	}
	return "", false
}
