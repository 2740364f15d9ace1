package projection

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/service"
)

// Store is what the Service needs of the state store: the log, alerts, and
// the snapshot table (store.SnapshotStore).
type Store interface {
	engine.EventReader
	engine.AlertRecorder
	// PendingSnapshots lists up to limit runs whose log is ahead of their
	// stored snapshot (or that have none, or whose snapshot is STALE).
	PendingSnapshots(ctx context.Context, limit int) ([]string, error)
	// LoadSnapshot returns a run's stored snapshot state and its version;
	// version 0 and no state when the run has none.
	LoadSnapshot(ctx context.Context, runID string) ([]byte, int64, error)
	// SaveSnapshot stores snap if the stored version is still version (0:
	// no row yet) and reports whether it did.
	SaveSnapshot(ctx context.Context, snap engine.Snapshot, version int64) (bool, error)
}

// Service keeps the store's snapshot table current: every Interval it
// projects the runs whose log moved past their stored watermark, from that
// watermark. It is a service.Service: Start returns once the service runs,
// Stop waits until it stopped and may be called twice.
type Service struct {
	Store Store
	Clock engine.Clock // for PROJECTOR_LAG_HIGH; nil: lag is not measured
	// Interval between polls when nothing is pending (default 1s).
	Interval time.Duration
	// Batch is the number of runs a poll projects (default 100); a full
	// batch is followed by the next one at once.
	Batch        int
	LagThreshold time.Duration // default 5s
	// OnError hears the errors of a poll; the service carries on at the
	// next one. nil: errors are dropped.
	OnError func(error)

	loop service.Loop
	lag  atomic.Int64 // the last poll's largest lag, in nanoseconds
}

// Start runs the service in the background until Stop or ctx ends. Starting
// a running service is an error (service.ErrStarted).
func (s *Service) Start(ctx context.Context) error {
	if s.Store == nil {
		return engine.Errorf(engine.CodeInvalidArgument, "projection service needs a store")
	}
	return s.loop.Start(ctx, s.run)
}

// Stop stops the service and waits until its poll has finished. Stopping a
// stopped (or never started) service does nothing.
func (s *Service) Stop() { s.loop.Stop() }

// Running reports whether the service runs (for readiness).
func (s *Service) Running() bool { return s.loop.Running() }

func (s *Service) run(ctx context.Context) {
	interval := s.Interval
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := s.ProjectPending(ctx)
		if err != nil && ctx.Err() == nil && s.OnError != nil {
			s.OnError(err)
		}
		wait := interval
		if err == nil && n >= s.batch() {
			wait = 0 // a full batch moved: more are likely waiting
		}
		t.Reset(wait)
	}
}

func (s *Service) batch() int {
	if s.Batch <= 0 {
		return 100
	}
	return s.Batch
}

func (s *Service) projector(onLag func(time.Duration)) *Projector {
	return &Projector{Events: s.Store, Alerts: s.Store, Clock: s.Clock, LagThreshold: s.LagThreshold, OnLag: onLag}
}

// Lag is how far behind the log the last poll found the projection: the age
// of the oldest event it fetched anew, 0 when it fetched none (or Clock is
// nil). It feeds /metrics.
func (s *Service) Lag() time.Duration { return time.Duration(s.lag.Load()) }

// ProjectPending projects one batch of pending runs and returns how many
// snapshots it stored. A failing run does not stop the others; the first
// error is returned.
func (s *Service) ProjectPending(ctx context.Context) (int, error) {
	runs, err := s.Store.PendingSnapshots(ctx, s.batch())
	if err != nil {
		return 0, fmt.Errorf("projection: list pending runs: %w", err)
	}
	var first error
	stored := 0
	var lag time.Duration
	p := s.projector(func(d time.Duration) { lag = max(lag, d) })
	defer func() { s.lag.Store(int64(lag)) }()
	for _, id := range runs {
		if ctx.Err() != nil {
			return stored, ctx.Err()
		}
		_, saved, err := s.projectRun(ctx, p, id)
		if err != nil && first == nil {
			first = err
		}
		if saved {
			stored++
		}
	}
	return stored, first
}

// ProjectRun brings one run's stored snapshot up to date and stores it. A
// stored state that does not decode is rebuilt from the log. When another
// projector stored a newer version meanwhile, its snapshot stands.
func (s *Service) ProjectRun(ctx context.Context, runID string) (engine.Snapshot, error) {
	snap, _, err := s.projectRun(ctx, s.projector(nil), runID)
	return snap, err
}

func (s *Service) projectRun(ctx context.Context, p *Projector, runID string) (engine.Snapshot, bool, error) {
	state, version, err := s.Store.LoadSnapshot(ctx, runID)
	if err != nil {
		return engine.Snapshot{}, false, fmt.Errorf("projection: load snapshot of run %s: %w", runID, err)
	}
	var snap engine.Snapshot
	prev, derr := engine.UnmarshalSnapshotState(state)
	if version == 0 || derr != nil {
		snap, err = p.Load(ctx, runID)
	} else {
		snap, err = p.Refresh(ctx, prev)
	}
	if err != nil {
		return snap, false, err
	}
	if version > 0 && derr == nil && snap.LastEventSeq == prev.LastEventSeq && snap.Stale == prev.Stale && snap.StaleThrough == prev.StaleThrough {
		return snap, false, nil // nothing moved
	}
	saved, err := s.Store.SaveSnapshot(ctx, snap, version)
	if err != nil {
		return snap, false, fmt.Errorf("projection: save snapshot of run %s: %w", runID, err)
	}
	return snap, saved, nil
}
