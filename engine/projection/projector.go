// Package projection keeps run snapshots current from the event log
// (ExecutionSemantics §1.4–1.5): a Projector brings one snapshot forward
// from its watermark, and a Service keeps the store's snapshot table live,
// restart-safe because the watermark is persisted with each snapshot.
package projection

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// DefaultLagThreshold is ExecutionSemantics §1.5's P2 limit.
const DefaultLagThreshold = 5 * time.Second

// Projector brings run snapshots up to date from the store: it reads from
// the watermark, resyncs on a non-contiguous fetch, and records the alerts
// the contracts name — INVALID_TRANSITION once per offending event,
// PROJECTOR_NON_CONTIGUOUS_FETCH_DETECTED once per observed hole,
// PROJECTOR_LAG_HIGH once per lagging fetch.
type Projector struct {
	Events engine.EventReader
	Alerts engine.AlertRecorder // nil: alerts are not recorded
	Clock  engine.Clock         // nil: lag is not measured
	// PageSize bounds each fetch (default 1000).
	PageSize int
	// LagThreshold is the age past which a newly fetched event raises
	// PROJECTOR_LAG_HIGH (default 5s).
	LagThreshold time.Duration
	// OnLag hears, for each fetch that brought new events, how long ago the
	// oldest of them was persisted (needs Clock). nil: nobody listens.
	OnLag func(time.Duration)
}

// Load projects a run from its whole log. A log with a hole in runSeq is
// projected as it is and returned Stale, with an alert.
func (p *Projector) Load(ctx context.Context, runID string) (engine.Snapshot, error) {
	return p.resync(ctx, engine.Snapshot{RunID: runID})
}

// Refresh brings snap up to date with the events appended since its
// watermark. A fetch that does not continue the watermark, or that skips a
// runSeq, is not data loss (gaps are legal, ExecutionSemantics §1.0): the
// snapshot is rebuilt from the whole log and returned Stale, with an alert.
// A Stale snapshot is resynced from the whole log at every Refresh until the
// log has no hole or its watermark moved past the one of the resync that
// marked it, so an event that becomes visible late is never skipped.
func (p *Projector) Refresh(ctx context.Context, snap engine.Snapshot) (engine.Snapshot, error) {
	if snap.Stale {
		return p.resync(ctx, snap)
	}
	events, err := p.fetch(ctx, snap.RunID, snap.LastEventSeq)
	if err != nil {
		return snap, err
	}
	if len(events) == 0 {
		return snap, nil
	}
	if holes := holes(snap.LastEventSeq, events); len(holes) > 0 {
		for _, h := range holes {
			if err := p.gapAlert(ctx, snap, h); err != nil {
				return snap, err
			}
		}
		return p.resync(ctx, snap)
	}
	if err := p.checkLag(ctx, snap, events); err != nil {
		return snap, err
	}
	next := engine.Incremental(snap, events)
	return next, p.recordViolations(ctx, next, len(snap.Violations))
}

// resync rebuilds prev's run from the whole log. prev is the snapshot being
// replaced (zero but for RunID on a first load).
func (p *Projector) resync(ctx context.Context, prev engine.Snapshot) (engine.Snapshot, error) {
	events, err := p.fetch(ctx, prev.RunID, 0)
	if err != nil {
		return prev, err
	}
	fresh := engine.Project(prev.RunID, events)
	if fresh.TenantID == "" {
		fresh.TenantID, fresh.ProjectID, fresh.EnvironmentID = prev.TenantID, prev.ProjectID, prev.EnvironmentID
	}
	var newHole bool
	all := holes(0, events)
	for _, h := range all {
		// A hole at or below the last resync's watermark is the one that
		// made prev stale; only holes past it are new observations.
		if h.next > prev.StaleThrough {
			newHole = true
			if err := p.gapAlert(ctx, fresh, h); err != nil {
				return prev, err
			}
		}
	}
	switch {
	case newHole:
		fresh.Stale, fresh.StaleThrough = true, fresh.LastEventSeq
	case prev.Stale && len(all) > 0 && fresh.LastEventSeq <= prev.StaleThrough:
		// Nothing new since the resync that found the hole: keep waiting
		// for the hole to fill or the watermark to move on.
		fresh.Stale, fresh.StaleThrough = true, prev.StaleThrough
	}
	if prev.LastEventSeq > 0 {
		if err := p.checkLag(ctx, prev, after(events, prev.LastEventSeq)); err != nil {
			return prev, err
		}
	}
	return fresh, p.recordViolations(ctx, fresh, 0)
}

// hole is a non-contiguous step of a fetch: runSeq `next` came right
// after runSeq `after`.
type hole struct{ after, next int64 }

func holes(last int64, events []engine.RunEventRecord) []hole {
	var out []hole
	for _, e := range events {
		if engine.DetectNonContiguous(last, e.RunSeq) {
			out = append(out, hole{last, e.RunSeq})
		}
		last = e.RunSeq
	}
	return out
}

func after(events []engine.RunEventRecord, seq int64) []engine.RunEventRecord {
	for i, e := range events {
		if e.RunSeq > seq {
			return events[i:]
		}
	}
	return nil
}

func (p *Projector) gapAlert(ctx context.Context, snap engine.Snapshot, h hole) error {
	payload, _ := json.Marshal(map[string]any{"lastEventSeq": h.after, "nextRunSeq": h.next})
	return p.alert(ctx, engine.Alert{
		Key:      fmt.Sprintf("%s:%s:%d:%d", engine.CodeProjectorNonContiguous, snap.RunID, h.after, h.next),
		Code:     engine.CodeProjectorNonContiguous,
		Severity: engine.SeverityP2,
		RunID:    snap.RunID, TenantID: snap.TenantID, ProjectID: snap.ProjectID, EnvironmentID: snap.EnvironmentID,
		Message: fmt.Sprintf("fetch after runSeq %d returned runSeq %d; snapshot marked STALE and resynced from the full log", h.after, h.next),
		Payload: payload,
	})
}

func (p *Projector) fetch(ctx context.Context, runID string, after int64) ([]engine.RunEventRecord, error) {
	size := p.PageSize
	if size <= 0 {
		size = 1000
	}
	var all []engine.RunEventRecord
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

// checkLag raises PROJECTOR_LAG_HIGH when the oldest newly fetched event
// was persisted more than the threshold ago. The key is per (run, runSeq):
// one alert per lagging fetch, however often it is retried.
func (p *Projector) checkLag(ctx context.Context, snap engine.Snapshot, events []engine.RunEventRecord) error {
	if p.Clock == nil || len(events) == 0 {
		return nil
	}
	limit := p.LagThreshold
	if limit <= 0 {
		limit = DefaultLagThreshold
	}
	oldest := events[0]
	lag := p.Clock.Now().Sub(oldest.PersistedAt)
	if p.OnLag != nil {
		p.OnLag(lag)
	}
	if lag <= limit {
		return nil
	}
	payload, _ := json.Marshal(map[string]any{"runSeq": oldest.RunSeq, "lagMs": lag.Milliseconds(), "thresholdMs": limit.Milliseconds()})
	return p.alert(ctx, engine.Alert{
		Key:      fmt.Sprintf("%s:%s:%d", engine.CodeProjectorLagHigh, snap.RunID, oldest.RunSeq),
		Code:     engine.CodeProjectorLagHigh,
		Severity: engine.SeverityP2,
		RunID:    snap.RunID, TenantID: snap.TenantID, ProjectID: snap.ProjectID, EnvironmentID: snap.EnvironmentID,
		Message: fmt.Sprintf("projection is %s behind runSeq %d (threshold %s)", lag.Round(time.Millisecond), oldest.RunSeq, limit),
		Payload: payload,
	})
}

// recordViolations records INVALID_TRANSITION alerts for violations past
// the first `from` ones; the alert key makes repeats harmless anyway.
func (p *Projector) recordViolations(ctx context.Context, snap engine.Snapshot, from int) error {
	if p.Alerts == nil {
		return nil
	}
	alerts := snap.InvalidTransitionAlerts()
	if err := engine.RecordAlerts(ctx, p.Alerts, alerts[min(from, len(alerts)):]); err != nil {
		return fmt.Errorf("projector: %w", err)
	}
	return nil
}

func (p *Projector) alert(ctx context.Context, a engine.Alert) error {
	if p.Alerts == nil {
		return nil
	}
	if err := engine.RecordAlerts(ctx, p.Alerts, []engine.Alert{a}); err != nil {
		return fmt.Errorf("projector: %w", err)
	}
	return nil
}
