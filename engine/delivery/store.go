// Package delivery takes events out of the state store's outbox and delivers
// them to sinks (a Standard Webhooks endpoint, a JSONL file): at least once,
// per sink, in run_seq order within a run, with exponential backoff, jitter
// and a dead letter (ExecutionSemantics §4). Several delivery processes share
// the work through conditional-update claims in the store, so in normal
// operation nothing is delivered twice. Signed audit checkpoints travel the
// same way, as a stream of their own (checkpoint.go).
package delivery

import (
	"context"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// State is a delivery's state for one (sink, event).
type State string

// Delivery states. A DEAD delivery holds back its run's later events for
// the sink until it is retried (order within a run is never broken).
const (
	StatePending   State = "PENDING"
	StateDelivered State = "DELIVERED"
	StateDead      State = "DEAD"
)

// Valid reports whether s is a known state.
func (s State) Valid() bool {
	return s == StatePending || s == StateDelivered || s == StateDead
}

// Delivery is the state of one event for one sink (a dvt_deliveries row).
// Event (or Checkpoint, in the checkpoint stream) is filled by Claim only;
// List fills EventType from the log (CheckpointEventType for a checkpoint).
type Delivery struct {
	Sink          string                `json:"sink"`
	EventID       string                `json:"eventId"`
	RunID         string                `json:"runId"`
	RunSeq        int64                 `json:"runSeq"`
	EventType     engine.EventType      `json:"eventType"`
	State         State                 `json:"state"`
	Attempts      int                   `json:"attempts"`
	NextAttemptAt time.Time             `json:"nextAttemptAt"`
	LastError     string                `json:"lastError,omitempty"`
	CreatedAt     time.Time             `json:"createdAt"`
	DeliveredAt   *time.Time            `json:"deliveredAt,omitempty"`
	Event         engine.RunEventRecord `json:"-"`
	// Checkpoint is set instead of Event when RunID is CheckpointRunID.
	Checkpoint *CheckpointRecord `json:"-"`
}

// Failure settles one claimed delivery that failed.
type Failure struct {
	EventID string
	Error   string
	// RetryAfter is how long from the database's now the next attempt waits.
	RetryAfter time.Duration
	// Dead moves the delivery to the dead letter instead.
	Dead bool
}

// Filter narrows List. Empty fields match everything.
type Filter struct {
	Sink    string
	State   State
	EventID string
	Limit   int // <= 0: 1000
}

// Store is what delivery needs of the state store. Times that decide a claim
// (due, claim expiry) are the database's clock, never a process's, so
// processes with skewed clocks still exclude each other.
type Store interface {
	// EnqueueDeliveries gives sink a PENDING delivery, due now, for every
	// outbox event and every stored audit checkpoint that has none yet; it
	// returns how many it created.
	// Concurrent callers create each delivery once.
	EnqueueDeliveries(ctx context.Context, sink string) (int, error)

	// ClaimDeliveries marks up to limit due, unclaimed PENDING deliveries of
	// sink as claimed by claimID until the database's now + ttl, and returns
	// them with their events in (runId, runSeq) order. It claims only a
	// prefix of each run's undelivered events: nothing behind a claimed,
	// backing-off or dead delivery of the same run. One conditional UPDATE
	// decides, so concurrent claimers never share a delivery.
	ClaimDeliveries(ctx context.Context, sink, claimID string, limit int, ttl time.Duration) ([]Delivery, error)

	// MarkDelivered settles claimed deliveries as DELIVERED (attempts+1).
	// Deliveries claimID no longer holds are left alone.
	MarkDelivered(ctx context.Context, sink, claimID string, eventIDs []string) error

	// MarkFailed records a failed attempt (attempts+1, last error) and either
	// schedules the next one or moves the delivery to the dead letter; the
	// claim is released either way.
	MarkFailed(ctx context.Context, sink, claimID string, f Failure) error

	// ReleaseClaim gives back what claimID still holds, unattempted.
	ReleaseClaim(ctx context.Context, sink, claimID string) error

	// RetryDead moves dead deliveries back to PENDING, due now, with their
	// attempts reset: all of them ("" eventID) or one event's, of one sink
	// ("" sink: every sink). It returns how many it moved.
	RetryDead(ctx context.Context, sink, eventID string) (int, error)

	// ListDeliveries returns deliveries in (runId, runSeq, sink) order.
	ListDeliveries(ctx context.Context, f Filter) ([]Delivery, error)

	engine.AlertRecorder // the dead letter's alert
}

// AttachEvents fills the Event of each delivery from the log, one read per
// run (the checkpoint stream's from the stored checkpoints, l being a
// CheckpointReader): a claim holds a prefix of each run's undelivered events, so the
// runSeqs of one run's claimed deliveries lie in one short range. Stores use
// it in ClaimDeliveries.
func AttachEvents(ctx context.Context, l engine.EventReader, ds []Delivery) error {
	for i := 0; i < len(ds); {
		j := i
		lo, hi := ds[i].RunSeq, ds[i].RunSeq
		for j < len(ds) && ds[j].RunID == ds[i].RunID {
			lo, hi = min(lo, ds[j].RunSeq), max(hi, ds[j].RunSeq)
			j++
		}
		if ds[i].RunID == CheckpointRunID {
			if err := attachCheckpoints(ctx, l, ds[i:j], lo, hi); err != nil {
				return err
			}
			i = j
			continue
		}
		recs, err := l.ListEvents(ctx, ds[i].RunID, lo-1, int(hi-lo+1))
		if err != nil {
			return err
		}
		bySeq := make(map[int64]engine.RunEventRecord, len(recs))
		for _, r := range recs {
			bySeq[r.RunSeq] = r
		}
		for k := i; k < j; k++ {
			r, ok := bySeq[ds[k].RunSeq]
			if !ok || r.EventID != ds[k].EventID {
				return engine.Errorf(engine.CodeStoreCorrupt, "delivery of event %s (run %s, runSeq %d) has no matching event in the log", ds[k].EventID, ds[k].RunID, ds[k].RunSeq)
			}
			ds[k].Event = r
		}
		i = j
	}
	return nil
}
