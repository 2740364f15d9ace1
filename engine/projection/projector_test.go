package projection_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/eventgen"
	"github.com/dvtrun/dvtrun/engine/projection"
)

var ctx = context.Background()

// memStore is an in-memory projection.Store: a log per run, alerts keyed
// once, and the snapshot table with versions. visible hides events (a
// reader that does not see them yet).
type memStore struct {
	mu      sync.Mutex
	events  map[string][]engine.RunEventRecord
	hidden  map[int64]bool
	alerts  map[string]engine.Alert
	states  map[string][]byte
	version map[string]int64
	reads   int // ListEvents calls
	read    int // events returned
}

func newMem() *memStore {
	return &memStore{events: map[string][]engine.RunEventRecord{}, hidden: map[int64]bool{}, alerts: map[string]engine.Alert{},
		states: map[string][]byte{}, version: map[string]int64{}}
}

func (m *memStore) add(evs ...engine.RunEventRecord) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range evs {
		m.events[e.RunID] = append(m.events[e.RunID], e)
	}
}

func (m *memStore) ListEvents(_ context.Context, runID string, after int64, limit int) ([]engine.RunEventRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	var out []engine.RunEventRecord
	for _, e := range m.events[runID] {
		if e.RunSeq > after && !m.hidden[e.RunSeq] && (limit <= 0 || len(out) < limit) {
			out = append(out, e)
		}
	}
	m.read += len(out)
	return out, nil
}

func (m *memStore) RecordAlert(_ context.Context, a engine.Alert) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.alerts[a.Key]; ok {
		return false, nil
	}
	m.alerts[a.Key] = a
	return true, nil
}

func (m *memStore) count(code engine.Code) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, a := range m.alerts {
		if a.Code == code {
			n++
		}
	}
	return n
}

func (m *memStore) PendingSnapshots(_ context.Context, limit int) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for id, evs := range m.events {
		snap, err := engine.UnmarshalSnapshotState(m.states[id])
		if m.version[id] == 0 || err != nil || snap.Stale || snap.LastEventSeq < evs[len(evs)-1].RunSeq {
			out = append(out, id)
		}
	}
	return out[:min(limit, len(out))], nil
}

func (m *memStore) LoadSnapshot(_ context.Context, runID string) ([]byte, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.states[runID], m.version[runID], nil
}

func (m *memStore) SaveSnapshot(_ context.Context, snap engine.Snapshot, version int64) (bool, error) {
	state, err := snap.MarshalState()
	if err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.version[snap.RunID] != version {
		return false, nil
	}
	m.states[snap.RunID] = state
	m.version[snap.RunID] = version + 1
	return true, nil
}

func (m *memStore) stored(t *testing.T, runID string) engine.Snapshot {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := engine.UnmarshalSnapshotState(m.states[runID])
	if err != nil {
		t.Fatalf("stored snapshot of %s: %v", runID, err)
	}
	return s
}

// sameProjection fails unless got is the projection want of the same log:
// every field DiffSnapshots compares, and the violations.
func sameProjection(t *testing.T, label string, got, want engine.Snapshot) {
	t.Helper()
	if d := engine.DiffSnapshots(got, want); len(d) > 0 {
		t.Fatalf("%s: incremental differs from full projection: %+v", label, d)
	}
	if !reflect.DeepEqual(got.Violations, want.Violations) && !(len(got.Violations) == 0 && len(want.Violations) == 0) {
		t.Fatalf("%s: violations differ:\n got %+v\nwant %+v", label, got.Violations, want.Violations)
	}
}

// TestIncrementalEqualsFull feeds generated logs (re-deliveries, unknown
// types, invalid transitions, attempts outside 1..64) to a projector in
// chunks, persisting and restoring the snapshot state between chunks as a
// restarted projector would, and compares the result with the projection
// of the whole log.
func TestIncrementalEqualsFull(t *testing.T) {
	opts := []struct {
		name string
		o    eventgen.Options
	}{
		{"plain", eventgen.Options{}},
		{"duplicates", eventgen.Options{Duplicates: true, Noise: 0.3}},
		{"odd", eventgen.Options{Duplicates: true, Odd: true, MaxEvents: 120}},
	}
	for _, o := range opts {
		t.Run(o.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 150; seed++ {
				runID := fmt.Sprintf("run-%d", seed)
				all := eventgen.Stream(seed, runID, o.o)
				m := newMem()
				p := &projection.Projector{Events: m, Alerts: m, PageSize: 7}
				snap := engine.Project(runID, nil)
				var err error
				for i := 0; i < len(all); {
					n := 1 + int(seed*uint64(i+3))%9
					m.add(all[i:min(i+n, len(all))]...)
					i += n
					if snap, err = p.Refresh(ctx, snap); err != nil {
						t.Fatal(err)
					}
					state, err := snap.MarshalState()
					if err != nil {
						t.Fatal(err)
					}
					if snap, err = engine.UnmarshalSnapshotState(state); err != nil {
						t.Fatalf("seed %d: restore: %v", seed, err)
					}
				}
				want := engine.Project(runID, all)
				sameProjection(t, fmt.Sprintf("seed %d", seed), snap, want)
				if snap.Stale {
					t.Fatalf("seed %d: contiguous log projected stale", seed)
				}
				// Re-delivering the whole log changes nothing.
				again := engine.Incremental(snap, all)
				sameProjection(t, fmt.Sprintf("seed %d again", seed), again, want)
			}
		})
	}
}

// TestSnapshotStateKeepsRedeliveryMemory: a restored snapshot still knows
// which events it applied, so a re-delivered StepStarted after a restart is
// not a second start.
func TestSnapshotStateKeepsRedeliveryMemory(t *testing.T) {
	b := newLog("r1")
	b.add(engine.RunQueued, "", 1).add(engine.RunStarted, "", 1).add(engine.StepStarted, "a", 1).add(engine.StepCompleted, "a", 1)
	snap := engine.Project("r1", b.recs)
	state, err := snap.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	restored, err := engine.UnmarshalSnapshotState(state)
	if err != nil {
		t.Fatal(err)
	}
	b.redeliver(2) // StepStarted of a again, at a new runSeq
	got := engine.Incremental(restored, b.recs[4:])
	want := engine.Project("r1", b.recs)
	sameProjection(t, "redelivery", got, want)
	if st, _ := got.Step("a"); st.Status != engine.StepStatusSuccess || got.Inconsistent {
		t.Fatalf("re-delivered StepStarted after restore changed the step: %+v inconsistent=%v", st, got.Inconsistent)
	}

	for _, bad := range []string{`{`, `{"v":99}`, `{"v":1,"snapshot":{"runId":"r","steps":[{"stepId":"a"}]},"seen":{"run":[0,0,0,0,0,0,0,0]}}`} {
		if _, err := engine.UnmarshalSnapshotState([]byte(bad)); engine.CodeOf(err) != engine.CodeStoreCorrupt {
			t.Errorf("state %s: %v, want STORE_CORRUPT", bad, err)
		}
	}
}

// logBuilder builds one run's log with valid envelopes.
type logBuilder struct {
	runID string
	recs  []engine.RunEventRecord
	t0    time.Time
}

func newLog(runID string) *logBuilder {
	return &logBuilder{runID: runID, t0: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
}

func (b *logBuilder) add(t engine.EventType, step string, attempt int) *logBuilder {
	seq := int64(len(b.recs) + 1)
	e := engine.RunEventWrite{
		EventID: fmt.Sprintf("00000000-0000-4000-8000-%012d", seq), EventType: t,
		EmittedAt: b.t0.Add(time.Duration(seq) * time.Second), RunID: b.runID,
		TenantID: "t", ProjectID: "p", EnvironmentID: "e", PlanID: "plan", PlanVersion: "1",
		EngineAttemptID: 1, LogicalAttemptID: attempt, StepID: step,
	}
	if t == engine.StepFailed {
		e.Payload = json.RawMessage(`{"error":{"code":"STEP_FAILED","message":"x"}}`)
	}
	e.IdempotencyKey, _ = engine.KeyOf(e).IdempotencyKey()
	b.recs = append(b.recs, engine.RunEventRecord{RunEventWrite: e, RunSeq: seq, PersistedAt: e.EmittedAt})
	return b
}

func (b *logBuilder) redeliver(i int) *logBuilder {
	d := b.recs[i]
	d.RunSeq = int64(len(b.recs) + 1)
	b.recs = append(b.recs, d)
	return b
}

func TestRefreshFollowsTheLog(t *testing.T) {
	b := newLog("r1").add(engine.RunQueued, "", 1).add(engine.RunStarted, "", 1).add(engine.StepStarted, "a", 1)
	m := newMem()
	m.add(b.recs...)
	p := &projection.Projector{Events: m, Alerts: m, PageSize: 2}
	snap, err := p.Load(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	b.add(engine.StepCompleted, "a", 1).add(engine.RunCompleted, "", 1)
	m.add(b.recs[3:]...)
	snap, err = p.Refresh(ctx, snap)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Stale || snap.Status != engine.StatusCompleted || snap.LastEventSeq != 5 {
		t.Fatalf("after refresh: %+v", snap)
	}
}

// TestGapMarksStaleUntilResolved: runSeq 4 is not visible when 5 is. The
// projector alerts once, resyncs and marks the snapshot STALE; while stale
// it resyncs from the whole log, so when 4 appears it is applied (never
// skipped below the watermark), and the snapshot is trusted again.
func TestGapMarksStaleUntilResolved(t *testing.T) {
	b := newLog("r1").add(engine.RunQueued, "", 1).add(engine.RunStarted, "", 1).
		add(engine.StepStarted, "a", 1).add(engine.StepStarted, "b", 1).add(engine.StepCompleted, "a", 1)
	m := newMem()
	m.add(b.recs[:2]...)
	p := &projection.Projector{Events: m, Alerts: m}
	snap, err := p.Load(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	m.add(b.recs[2:]...)
	m.hidden[4] = true // StepStarted b committed late
	cases := []struct {
		name       string
		reveal     bool
		wantStale  bool
		wantSeq    int64
		wantAlerts int
		wantB      engine.StepStatus
	}{
		{"gap observed", false, true, 5, 1, ""},
		{"still hidden: stays stale, no new alert", false, true, 5, 1, ""},
		{"hole filled: trusted again", true, false, 5, 1, engine.StepStatusRunning},
	}
	for _, tc := range cases {
		if tc.reveal {
			delete(m.hidden, 4)
		}
		if snap, err = p.Refresh(ctx, snap); err != nil {
			t.Fatal(err)
		}
		if snap.Stale != tc.wantStale || snap.LastEventSeq != tc.wantSeq {
			t.Fatalf("%s: stale=%v seq=%d, want stale=%v seq=%d", tc.name, snap.Stale, snap.LastEventSeq, tc.wantStale, tc.wantSeq)
		}
		if n := m.count(engine.CodeProjectorNonContiguous); n != tc.wantAlerts {
			t.Fatalf("%s: %d non-contiguous alerts, want %d", tc.name, n, tc.wantAlerts)
		}
		st, _ := snap.Step("b")
		if st.Status != tc.wantB {
			t.Fatalf("%s: step b is %q, want %q", tc.name, st.Status, tc.wantB)
		}
	}
	sameProjection(t, "after the gap", snap, engine.Project("r1", b.recs))

	// A hole that never fills (gaps are legal): the snapshot is trusted
	// again once the watermark moves past the resync that saw it.
	b2 := newLog("r2").add(engine.RunQueued, "", 1).add(engine.RunStarted, "", 1).add(engine.StepStarted, "a", 1).add(engine.StepCompleted, "a", 1)
	m.add(b2.recs[0], b2.recs[1], b2.recs[3])
	s2, err := p.Load(ctx, "r2")
	if err != nil || !s2.Stale || s2.StaleThrough != 4 {
		t.Fatalf("load over a hole: err=%v stale=%v through=%d", err, s2.Stale, s2.StaleThrough)
	}
	b2.add(engine.RunCompleted, "", 1)
	m.add(b2.recs[4])
	if s2, err = p.Refresh(ctx, s2); err != nil || s2.Stale || s2.Status != engine.StatusCompleted {
		t.Fatalf("after the watermark moved on: err=%v stale=%v status=%s", err, s2.Stale, s2.Status)
	}
}

func TestRecordsInvalidTransitionOnce(t *testing.T) {
	b := newLog("r1").add(engine.RunQueued, "", 1).add(engine.RunStarted, "", 1).add(engine.StepCompleted, "ghost", 1)
	m := newMem()
	m.add(b.recs...)
	p := &projection.Projector{Events: m, Alerts: m}
	for range 3 {
		if _, err := p.Load(ctx, "r1"); err != nil {
			t.Fatal(err)
		}
	}
	if n := m.count(engine.CodeInvalidTransition); n != 1 {
		t.Fatalf("%d INVALID_TRANSITION alerts stored, want exactly 1", n)
	}
}

// TestLagAlert: an event fetched more than 5 s after it was persisted
// raises PROJECTOR_LAG_HIGH once; at 5 s or less it does not; OnLag hears
// the lag either way. The clock is injected.
func TestLagAlert(t *testing.T) {
	cases := []struct {
		age  time.Duration
		want int
	}{
		{4 * time.Second, 0},
		{5 * time.Second, 0},
		{6 * time.Second, 1},
	}
	for _, tc := range cases {
		t.Run(tc.age.String(), func(t *testing.T) {
			b := newLog("r1").add(engine.RunQueued, "", 1).add(engine.RunStarted, "", 1)
			m := newMem()
			m.add(b.recs[0])
			now := b.recs[1].PersistedAt.Add(tc.age)
			var lag time.Duration
			p := &projection.Projector{Events: m, Alerts: m, Clock: engine.ClockFunc(func() time.Time { return now }), OnLag: func(d time.Duration) { lag = d }}
			snap, err := p.Load(ctx, "r1")
			if err != nil {
				t.Fatal(err)
			}
			m.add(b.recs[1])
			for range 2 { // a retried fetch does not alert twice
				if _, err := p.Refresh(ctx, snap); err != nil {
					t.Fatal(err)
				}
			}
			if n := m.count(engine.CodeProjectorLagHigh); n != tc.want {
				t.Fatalf("%d lag alerts for an event %s old, want %d", n, tc.age, tc.want)
			}
			if lag != tc.age {
				t.Fatalf("OnLag heard %s, want %s", lag, tc.age)
			}
		})
	}
}
