package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// EventReader reads a run's log in runSeq order.
type EventReader interface {
	ListEvents(ctx context.Context, runID string, afterSeq int64, limit int) ([]RunEventRecord, error)
}

// AlertRecorder stores alerts idempotently on their key.
type AlertRecorder interface {
	RecordAlert(ctx context.Context, a Alert) (bool, error)
}

// Projector keeps run snapshots current from the store (ExecutionSemantics
// §1.5): it polls from the watermark, resyncs on a non-contiguous fetch, and
// records the alerts the contracts name — INVALID_TRANSITION once per
// offending event, PROJECTOR_NON_CONTIGUOUS_FETCH_DETECTED, PROJECTOR_LAG_HIGH.
type Projector struct {
	Events EventReader
	Alerts AlertRecorder // nil: alerts are not recorded
	Clock  Clock
	// PageSize bounds each fetch (default 1000).
	PageSize int
	// LagThreshold is the age past which a newly fetched event raises
	// PROJECTOR_LAG_HIGH (default 5s).
	LagThreshold time.Duration
}

// Load projects a run from its whole log.
func (p *Projector) Load(ctx context.Context, runID string) (Snapshot, error) {
	events, err := p.fetch(ctx, runID, 0)
	if err != nil {
		return Snapshot{}, err
	}
	snap := Project(runID, events)
	return snap, p.recordViolations(ctx, snap, 0)
}

// Refresh brings snap up to date with the events appended since its
// watermark. A fetch that does not continue the watermark (a gap in runSeq)
// is not data loss: the snapshot is rebuilt from the whole log and returned
// marked Stale, with an alert, so callers can tell that it was resynced.
func (p *Projector) Refresh(ctx context.Context, snap Snapshot) (Snapshot, error) {
	events, err := p.fetch(ctx, snap.RunID, snap.LastEventSeq)
	if err != nil {
		return snap, err
	}
	if len(events) == 0 {
		return snap, nil
	}
	known := len(snap.Violations)
	if DetectNonContiguous(snap.LastEventSeq, events[0].RunSeq) && snap.LastEventSeq > 0 {
		if err := p.alert(ctx, Alert{
			Key:      fmt.Sprintf("%s:%s:%d:%d", CodeProjectorNonContiguous, snap.RunID, snap.LastEventSeq, events[0].RunSeq),
			Code:     CodeProjectorNonContiguous,
			Severity: SeverityP2,
			RunID:    snap.RunID, TenantID: snap.TenantID, ProjectID: snap.ProjectID, EnvironmentID: snap.EnvironmentID,
			Message: fmt.Sprintf("fetch after runSeq %d returned runSeq %d; resynced from the full log", snap.LastEventSeq, events[0].RunSeq),
		}); err != nil {
			return snap, err
		}
		fresh, err := p.Load(ctx, snap.RunID)
		if err != nil {
			return snap, err
		}
		fresh.Stale = true
		return fresh, nil
	}
	if err := p.checkLag(ctx, snap, events); err != nil {
		return snap, err
	}
	next := Incremental(snap, events)
	next.Stale = false
	return next, p.recordViolations(ctx, next, known)
}

func (p *Projector) fetch(ctx context.Context, runID string, after int64) ([]RunEventRecord, error) {
	size := p.PageSize
	if size <= 0 {
		size = 1000
	}
	var all []RunEventRecord
	for {
		page, err := p.Events.ListEvents(ctx, runID, after, size)
		if err != nil {
			return nil, fmt.Errorf("projector: list events of run %s after %d: %w", runID, after, err)
		}
		all = append(all, page...)
		if len(page) < size {
			return all, nil
		}
		after = page[len(page)-1].RunSeq
	}
}

func (p *Projector) checkLag(ctx context.Context, snap Snapshot, events []RunEventRecord) error {
	if p.Clock == nil {
		return nil
	}
	limit := p.LagThreshold
	if limit <= 0 {
		limit = 5 * time.Second
	}
	oldest := events[0]
	lag := p.Clock.Now().Sub(oldest.PersistedAt)
	if lag <= limit {
		return nil
	}
	payload, _ := json.Marshal(map[string]any{"runSeq": oldest.RunSeq, "lagMs": lag.Milliseconds(), "thresholdMs": limit.Milliseconds()})
	return p.alert(ctx, Alert{
		Key:      fmt.Sprintf("%s:%s:%d", CodeProjectorLagHigh, snap.RunID, oldest.RunSeq),
		Code:     CodeProjectorLagHigh,
		Severity: SeverityP2,
		RunID:    snap.RunID, TenantID: snap.TenantID, ProjectID: snap.ProjectID, EnvironmentID: snap.EnvironmentID,
		Message: fmt.Sprintf("projection is %s behind runSeq %d (threshold %s)", lag.Round(time.Millisecond), oldest.RunSeq, limit),
		Payload: payload,
	})
}

// recordViolations records INVALID_TRANSITION alerts for violations past
// the first `from` ones; the alert key makes repeats harmless anyway.
func (p *Projector) recordViolations(ctx context.Context, snap Snapshot, from int) error {
	alerts := snap.InvalidTransitionAlerts()
	for _, a := range alerts[min(from, len(alerts)):] {
		if err := p.alert(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

func (p *Projector) alert(ctx context.Context, a Alert) error {
	if p.Alerts == nil {
		return nil
	}
	if _, err := p.Alerts.RecordAlert(ctx, a); err != nil {
		return fmt.Errorf("projector: record %s alert: %w", a.Code, err)
	}
	return nil
}
