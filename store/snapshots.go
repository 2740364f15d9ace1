package store

import (
	"context"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// SnapshotStore keeps the live projection, dvt_live_snapshots: one row per
// run holding the snapshot's state (engine.Snapshot.MarshalState) with its
// watermark, and a version that makes every write conditional, so that two
// projectors never move a snapshot backwards.
type SnapshotStore interface {
	// PendingSnapshots lists up to limit runs whose log is ahead of their
	// stored snapshot or that have none, then runs whose snapshot is
	// STALE.
	PendingSnapshots(ctx context.Context, limit int) ([]string, error)
	// LoadSnapshot returns a run's stored snapshot state and its version;
	// version 0 and no state when there is none.
	LoadSnapshot(ctx context.Context, runID string) ([]byte, int64, error)
	// SaveSnapshot stores snap when the stored version is still version
	// (0: none stored yet) and reports whether it did.
	SaveSnapshot(ctx context.Context, snap engine.Snapshot, version int64) (bool, error)
}

// Lease is a run's lease as the store sees it now.
type Lease struct {
	Owner     string
	ExpiresAt time.Time
	// Live is whether the lease has not expired by the store's clock: a
	// runner that holds a live lease owns the run.
	Live bool
}

// LeaseReader reads a run's lease without taking it.
type LeaseReader interface {
	// GetLease returns the run's lease; ok is false when no runner holds or
	// held one (never started, or released at the end of a run).
	GetLease(ctx context.Context, runID string) (l Lease, ok bool, err error)
}
