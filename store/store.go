// Package store defines the state store every backend implements (SQLite,
// Postgres, Snowflake) and, in store/storetest, the conformance suite they
// all pass.
//
// The store is the append authority of RunEvents v2.0.1: it validates events
// before anything is written (SCHEMA_VALIDATION_FAILED), assigns runSeq per
// run, deduplicates on (runId, idempotencyKey) by returning the stored record,
// and writes events, run metadata and outbox rows in one transaction.
package store

import (
	"context"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// Store is the state store.
type Store interface {
	// BootstrapRun writes the run's metadata and its first events (normally
	// RunQueued alone) with their outbox rows in one transaction. It fails
	// with RUN_ALREADY_EXISTS if the run exists and never leaves a partial run.
	// The same transaction binds the events' eventIds in the EventIdRegistry
	// (RunEvents §2.5.1, the registry write before the append): an eventId
	// already reserved for a key is kept (the event is stored, and returned,
	// with it), any other key is bound to its event's eventId. The caller
	// needs no ReserveEventIDs before it.
	BootstrapRun(ctx context.Context, meta engine.RunMetadata, first []engine.RunEventWrite) (engine.AppendResult, error)

	// AppendAndEnqueue appends events to an existing run in one transaction:
	// it locks the run's sequence row, assigns runSeq to events whose
	// idempotency key is new, inserts them and enqueues only them. Events
	// whose key exists come back in Deduped with the stored eventId, runSeq
	// and persistedAt. RUN_NOT_FOUND if the run was never bootstrapped;
	// INVALID_TRANSITION (when transition checks are on) writes nothing.
	AppendAndEnqueue(ctx context.Context, runID string, events []engine.RunEventWrite) (engine.AppendResult, error)

	// ListEvents returns up to limit events with runSeq > afterSeq in runSeq
	// order (limit <= 0: no limit).
	ListEvents(ctx context.Context, runID string, afterSeq int64, limit int) ([]engine.RunEventRecord, error)

	// ListStepEvents returns the events of one step of a run in runSeq
	// order (none for a step the log never mentions).
	ListStepEvents(ctx context.Context, runID, stepID string) ([]engine.RunEventRecord, error)

	// GetRun returns a run's metadata or RUN_NOT_FOUND.
	GetRun(ctx context.Context, runID string) (engine.RunMetadata, error)

	// ListRuns is the run history: the runs f selects, newest first
	// (created_at, then run id, descending), at most f.Limit, after
	// f.After; each with its status, trigger, times and first failure.
	ListRuns(ctx context.Context, f RunFilter) ([]RunSummary, error)

	// SetProviderRunRef records the adapter's reference once it has started.
	SetProviderRunRef(ctx context.Context, runID, ref string) error

	// ReserveEventIDs is the durable EventIdRegistry (RunEvents §2.5.1). For
	// each idempotency key in candidates it returns the eventId already bound
	// to (runID, key) — reserved earlier or persisted — or binds and returns
	// the candidate.
	ReserveEventIDs(ctx context.Context, runID string, candidates map[string]string) (map[string]string, error)

	// RecordAlert stores an alert once per Key and reports whether this call
	// inserted it.
	RecordAlert(ctx context.Context, a engine.Alert) (bool, error)

	// ListAlerts returns a run's alerts in creation order ("" = all runs).
	ListAlerts(ctx context.Context, runID string) ([]engine.Alert, error)

	// SendSignal stores a signal for a run; the store assigns Seq and
	// CreatedAt. Sending a SignalID twice returns the stored signal.
	SendSignal(ctx context.Context, s engine.Signal) (engine.Signal, error)

	// ListSignals returns a run's signals with Seq > afterSeq in Seq order.
	ListSignals(ctx context.Context, runID string, afterSeq int64) ([]engine.Signal, error)

	// AcquireLease makes owner the holder of the run's lease until now+ttl
	// (store clock) if the lease is free, expired or already owner's;
	// otherwise LEASE_HELD. Calling it again renews.
	AcquireLease(ctx context.Context, runID, owner string, ttl time.Duration) error

	// ReleaseLease frees the lease if owner holds it.
	ReleaseLease(ctx context.Context, runID, owner string) error

	LeaseReader
	SnapshotStore

	// AcquireFencedLease is AcquireLease returning the lease with its fence
	// token: renewals by the owner keep the fence, and it grows by one each
	// time the lease passes to another owner (takeover after expiry, or an
	// acquire after a release).
	AcquireFencedLease(ctx context.Context, runID, owner string, ttl time.Duration) (engine.Lease, error)

	// AppendFenced is AppendAndEnqueue by the holder of lease: under the
	// same lock it checks that the run's lease still has lease's owner and
	// fence, and otherwise refuses with LEASE_LOST and writes nothing.
	AppendFenced(ctx context.Context, lease engine.Lease, events []engine.RunEventWrite) (engine.AppendResult, error)

	// Pulse is a process's heartbeat for all its runs in one call (one
	// request on Snowflake): each asked run's lease whose row still has
	// owner and the run's Fence — expired or not; a released lease is not
	// renewed — gets expires_at = now+ttl (store clock, as
	// AcquireFencedLease decides it), its fence unchanged. Leases holds
	// every asked run that has a lease row, as stored after the renewal
	// (another owner or fence when it passed on); Signals the asked runs'
	// signals with Seq > AfterSignal, ordered by run id then Seq. No runs:
	// an empty result and no request. A run asked twice is
	// INVALID_ARGUMENT, as is an empty owner.
	Pulse(ctx context.Context, owner string, ttl time.Duration, runs []engine.PulseRun) (engine.PulseResult, error)

	// PutPlanBundle and GetPlanBundle keep the plan bundles runs and
	// requests were created with, by sha256 (BundleSQL).
	plan.BundleStore

	Close() error
}
