package projection_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/projection"
	"github.com/dvtrun/dvtrun/engine/service"
	"github.com/dvtrun/dvtrun/engine/service/servicetest"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// countingStore records from which watermark each ListEvents call reads.
type countingStore struct {
	*sqlite.Store
	mu    sync.Mutex
	after []int64
}

func (c *countingStore) ListEvents(ctx context.Context, runID string, after int64, limit int) ([]engine.RunEventRecord, error) {
	c.mu.Lock()
	c.after = append(c.after, after)
	c.mu.Unlock()
	return c.Store.ListEvents(ctx, runID, after, limit)
}

func (c *countingStore) reads() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.after
	c.after = nil
	return out
}

// TestServiceRestartContinuesFromWatermark runs the service on a real
// SQLite store, stops it, appends, and starts a new service (a restarted
// process): it reads only the events past the persisted watermark, and the
// stored snapshot equals the projection of the whole log.
func TestServiceRestartContinuesFromWatermark(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	open := func() *countingStore {
		return &countingStore{Store: servicetest.OpenSQLite(t, path)}
	}
	st := open()
	f := storetest.NewFixture()
	f.Bootstrap(t, st)
	runID := f.Meta.RunID
	appendEvents := func(evs ...engine.RunEventWrite) {
		t.Helper()
		if _, err := st.AppendAndEnqueue(ctx, runID, evs); err != nil {
			t.Fatal(err)
		}
	}
	appendEvents(f.Event(engine.StepStarted, "model.a", 1), f.Event(engine.StepStarted, "model.b", 1))

	svc := &projection.Service{Store: st}
	if n, err := svc.ProjectPending(ctx); err != nil || n != 1 {
		t.Fatalf("first pass: %d runs, %v", n, err)
	}
	state, version, err := st.LoadSnapshot(ctx, runID)
	if err != nil || version != 1 {
		t.Fatalf("stored version %d, %v", version, err)
	}
	first, _ := engine.UnmarshalSnapshotState(state)
	if first.LastEventSeq != 4 || first.InFlight() != 2 {
		t.Fatalf("first snapshot: seq %d, %d in flight", first.LastEventSeq, first.InFlight())
	}
	if n, _ := svc.ProjectPending(ctx); n != 0 {
		t.Fatalf("%d runs pending after projecting everything", n)
	}

	// A new process: nothing in memory but the store.
	st2 := open()
	appendEvents(f.Event(engine.StepCompleted, "model.a", 1), f.Event(engine.StepCompleted, "model.b", 1), f.Event(engine.RunCompleted, "", 1))
	st2.reads()
	svc2 := &projection.Service{Store: st2, Interval: 10 * time.Millisecond}
	if err := svc2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := svc2.Start(ctx); !errors.Is(err, service.ErrStarted) {
		t.Fatal("a second Start of a running service must fail")
	}
	servicetest.WaitFor(t, "the snapshot of the completed run", func() bool {
		state, _, _ := st2.LoadSnapshot(ctx, runID)
		s, err := engine.UnmarshalSnapshotState(state)
		return err == nil && s.Status == engine.StatusCompleted
	})
	svc2.Stop()
	svc2.Stop() // a double stop is harmless
	for _, after := range st2.reads() {
		if after < 4 {
			t.Fatalf("restarted service read the log from runSeq %d, not from the persisted watermark 4", after)
		}
	}
	state, _, _ = st2.LoadSnapshot(ctx, runID)
	got, _ := engine.UnmarshalSnapshotState(state)
	all, _ := st2.ListEvents(ctx, runID, 0, 0)
	sameProjection(t, "after restart", got, engine.Project(runID, all))
}

// TestServiceTwoProjectors: two services on one store never move a
// snapshot backwards (each write is conditional on the version it read).
func TestServiceTwoProjectors(t *testing.T) {
	m := newMem()
	b := newLog("r1").add(engine.RunQueued, "", 1).add(engine.RunStarted, "", 1)
	m.add(b.recs...)
	a, c := &projection.Service{Store: m}, &projection.Service{Store: m}
	if _, err := a.ProjectRun(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	// c read version 1; a moves on to version 2 first.
	state, version, _ := m.LoadSnapshot(ctx, "r1")
	stale, _ := engine.UnmarshalSnapshotState(state)
	b.add(engine.StepStarted, "x", 1)
	m.add(b.recs[2])
	if _, err := a.ProjectRun(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if ok, err := m.SaveSnapshot(ctx, stale, version); ok || err != nil {
		t.Fatalf("a write on an old version must lose: ok=%v err=%v", ok, err)
	}
	if got := m.stored(t, "r1"); got.LastEventSeq != 3 {
		t.Fatalf("stored watermark %d, want 3", got.LastEventSeq)
	}
	if _, err := c.ProjectRun(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if got := m.stored(t, "r1"); got.LastEventSeq != 3 {
		t.Fatalf("stored watermark %d after the second projector, want 3", got.LastEventSeq)
	}
}

// TestServiceRebuildsCorruptState: a stored state that does not decode is
// rebuilt from the log instead of wedging the run.
func TestServiceRebuildsCorruptState(t *testing.T) {
	m := newMem()
	b := newLog("r1").add(engine.RunQueued, "", 1).add(engine.RunStarted, "", 1)
	m.add(b.recs...)
	m.states["r1"], m.version["r1"] = []byte("{not json"), 1
	svc := &projection.Service{Store: m}
	if n, err := svc.ProjectPending(ctx); err != nil || n != 1 {
		t.Fatalf("pass: %d, %v", n, err)
	}
	if got := m.stored(t, "r1"); got.Status != engine.StatusRunning || got.LastEventSeq != 2 {
		t.Fatalf("rebuilt snapshot: %+v", got)
	}
}
