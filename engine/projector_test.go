package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// memLog is an in-memory EventReader and AlertRecorder.
type memLog struct {
	events []engine.RunEventRecord
	alerts map[string]engine.Alert
	calls  int
}

func (m *memLog) ListEvents(_ context.Context, _ string, after int64, limit int) ([]engine.RunEventRecord, error) {
	var out []engine.RunEventRecord
	for _, e := range m.events {
		if e.RunSeq > after && (limit <= 0 || len(out) < limit) {
			out = append(out, e)
		}
	}
	return out, nil
}

func (m *memLog) RecordAlert(_ context.Context, a engine.Alert) (bool, error) {
	m.calls++
	if m.alerts == nil {
		m.alerts = map[string]engine.Alert{}
	}
	if _, ok := m.alerts[a.Key]; ok {
		return false, nil
	}
	m.alerts[a.Key] = a
	return true, nil
}

func (m *memLog) count(code engine.Code) int {
	n := 0
	for _, a := range m.alerts {
		if a.Code == code {
			n++
		}
	}
	return n
}

func TestProjectorRefreshFollowsTheLog(t *testing.T) {
	s := running().add(engine.StepStarted, "a", 1, "")
	log := &memLog{events: s.recs}
	p := &engine.Projector{Events: log, Alerts: log, PageSize: 2}
	ctx := context.Background()
	snap, err := p.Load(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	s.add(engine.StepCompleted, "a", 1, "").add(engine.RunCompleted, "", 1, "")
	log.events = s.recs
	snap, err = p.Refresh(ctx, snap)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Stale || snap.Status != engine.StatusCompleted || snap.LastEventSeq != 5 {
		t.Fatalf("after refresh: %+v", snap)
	}
}

func TestProjectorResyncsOnGap(t *testing.T) {
	s := running().add(engine.StepStarted, "a", 1, "").add(engine.StepCompleted, "a", 1, "")
	log := &memLog{events: s.recs[:2]}
	p := &engine.Projector{Events: log, Alerts: log}
	ctx := context.Background()
	snap, _ := p.Load(ctx, "r1")
	log.events = append(append([]engine.RunEventRecord{}, s.recs[:2]...), s.recs[3]) // runSeq 4 visible, 3 not yet
	got, err := p.Refresh(ctx, snap)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Stale || got.LastEventSeq != 4 {
		t.Fatalf("want a stale resynced snapshot at seq 4, got stale=%v seq=%d", got.Stale, got.LastEventSeq)
	}
	if n := log.count(engine.CodeProjectorNonContiguous); n != 1 {
		t.Fatalf("%d non-contiguous alerts, want 1", n)
	}
	// The resync itself found StepCompleted without StepStarted: Policy A.
	if !got.Inconsistent {
		t.Fatalf("resynced snapshot should flag the orphan completion")
	}
	// Once the missing event is visible, a full load is consistent again.
	log.events = s.recs
	again, err := p.Load(ctx, "r1")
	if err != nil || again.Inconsistent || again.Stale {
		t.Fatalf("reload: %v %+v", err, again)
	}
}

func TestProjectorRecordsInvalidTransitionOnce(t *testing.T) {
	s := running().add(engine.StepCompleted, "ghost", 1, "")
	log := &memLog{events: s.recs}
	p := &engine.Projector{Events: log, Alerts: log}
	ctx := context.Background()
	for range 3 {
		if _, err := p.Load(ctx, "r1"); err != nil {
			t.Fatal(err)
		}
	}
	if n := log.count(engine.CodeInvalidTransition); n != 1 {
		t.Fatalf("%d INVALID_TRANSITION alerts stored, want exactly 1", n)
	}
}

func TestProjectorLagAlert(t *testing.T) {
	s := running()
	log := &memLog{events: s.recs[:1]}
	now := s.recs[1].PersistedAt.Add(6 * time.Second)
	p := &engine.Projector{Events: log, Alerts: log, Clock: engine.ClockFunc(func() time.Time { return now })}
	ctx := context.Background()
	snap, _ := p.Load(ctx, "r1")
	log.events = s.recs
	if _, err := p.Refresh(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if n := log.count(engine.CodeProjectorLagHigh); n != 1 {
		t.Fatalf("%d lag alerts, want 1 (event 6s old, threshold 5s)", n)
	}
}
