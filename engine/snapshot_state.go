package engine

import (
	"context"
	"encoding/json"
	"fmt"
)

// snapshotStateVersion is bumped when the persisted form changes; a state of
// another version is refused and the projector rebuilds from the log.
// Version 2: Policy A creates no step from an invalid first event, and the
// keys of such events are remembered (Unborn); a version-1 state may hold
// such a step and is rebuilt.
const snapshotStateVersion = 2

// snapshotState is the persisted form of a snapshot: the snapshot itself
// and the reducer's memory of the events it applied, which Incremental needs
// so that a re-delivered event after a restart still only moves the
// watermark.
type snapshotState struct {
	V        int       `json:"v"`
	Snapshot Snapshot  `json:"snapshot"`
	Seen     seenState `json:"seen"`
}

type seenState struct {
	Run      [8]uint64       `json:"run"`
	Steps    [][4]uint64     `json:"steps,omitempty"`
	Overflow []appliedRecord `json:"overflow,omitempty"`
	Unborn   []unbornRecord  `json:"unborn,omitempty"`
}

// unbornRecord is the key of an invalid event about a step that does not
// exist yet (seenSet.unborn).
type unbornRecord struct {
	StepID  string    `json:"stepId"`
	Attempt int       `json:"attempt"`
	Type    EventType `json:"type"`
}

type appliedRecord struct {
	Step    int32     `json:"step"`
	Attempt int       `json:"attempt"`
	Type    EventType `json:"type"`
}

// MarshalState encodes the snapshot with everything Incremental needs to
// continue from it in another process: a snapshot restored with
// UnmarshalSnapshotState and brought forward with Incremental equals the
// projection of the whole log.
func (s Snapshot) MarshalState() ([]byte, error) {
	st := snapshotState{V: snapshotStateVersion, Snapshot: s, Seen: seenState{Run: s.seen.run, Steps: s.seen.steps}}
	if len(st.Seen.Steps) != len(s.Steps) {
		// A snapshot built by hand (not by the reducer) has no memory of
		// applied events: record empty sets so the lengths agree.
		st.Seen.Steps = make([][4]uint64, len(s.Steps))
	}
	for k := range s.seen.overflow {
		st.Seen.Overflow = append(st.Seen.Overflow, appliedRecord{Step: k.step, Attempt: k.attempt, Type: k.typ})
	}
	for id, keys := range s.seen.unborn {
		for _, k := range keys {
			st.Seen.Unborn = append(st.Seen.Unborn, unbornRecord{StepID: id, Attempt: k.attempt, Type: k.typ})
		}
	}
	return json.Marshal(st)
}

// UnmarshalSnapshotState decodes what MarshalState wrote. A state that does
// not decode or does not hang together is STORE_CORRUPT.
func UnmarshalSnapshotState(b []byte) (Snapshot, error) {
	var st snapshotState
	if err := json.Unmarshal(b, &st); err != nil {
		return Snapshot{}, Errorf(CodeStoreCorrupt, "snapshot state does not decode: %v", err)
	}
	if st.V != snapshotStateVersion {
		return Snapshot{}, Errorf(CodeStoreCorrupt, "snapshot state version %d, want %d", st.V, snapshotStateVersion)
	}
	s := st.Snapshot
	if len(st.Seen.Steps) != len(s.Steps) {
		return Snapshot{}, Errorf(CodeStoreCorrupt, "snapshot state of run %s remembers %d steps but holds %d", s.RunID, len(st.Seen.Steps), len(s.Steps))
	}
	s.index = make(map[string]int, len(s.Steps))
	for i, step := range s.Steps {
		if _, dup := s.index[step.StepID]; dup {
			return Snapshot{}, Errorf(CodeStoreCorrupt, "snapshot state of run %s lists step %s twice", s.RunID, step.StepID)
		}
		s.index[step.StepID] = i
	}
	s.seen = seenSet{run: st.Seen.Run, steps: st.Seen.Steps}
	if s.seen.steps == nil {
		s.seen.steps = [][4]uint64{}
	}
	for _, a := range st.Seen.Overflow {
		if s.seen.overflow == nil {
			s.seen.overflow = make(map[applied]bool, len(st.Seen.Overflow))
		}
		s.seen.overflow[applied{step: a.Step, attempt: a.Attempt, typ: a.Type}] = true
	}
	for _, u := range st.Seen.Unborn {
		if _, exists := s.index[u.StepID]; exists {
			return Snapshot{}, Errorf(CodeStoreCorrupt, "snapshot state of run %s remembers step %s as not started and as a step", s.RunID, u.StepID)
		}
		if s.seen.unborn == nil {
			s.seen.unborn = make(map[string][]stepKey)
		}
		s.seen.unborn[u.StepID] = append(s.seen.unborn[u.StepID], stepKey{typ: u.Type, attempt: u.Attempt})
	}
	return s, nil
}

// InFlight counts the steps that are RUNNING: during a PAUSE, the steps
// still draining.
func (s Snapshot) InFlight() int {
	n := 0
	for _, st := range s.Steps {
		if st.Status == StepStatusRunning {
			n++
		}
	}
	return n
}

// RecordAlerts records each alert once (the store keys them).
func RecordAlerts(ctx context.Context, r AlertRecorder, alerts []Alert) error {
	for _, a := range alerts {
		if _, err := r.RecordAlert(ctx, a); err != nil {
			return fmt.Errorf("record %s alert: %w", a.Code, err)
		}
	}
	return nil
}

// EventReader reads a run's log in runSeq order.
type EventReader interface {
	ListEvents(ctx context.Context, runID string, afterSeq int64, limit int) ([]RunEventRecord, error)
}

// AlertRecorder stores alerts idempotently on their key.
type AlertRecorder interface {
	RecordAlert(ctx context.Context, a Alert) (bool, error)
}
