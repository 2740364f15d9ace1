package engine

import (
	"encoding/json"
	"strconv"
	"time"
)

// SnapshotDiff is one field on which the SQL projection and the Go reducer
// disagree. StepID is "" for run-level fields. SQL and Go are the two
// values as text; a missing step or violation reads "absent".
type SnapshotDiff struct {
	RunID  string `json:"runId"`
	StepID string `json:"stepId,omitempty"`
	Field  string `json:"field"`
	SQL    string `json:"sql"`
	Go     string `json:"go"`
}

// Absent is the value a SnapshotDiff shows for a step or violation that one
// side does not have.
const Absent = "absent"

// DiffSnapshots lists every field on which sqlSnap and goSnap differ: the
// run's fields, its violations (matched by runSeq) and its steps (matched by
// id; a step on one side only is one diff with Field "step"). Stale is not
// compared: it is projector bookkeeping, not derived from the log.
func DiffSnapshots(sqlSnap, goSnap Snapshot) []SnapshotDiff {
	runID := goSnap.RunID
	if runID == "" {
		runID = sqlSnap.RunID
	}
	var out []SnapshotDiff
	add := func(step, field, s, g string) {
		if s != g {
			out = append(out, SnapshotDiff{RunID: runID, StepID: step, Field: field, SQL: s, Go: g})
		}
	}
	add("", "runId", sqlSnap.RunID, goSnap.RunID)
	add("", "tenantId", sqlSnap.TenantID, goSnap.TenantID)
	add("", "projectId", sqlSnap.ProjectID, goSnap.ProjectID)
	add("", "environmentId", sqlSnap.EnvironmentID, goSnap.EnvironmentID)
	add("", "status", string(sqlSnap.Status), string(goSnap.Status))
	add("", "substatus", sqlSnap.Substatus, goSnap.Substatus)
	add("", "lastEventSeq", itoa(sqlSnap.LastEventSeq), itoa(goSnap.LastEventSeq))
	add("", "inconsistent", strconv.FormatBool(sqlSnap.Inconsistent), strconv.FormatBool(goSnap.Inconsistent))
	add("", "startedAt", timeText(sqlSnap.StartedAt), timeText(goSnap.StartedAt))
	add("", "completedAt", timeText(sqlSnap.CompletedAt), timeText(goSnap.CompletedAt))
	add("", "durationMs", itoa(sqlSnap.DurationMs), itoa(goSnap.DurationMs))
	diffError(add, "", sqlSnap.Error, goSnap.Error)
	diffViolations(add, sqlSnap.Violations, goSnap.Violations)

	sqlSteps := make(map[string]int, len(sqlSnap.Steps))
	for i, st := range sqlSnap.Steps {
		sqlSteps[st.StepID] = i
	}
	goSteps := make(map[string]int, len(goSnap.Steps))
	for i, st := range goSnap.Steps {
		goSteps[st.StepID] = i
	}
	for gi, g := range goSnap.Steps {
		si, ok := sqlSteps[g.StepID]
		if !ok {
			add(g.StepID, "step", Absent, "present")
			continue
		}
		s := sqlSnap.Steps[si]
		// Steps are listed in the order the log first names them.
		add(g.StepID, "position", strconv.Itoa(si), strconv.Itoa(gi))
		add(g.StepID, "status", string(s.Status), string(g.Status))
		add(g.StepID, "logicalAttemptId", strconv.Itoa(s.LogicalAttemptID), strconv.Itoa(g.LogicalAttemptID))
		add(g.StepID, "engineAttemptId", strconv.Itoa(s.EngineAttemptID), strconv.Itoa(g.EngineAttemptID))
		add(g.StepID, "startedAt", timeText(s.StartedAt), timeText(g.StartedAt))
		add(g.StepID, "completedAt", timeText(s.CompletedAt), timeText(g.CompletedAt))
		add(g.StepID, "durationMs", itoa(s.DurationMs), itoa(g.DurationMs))
		diffError(add, g.StepID, s.Error, g.Error)
		add(g.StepID, "skipReason", s.SkipReason, g.SkipReason)
		add(g.StepID, "artifacts", artifactsText(s.Artifacts), artifactsText(g.Artifacts))
		add(g.StepID, "lastEventSeq", itoa(s.LastEventSeq), itoa(g.LastEventSeq))
	}
	for _, s := range sqlSnap.Steps {
		if _, ok := goSteps[s.StepID]; !ok {
			add(s.StepID, "step", "present", Absent)
		}
	}
	return out
}

func diffError(add func(step, field, s, g string), step string, s, g *ErrorInfo) {
	if s == nil || g == nil {
		add(step, "error", errorText(s), errorText(g))
		return
	}
	add(step, "error.code", s.Code, g.Code)
	add(step, "error.message", s.Message, g.Message)
	add(step, "error.retryable", strconv.FormatBool(s.Retryable), strconv.FormatBool(g.Retryable))
}

func errorText(e *ErrorInfo) string {
	if e == nil {
		return ""
	}
	b, _ := json.Marshal(e)
	return string(b)
}

// diffViolations matches violations by runSeq, which is unique in a run.
func diffViolations(add func(step, field, s, g string), sqlV, goV []Violation) {
	bySeq := make(map[int64]Violation, len(sqlV))
	for _, v := range sqlV {
		bySeq[v.RunSeq] = v
	}
	matched := make(map[int64]bool, len(goV))
	for _, g := range goV {
		f := "violations[" + itoa(g.RunSeq) + "]"
		s, ok := bySeq[g.RunSeq]
		if !ok {
			add(g.StepID, f, Absent, "present")
			continue
		}
		matched[g.RunSeq] = true
		add(g.StepID, f+".eventId", s.EventID, g.EventID)
		add(g.StepID, f+".eventType", string(s.EventType), string(g.EventType))
		add(g.StepID, f+".persistedAt", timeText(s.PersistedAt), timeText(g.PersistedAt))
		add(g.StepID, f+".entity", s.Entity, g.Entity)
		add(g.StepID, f+".stepId", s.StepID, g.StepID)
		add(g.StepID, f+".priorState", s.PriorState, g.PriorState)
		add(g.StepID, f+".attemptedState", s.AttemptedState, g.AttemptedState)
	}
	for _, s := range sqlV {
		if !matched[s.RunSeq] {
			add(s.StepID, "violations["+itoa(s.RunSeq)+"]", "present", Absent)
		}
	}
}

// artifactsText is the canonical text of an artifact list; nil and empty
// lists read the same, as they do in a snapshot's JSON.
func artifactsText(a []ArtifactRef) string {
	if len(a) == 0 {
		return ""
	}
	b, _ := json.Marshal(a)
	return string(b)
}

func timeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(TimeFormat)
}

// SnapshotOf returns s with its step index built, for snapshots assembled
// outside the reducer (the SQL projections), so that Step works on them. It
// does not rebuild the re-delivery memory: feed such a snapshot to
// Incremental only if the events that follow carry no re-deliveries.
func SnapshotOf(s Snapshot) Snapshot {
	s.index = make(map[string]int, len(s.Steps))
	for i, st := range s.Steps {
		s.index[st.StepID] = i
	}
	if s.Steps == nil {
		s.Steps = []StepSnapshot{}
	}
	return s
}

// ProjectionRow is one row of a SQL projection (sql/<dialect>/projection.sql):
// a run, one of its steps, or one of its violations. The SQL decides every
// value; SnapshotAssembler only puts the rows together.
type ProjectionRow struct {
	Kind          string // RUN, STEP or VIOLATION
	RunID, StepID string
	Ord           int64 // a step's first-mention runSeq, a violation's runSeq
	Status        string
	Substatus     string
	LastEventSeq  int64
	Inconsistent  bool

	TenantID, ProjectID, EnvironmentID string
	LogicalAttemptID, EngineAttemptID  int
	StartedAt, CompletedAt             time.Time
	DurationMs                         int64
	Error                              *ErrorInfo
	SkipReason                         string
	Artifacts                          string // the JSON array, "" for none

	EventID, EventType         string // violations
	PersistedAt                time.Time
	Entity                     string
	PriorState, AttemptedState string
}

// SnapshotAssembler builds snapshots from projection rows ordered by run,
// then the run row, its steps in first-mention order, its violations in
// runSeq order.
type SnapshotAssembler struct {
	out map[string]Snapshot
	cur Snapshot
}

// Add takes the next row.
func (a *SnapshotAssembler) Add(r ProjectionRow) error {
	if a.out == nil {
		a.out = make(map[string]Snapshot)
	}
	if r.Kind != "RUN" && r.RunID != a.cur.RunID {
		return Errorf(CodeStoreCorrupt, "projection: a %s row of run %s came without its run row", r.Kind, r.RunID)
	}
	switch r.Kind {
	case "RUN":
		a.flush()
		a.cur = Snapshot{
			RunID: r.RunID, TenantID: r.TenantID, ProjectID: r.ProjectID, EnvironmentID: r.EnvironmentID,
			Status: RunStatus(r.Status), Substatus: r.Substatus, LastEventSeq: r.LastEventSeq,
			Inconsistent: r.Inconsistent, StartedAt: r.StartedAt, CompletedAt: r.CompletedAt,
			DurationMs: r.DurationMs, Error: r.Error, Steps: []StepSnapshot{},
		}
	case "STEP":
		st := StepSnapshot{
			StepID: r.StepID, Status: StepStatus(r.Status), LogicalAttemptID: r.LogicalAttemptID,
			EngineAttemptID: r.EngineAttemptID, StartedAt: r.StartedAt, CompletedAt: r.CompletedAt,
			DurationMs: r.DurationMs, Error: r.Error, SkipReason: r.SkipReason, LastEventSeq: r.LastEventSeq,
		}
		// As payloadArtifacts: a list that does not decode is none.
		if r.Artifacts != "" && json.Unmarshal([]byte(r.Artifacts), &st.Artifacts) != nil {
			st.Artifacts = nil
		}
		a.cur.Steps = append(a.cur.Steps, st)
	case "VIOLATION":
		a.cur.Violations = append(a.cur.Violations, Violation{
			EventID: r.EventID, EventType: EventType(r.EventType), RunSeq: r.Ord, PersistedAt: r.PersistedAt,
			Entity: r.Entity, StepID: r.StepID, PriorState: r.PriorState, AttemptedState: r.AttemptedState,
		})
	default:
		return Errorf(CodeStoreCorrupt, "projection: unknown row kind %q for run %s", r.Kind, r.RunID)
	}
	return nil
}

func (a *SnapshotAssembler) flush() {
	if a.cur.RunID != "" {
		a.out[a.cur.RunID] = SnapshotOf(a.cur)
	}
	a.cur = Snapshot{}
}

// Snapshots returns the snapshots assembled so far, by run id.
func (a *SnapshotAssembler) Snapshots() map[string]Snapshot {
	if a.out == nil {
		a.out = make(map[string]Snapshot)
	}
	a.flush()
	return a.out
}
