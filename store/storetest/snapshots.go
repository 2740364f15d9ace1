package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store"
)

// testSnapshots: the live projection's table. Writes are conditional on the
// version read, the watermark survives a reopen, and a run is pending while
// its log is ahead of its snapshot or its snapshot is STALE.
func testSnapshots(t *testing.T, b Backend) {
	s := open(t, b)
	f := NewFixture()
	f.Bootstrap(t, s)
	run := f.Meta.RunID
	pending := func() bool {
		t.Helper()
		ids, err := s.PendingSnapshots(ctx, 100000)
		if err != nil {
			t.Fatalf("PendingSnapshots: %v", err)
		}
		return slices.Contains(ids, run)
	}
	load := func() (engine.Snapshot, int64) {
		t.Helper()
		state, version, err := s.LoadSnapshot(ctx, run)
		if err != nil {
			t.Fatalf("LoadSnapshot: %v", err)
		}
		if version == 0 {
			if state != nil {
				t.Fatalf("version 0 with a state")
			}
			return engine.Snapshot{}, 0
		}
		snap, err := engine.UnmarshalSnapshotState(state)
		if err != nil {
			t.Fatalf("stored state: %v", err)
		}
		return snap, version
	}
	save := func(snap engine.Snapshot, version int64, want bool) {
		t.Helper()
		ok, err := s.SaveSnapshot(ctx, snap, version)
		if err != nil || ok != want {
			t.Fatalf("SaveSnapshot(version %d) = %v, %v; want %v", version, ok, err, want)
		}
	}

	if _, v := load(); v != 0 || !pending() {
		t.Fatalf("a new run: version %d, pending %v; want 0, pending", v, pending())
	}
	snap := engine.Project(run, events(t, s, run))
	save(snap, 0, true)
	save(snap, 0, false) // a second first write loses
	got, v := load()
	if v != 1 || got.LastEventSeq != 2 || got.Status != engine.StatusRunning || pending() {
		t.Fatalf("after the first save: version %d, seq %d, status %s, pending %v", v, got.LastEventSeq, got.Status, pending())
	}

	if _, err := s.AppendAndEnqueue(ctx, run, []engine.RunEventWrite{f.Event(engine.StepStarted, "model.a", 1)}); err != nil {
		t.Fatal(err)
	}
	if !pending() {
		t.Fatal("a run whose log moved past its snapshot is not pending")
	}
	next := engine.Incremental(got, events(t, s, run))
	save(next, 1, true)
	save(got, 1, false) // a projector that read version 1 cannot write it back
	got, v = load()
	if v != 2 || got.LastEventSeq != 3 || got.InFlight() != 1 || pending() {
		t.Fatalf("after the conditional update: version %d, seq %d, in flight %d, pending %v", v, got.LastEventSeq, got.InFlight(), pending())
	}
	if d := engine.DiffSnapshots(got, engine.Project(run, events(t, s, run))); len(d) > 0 {
		t.Fatalf("stored snapshot differs from the log's projection: %+v", d)
	}

	got.Stale, got.StaleThrough = true, got.LastEventSeq
	save(got, 2, true)
	if !pending() {
		t.Fatal("a STALE snapshot is not pending")
	}
	if again, _ := load(); !again.Stale || again.StaleThrough != 3 {
		t.Fatalf("stale flag not stored: %+v", again)
	}

	// Another handle (another process) reads the same watermark.
	other := open(t, b)
	state, version, err := other.LoadSnapshot(ctx, run)
	if err != nil || version != 3 {
		t.Fatalf("second handle: version %d, %v", version, err)
	}
	if snap, err := engine.UnmarshalSnapshotState(state); err != nil || snap.LastEventSeq != 3 {
		t.Fatalf("second handle: %v, seq %d", err, snap.LastEventSeq)
	}
}

// testGetLease: reading a lease tells whether a live runner owns the run.
func testGetLease(t *testing.T, b Backend) {
	s := open(t, b)
	f := NewFixture()
	f.Bootstrap(t, s)
	run := f.Meta.RunID
	get := func() (store.Lease, bool) {
		t.Helper()
		l, ok, err := s.GetLease(ctx, run)
		if err != nil {
			t.Fatalf("GetLease: %v", err)
		}
		return l, ok
	}
	if _, ok := get(); ok {
		t.Fatal("a run never started has a lease")
	}
	if err := s.AcquireLease(ctx, run, "worker-a", time.Minute); err != nil {
		t.Fatal(err)
	}
	if l, ok := get(); !ok || !l.Live || l.Owner != "worker-a" || l.ExpiresAt.IsZero() {
		t.Fatalf("held lease reads %+v, %v", l, ok)
	}
	if b.Advance != nil {
		b.Advance(2 * time.Minute)
		if l, ok := get(); !ok || l.Live {
			t.Fatalf("expired lease reads %+v, %v; want present and not live", l, ok)
		}
		if err := s.AcquireLease(ctx, run, "worker-a", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ReleaseLease(ctx, run, "worker-a"); err != nil {
		t.Fatal(err)
	}
	if _, ok := get(); ok {
		t.Fatal("a released lease still reads as held")
	}
}
