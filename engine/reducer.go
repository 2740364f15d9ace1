package engine

import (
	"encoding/json"
	"iter"
	"maps"
	"slices"
)

// Project reduces a run's persisted events, in runSeq order, into a
// snapshot (ExecutionSemantics §1.5). Invalid transitions follow Policy A
// (RunEvents §5.3): the event changes nothing, the snapshot is marked
// Inconsistent and the event is listed in Violations. Unknown event types
// and re-delivered events (an idempotency key already applied) only advance
// the watermark.
func Project(runID string, events []RunEventRecord) Snapshot {
	// Size the step table once: growing it would copy every step again.
	steps := 0
	for i := range events {
		if events[i].EventType == StepStarted || events[i].EventType == StepSkipped {
			steps++
		}
	}
	r := reducer{
		s:     Snapshot{RunID: runID, Status: StatusNone},
		steps: make([]StepSnapshot, 0, steps),
		index: make(map[string]int, steps),
		seen:  seenSet{steps: make([][4]uint64, 0, steps)},
	}
	for i := range events {
		r.apply(&events[i])
	}
	return r.snapshot()
}

// ProjectRuns reduces a log ordered by run and then runSeq — each run's
// events together — into one snapshot per run, holding one run's events in
// memory at a time. It stops at the first error events yields.
func ProjectRuns(events iter.Seq2[RunEventRecord, error]) (map[string]Snapshot, error) {
	out := make(map[string]Snapshot)
	var run []RunEventRecord
	flush := func() {
		if len(run) > 0 {
			out[run[0].RunID] = Project(run[0].RunID, run)
		}
		run = nil
	}
	for e, err := range events {
		if err != nil {
			return nil, err
		}
		if len(run) > 0 && run[0].RunID != e.RunID {
			flush()
		}
		run = append(run, e)
	}
	flush()
	return out, nil
}

// Incremental applies newEvents to a copy of snap and returns the copy;
// snap itself is left as it was. The events must follow snap.LastEventSeq
// in runSeq order; events at or below the watermark are ignored, which makes
// re-processing after a crash safe.
func Incremental(snap Snapshot, newEvents []RunEventRecord) Snapshot {
	r := reducer{
		s:     snap,
		steps: slices.Clone(snap.Steps),
		index: maps.Clone(snap.index),
		seen:  snap.seen.clone(),
	}
	if r.index == nil {
		r.index = make(map[string]int)
	}
	r.s.Violations = slices.Clone(snap.Violations)
	for i := range newEvents {
		if newEvents[i].RunSeq <= r.s.LastEventSeq {
			continue
		}
		r.apply(&newEvents[i])
	}
	return r.snapshot()
}

// reducer is the mutable working state behind Project and Incremental; the
// snapshot it returns shares nothing it will write to again.
type reducer struct {
	s     Snapshot
	steps []StepSnapshot
	index map[string]int
	seen  seenSet
}

// seenSet remembers the state-changing events reduced so far, so that a
// re-delivered event only advances the watermark. Within one run an event's
// idempotency key is a function of (step, logical attempt, type) — runId,
// planId and planVersion are the run's own for every event the store accepts
// — so the set is kept per entity as one bit per (type, attempt): no hashing
// of 64-character keys, no pointers for the GC to scan, and the bits sit
// beside the step the event touches anyway.
type seenSet struct {
	run      [8]uint64        // run-level types × attempts 1..64
	steps    [][4]uint64      // per step (parallel to reducer.steps): step types × attempts 1..64
	overflow map[applied]bool // attempts outside 1..64
	// unborn holds the events seen for steps that do not exist yet: every
	// event about them so far was invalid (Policy A), so no step appeared.
	unborn map[string][]stepKey
}

// stepKey is a step event's re-delivery key within its step.
type stepKey struct {
	typ     EventType
	attempt int
}

type applied struct {
	step    int32 // -1: the run
	attempt int
	typ     EventType
}

func (s seenSet) clone() seenSet {
	c := seenSet{run: s.run, steps: slices.Clone(s.steps), overflow: maps.Clone(s.overflow)}
	if s.unborn != nil {
		c.unborn = make(map[string][]stepKey, len(s.unborn))
		for id, keys := range s.unborn {
			c.unborn[id] = slices.Clone(keys)
		}
	}
	return c
}

// typeBit orders the state-changing types within their entity.
func typeBit(t EventType) int {
	switch t {
	case RunQueued, StepStarted:
		return 0
	case RunApproved, StepCompleted:
		return 1
	case RunStarted, StepFailed:
		return 2
	case RunPaused, StepSkipped:
		return 3
	case RunResumed:
		return 4
	case RunCompleted:
		return 5
	case RunFailed:
		return 6
	}
	return 7 // RunCancelled
}

func (r *reducer) snapshot() Snapshot {
	s := r.s
	s.Steps, s.index, s.seen = r.steps, r.index, r.seen
	s.Substatus = ""
	if s.Status == StatusPaused {
		for _, st := range s.Steps {
			if st.Status == StepStatusRunning {
				s.Substatus = SubstatusDraining
				break
			}
		}
	}
	return s
}

// DetectNonContiguous reports whether nextSeq does not follow lastSeq
// directly. Gaps are legal (ExecutionSemantics §1.0); a projector that sees
// one marks its snapshot stale and resyncs from its watermark.
func DetectNonContiguous(lastSeq, nextSeq int64) bool {
	return nextSeq != lastSeq+1
}

// Step returns the snapshot of one step. A snapshot the reducer did not
// build (decoded from JSON, or made in code) has no index: it is searched.
func (s Snapshot) Step(id string) (StepSnapshot, bool) {
	if s.index == nil {
		for _, st := range s.Steps {
			if st.StepID == id {
				return st, true
			}
		}
		return StepSnapshot{}, false
	}
	i, ok := s.index[id]
	if !ok {
		return StepSnapshot{}, false
	}
	return s.Steps[i], true
}

// apply reduces one event into s, which the caller owns exclusively.
func (r *reducer) apply(e *RunEventRecord) {
	s := &r.s
	if e.RunSeq > s.LastEventSeq {
		s.LastEventSeq = e.RunSeq
	}
	if s.TenantID == "" && s.ProjectID == "" && s.EnvironmentID == "" {
		s.TenantID, s.ProjectID, s.EnvironmentID = e.TenantID, e.ProjectID, e.EnvironmentID
	}
	target, changes := TargetOf(e.EventType)
	if !changes {
		return // unknown types and signal decisions: watermark only
	}
	if e.EventType.StepLevel() {
		r.applyStep(e, target)
		return
	}
	if r.redelivered(-1, e) {
		return
	}
	to, ok := RunTransition(s.Status, e.EventType)
	if !ok {
		r.violate(e, EntityRun, string(s.Status), target)
		return
	}
	s.Status = to
	switch {
	case e.EventType == RunStarted:
		s.StartedAt = e.EmittedAt
	case to.Terminal():
		s.CompletedAt = e.EmittedAt
		s.DurationMs = durationMs(s.StartedAt, s.CompletedAt)
		if e.EventType == RunFailed {
			s.Error = payloadError(e.Payload)
		}
	}
}

// redelivered reports whether an event with e's key was reduced before, and
// remembers it otherwise (also when it then turns out invalid). step is the
// step's index, -1 for run-level events.
func (r *reducer) redelivered(step int, e *RunEventRecord) bool {
	return r.seenBefore(step, e.EventType, e.LogicalAttemptID)
}

// seenBefore is redelivered for the key (step, type, logical attempt a).
func (r *reducer) seenBefore(step int, typ EventType, a int) bool {
	if a < 1 || a > 64 {
		k := applied{step: int32(step), attempt: a, typ: typ}
		if r.seen.overflow[k] {
			return true
		}
		if r.seen.overflow == nil {
			r.seen.overflow = make(map[applied]bool)
		}
		r.seen.overflow[k] = true
		return false
	}
	var word *uint64
	if step < 0 {
		word = &r.seen.run[typeBit(typ)]
	} else {
		word = &r.seen.steps[step][typeBit(typ)]
	}
	bit := uint64(1) << (a - 1)
	if *word&bit != 0 {
		return true
	}
	*word |= bit
	return false
}

func (r *reducer) applyStep(e *RunEventRecord, target string) {
	if e.StepID == "" {
		return // not a valid step event; opaque, like an unknown type
	}
	i, ok := r.index[e.StepID]
	if !ok {
		// Policy A: a step appears only with the first event that applies
		// to it; an invalid one is a violation and creates nothing.
		key := stepKey{e.EventType, e.LogicalAttemptID}
		if slices.Contains(r.seen.unborn[e.StepID], key) {
			return
		}
		if _, valid := StepTransition(StepStatusPending, e.EventType, r.s.Status, 0, e.LogicalAttemptID); !valid {
			if r.seen.unborn == nil {
				r.seen.unborn = make(map[string][]stepKey)
			}
			r.seen.unborn[e.StepID] = append(r.seen.unborn[e.StepID], key)
			r.violate(e, EntityStep, string(StepStatusPending), target)
			return
		}
		i = len(r.steps)
		r.index[e.StepID] = i
		r.steps = append(r.steps, StepSnapshot{StepID: e.StepID, Status: StepStatusPending})
		r.seen.steps = append(r.seen.steps, [4]uint64{})
		for _, k := range r.seen.unborn[e.StepID] {
			r.seenBefore(i, k.typ, k.attempt)
		}
		delete(r.seen.unborn, e.StepID)
	}
	if r.redelivered(i, e) {
		return
	}
	st := &r.steps[i]
	to, valid := StepTransition(st.Status, e.EventType, r.s.Status, st.LogicalAttemptID, e.LogicalAttemptID)
	if !valid {
		r.violate(e, EntityStep, string(st.Status), target)
		return
	}
	st.Status = to
	st.LastEventSeq = e.RunSeq
	st.EngineAttemptID = e.EngineAttemptID
	switch e.EventType {
	case StepStarted:
		st.LogicalAttemptID = e.LogicalAttemptID
		st.StartedAt = e.EmittedAt
		st.CompletedAt = zeroTime
		st.DurationMs = 0
		st.Error = nil
	case StepCompleted:
		st.StartedAt = payloadAttemptStart(e.Payload, st.StartedAt)
		st.CompletedAt = e.EmittedAt
		st.DurationMs = durationMs(st.StartedAt, st.CompletedAt)
		st.Artifacts = payloadArtifacts(e.Payload)
	case StepFailed:
		st.StartedAt = payloadAttemptStart(e.Payload, st.StartedAt)
		st.CompletedAt = e.EmittedAt
		st.DurationMs = durationMs(st.StartedAt, st.CompletedAt)
		st.Error = payloadError(e.Payload)
	case StepSkipped:
		st.LogicalAttemptID = e.LogicalAttemptID
		st.SkipReason = payloadReason(e.Payload)
	}
}

func (r *reducer) violate(e *RunEventRecord, entity, prior, attempted string) {
	s := &r.s
	s.Inconsistent = true
	s.Violations = append(s.Violations, Violation{
		EventID:        e.EventID,
		EventType:      e.EventType,
		RunSeq:         e.RunSeq,
		PersistedAt:    e.PersistedAt,
		Entity:         entity,
		StepID:         e.StepID,
		PriorState:     prior,
		AttemptedState: attempted,
	})
}

// InvalidTransitionAlerts returns one INVALID_TRANSITION alert per violation,
// keyed by (runId, eventId) so that recording them again is a no-op
// (RunEvents §5.4).
func (s Snapshot) InvalidTransitionAlerts() []Alert {
	out := make([]Alert, 0, len(s.Violations))
	for _, v := range s.Violations {
		payload, _ := json.Marshal(map[string]any{
			"code":           CodeInvalidTransition,
			"runId":          s.RunID,
			"tenantId":       s.TenantID,
			"projectId":      s.ProjectID,
			"environmentId":  s.EnvironmentID,
			"eventId":        v.EventID,
			"eventType":      v.EventType,
			"runSeq":         v.RunSeq,
			"persistedAt":    v.PersistedAt.UTC().Format(TimeFormat),
			"entity":         v.Entity,
			"stepId":         v.StepID,
			"priorState":     v.PriorState,
			"attemptedState": v.AttemptedState,
		})
		out = append(out, Alert{
			Key:           string(CodeInvalidTransition) + ":" + s.RunID + ":" + v.EventID,
			Code:          CodeInvalidTransition,
			Severity:      SeverityP2,
			RunID:         s.RunID,
			TenantID:      s.TenantID,
			ProjectID:     s.ProjectID,
			EnvironmentID: s.EnvironmentID,
			Message:       invalidTransitionMessage(v),
			Payload:       payload,
		})
	}
	return out
}

func invalidTransitionMessage(v Violation) string {
	subject := "run"
	if v.Entity == EntityStep {
		subject = "step " + v.StepID
	}
	return string(v.EventType) + " at runSeq " + itoa(v.RunSeq) + " would move " + subject +
		" from " + v.PriorState + " to " + v.AttemptedState + ", which the transition table does not allow; the event was ignored"
}
