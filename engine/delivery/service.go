package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/service"
	"github.com/dvtrun/dvtrun/engine/wake"
)

// Sink is one destination. Deliver sends events in order and stops at the
// first failure; it returns how many it delivered (durably, for a file).
type Sink interface {
	Deliver(ctx context.Context, events []engine.RunEventRecord) (int, error)
	// MaxBatch is how many events one Deliver call may carry: 1 for a
	// webhook (one request, one event), more for a file (one fsync). A
	// process killed mid-call may deliver that call's events again.
	MaxBatch() int
}

// Policy is a sink's retry policy: exponential backoff with jitter and a
// cap, and the dead letter after MaxAttempts failed attempts or once the
// event is older than MaxAge.
type Policy struct {
	MaxAttempts int           // default 10
	MaxAge      time.Duration // default 24h
	Backoff     time.Duration // the first retry's wait, default 1s
	MaxBackoff  time.Duration // the cap, default 5m
	Jitter      float64       // ± this fraction of the wait, default 0.2
}

// WithDefaults fills the zero fields.
func (p Policy) WithDefaults() Policy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 10
	}
	if p.MaxAge <= 0 {
		p.MaxAge = 24 * time.Hour
	}
	if p.Backoff <= 0 {
		p.Backoff = time.Second
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = 5 * time.Minute
	}
	if p.Jitter <= 0 {
		p.Jitter = 0.2
	}
	return p
}

// Delay is the wait after the failed attempt number failures (1 = the
// first), with r in [0, 1) choosing the jitter.
func (p Policy) Delay(failures int, r float64) time.Duration {
	// Unlike a step retry, a delivery never waits past its cap.
	d := engine.Backoff(p.Backoff, p.MaxBackoff, failures, p.Jitter, r)
	return max(min(d, p.MaxBackoff), 0)
}

// Target is a named sink with its policy; the name keys its delivery state.
type Target struct {
	Name   string
	Sink   Sink
	Policy Policy
}

// Options configures a Service. Clock, IDs and Rand are injected.
type Options struct {
	Store   Store
	Targets []Target
	Clock   engine.Clock
	IDs     engine.IDSource // claim ids
	Rand    func() float64  // jitter, in [0, 1)
	Logger  *slog.Logger    // default: discard
	// BatchSize is how many deliveries one claim takes (default 100).
	BatchSize int
	// ClaimTTL is how long a claim excludes other processes (default 30s).
	// A process stops working on a claim after half of it, by its own clock.
	ClaimTTL time.Duration
	// PollInterval is the wait when nothing is due (default 1s).
	PollInterval time.Duration
	// Wakeups, when the store pushes them, end that wait as soon as a run's
	// log grows; nil: the service only polls.
	Wakeups wake.Source
}

// Service delivers the outbox to its targets, one loop per target. It is a
// service.Service: Start returns once started, Stop waits until stopped and
// may be called twice.
type Service struct {
	o    Options
	loop service.Loop

	mu     sync.Mutex
	totals Report // Delivered, Failed and Dead since New, for /metrics
}

// New checks the options.
func New(o Options) (*Service, error) {
	if o.Store == nil || o.Clock == nil || o.IDs == nil || o.Rand == nil {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "delivery needs a store, a clock, an id source and a random source")
	}
	seen := map[string]bool{}
	for i, t := range o.Targets {
		if t.Name == "" || t.Sink == nil || seen[t.Name] {
			return nil, engine.Errorf(engine.CodeInvalidArgument, "delivery target %d needs a sink and a unique name", i)
		}
		seen[t.Name] = true
		o.Targets[i].Policy = t.Policy.WithDefaults()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 100
	}
	if o.ClaimTTL <= 0 {
		o.ClaimTTL = 30 * time.Second
	}
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	return &Service{o: o}, nil
}

// Start starts one delivery loop per target and returns. Cancelling ctx
// stops the loops too.
func (s *Service) Start(ctx context.Context) error {
	if err := s.loop.Start(ctx, s.run); err != nil {
		return err
	}
	s.o.Logger.Info("delivery started", "sinks", len(s.o.Targets))
	return nil
}

// Stop stops the loops and waits for them; claims in hand are given back.
func (s *Service) Stop() { s.loop.Stop() }

// Running reports whether the service runs (for readiness).
func (s *Service) Running() bool { return s.loop.Running() }

func (s *Service) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, t := range s.o.Targets {
		wg.Go(func() { s.deliverLoop(ctx, t) })
	}
	wg.Wait()
}

func (s *Service) deliverLoop(ctx context.Context, t Target) {
	var woken <-chan string
	if s.o.Wakeups != nil {
		ids, cancel := s.o.Wakeups.Subscribe(wake.Events)
		defer cancel()
		woken = ids
	}
	enqueued, waited := time.Time{}, false
	for ctx.Err() == nil {
		// New outbox events are picked up after each wait (a wake-up says
		// there are some) and otherwise at most once per poll interval: the
		// enqueue looks at every run's high-water mark.
		now := s.o.Clock.Now()
		enqueue := waited || now.Sub(enqueued) >= s.o.PollInterval
		if enqueue {
			enqueued = now
		}
		n, err := s.pass(ctx, t, enqueue)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.o.Logger.Error("delivery pass failed", "sink", t.Name, "error", err.Error())
		}
		waited = err != nil || n == 0
		if waited && wake.Wait(ctx, woken, nil, s.o.PollInterval) != nil {
			return
		}
	}
}

// Report counts what a Drain did and what it left.
type Report struct {
	Delivered, Failed, Dead int // this drain
	Pending, DeadTotal      int // left in the store
}

// Totals counts what the running service delivered, failed and
// dead-lettered since New (Pending and DeadTotal stay zero).
func (s *Service) Totals() Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.totals
}

// Drain delivers what is due for every target until nothing is claimable,
// then counts what is left pending and dead (dvtrun outbox deliver --once).
func (s *Service) Drain(ctx context.Context) (Report, error) {
	var r Report
	for _, t := range s.o.Targets {
		enqueue := true
		for {
			n, err := s.passReport(ctx, t, enqueue, &r)
			if err != nil {
				return r, err
			}
			if n == 0 {
				break
			}
			enqueue = false
		}
		for st, count := range map[State]*int{StatePending: &r.Pending, StateDead: &r.DeadTotal} {
			ds, err := s.o.Store.ListDeliveries(ctx, Filter{Sink: t.Name, State: st, Limit: 1 << 30})
			if err != nil {
				return r, err
			}
			*count += len(ds)
		}
	}
	return r, nil
}

func (s *Service) pass(ctx context.Context, t Target, enqueue bool) (int, error) {
	var r Report
	n, err := s.passReport(ctx, t, enqueue, &r)
	s.mu.Lock()
	s.totals.Delivered += r.Delivered
	s.totals.Failed += r.Failed
	s.totals.Dead += r.Dead
	s.mu.Unlock()
	if r.Delivered > 0 || r.Failed > 0 {
		s.o.Logger.Info("delivery pass", "sink", t.Name, "claimed", n, "delivered", r.Delivered, "failed", r.Failed, "dead", r.Dead)
	}
	return n, err
}

// passReport enqueues (when asked), claims one batch and works through it
// run by run: each run's events in runSeq order, stopping at the run's
// first failure. It returns how many deliveries it claimed.
func (s *Service) passReport(ctx context.Context, t Target, enqueue bool, r *Report) (int, error) {
	if enqueue {
		if _, err := s.o.Store.EnqueueDeliveries(ctx, t.Name); err != nil {
			return 0, err
		}
	}
	claimID := s.o.IDs.NewID()
	ds, err := s.o.Store.ClaimDeliveries(ctx, t.Name, claimID, s.o.BatchSize, s.o.ClaimTTL)
	if err != nil || len(ds) == 0 {
		return 0, err
	}
	claimedAt := s.o.Clock.Now()
	defer func() {
		// Whatever was not attempted goes back, even when ctx is done.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := s.o.Store.ReleaseClaim(rctx, t.Name, claimID); err != nil {
			s.o.Logger.Error("release claim", "sink", t.Name, "error", err.Error())
		}
	}()
	for i := 0; i < len(ds); {
		j := i
		for j < len(ds) && ds[j].RunID == ds[i].RunID {
			j++
		}
		if err := s.deliverRun(ctx, t, claimID, claimedAt, ds[i:j], r); err != nil {
			return len(ds), err
		}
		i = j
	}
	return len(ds), nil
}

func (s *Service) deliverRun(ctx context.Context, t Target, claimID string, claimedAt time.Time, run []Delivery, r *Report) error {
	size := max(t.Sink.MaxBatch(), 1)
	for i := 0; i < len(run); i += size {
		if ctx.Err() != nil {
			return nil
		}
		if s.o.Clock.Now().Sub(claimedAt) > s.o.ClaimTTL/2 {
			return nil // the rest goes back with the claim
		}
		chunk := run[i:min(i+size, len(run))]
		n, derr := deliverChunk(ctx, t.Sink, chunk)
		if n > 0 {
			ids := make([]string, n)
			for k := range n {
				ids[k] = chunk[k].EventID
			}
			if err := s.o.Store.MarkDelivered(context.WithoutCancel(ctx), t.Name, claimID, ids); err != nil {
				return err
			}
			r.Delivered += n
		}
		if derr == nil {
			continue
		}
		if ctx.Err() != nil {
			return nil // stopping: not the sink's fault, not an attempt
		}
		return s.fail(ctx, t, claimID, chunk[n], derr, r)
	}
	return nil
}

// deliverChunk hands one chunk of a run's deliveries to the sink: run
// events to Deliver, the checkpoint stream's records to DeliverCheckpoints
// (a sink without it skips them: they count as delivered).
func deliverChunk(ctx context.Context, sink Sink, chunk []Delivery) (int, error) {
	if chunk[0].RunID != CheckpointRunID {
		evs := make([]engine.RunEventRecord, len(chunk))
		for k, d := range chunk {
			evs[k] = d.Event
		}
		return sink.Deliver(ctx, evs)
	}
	cs, ok := sink.(CheckpointSink)
	if !ok {
		return len(chunk), nil
	}
	cps := make([]CheckpointRecord, len(chunk))
	for k, d := range chunk {
		cps[k] = *d.Checkpoint
	}
	return cs.DeliverCheckpoints(ctx, cps)
}

// maxErrorLen bounds the last_error kept per delivery.
const maxErrorLen = 500

func (s *Service) fail(ctx context.Context, t Target, claimID string, d Delivery, cause error, r *Report) error {
	msg := cause.Error()
	if len(msg) > maxErrorLen {
		msg = msg[:maxErrorLen]
	}
	failures := d.Attempts + 1
	born := d.Event.PersistedAt
	if d.Checkpoint != nil {
		born = d.CreatedAt // a checkpoint's delivery is created when it is stored, give or take a poll
	}
	age := s.o.Clock.Now().Sub(born)
	dead := failures >= t.Policy.MaxAttempts || age >= t.Policy.MaxAge
	wait := t.Policy.Delay(failures, s.o.Rand())
	if err := s.o.Store.MarkFailed(ctx, t.Name, claimID, Failure{EventID: d.EventID, Error: msg, RetryAfter: wait, Dead: dead}); err != nil {
		return err
	}
	r.Failed++
	if !dead {
		s.o.Logger.Warn("delivery failed", "sink", t.Name, "eventId", d.EventID, "runId", d.RunID, "runSeq", d.RunSeq, "attempts", failures, "retryIn", wait.String(), "error", msg)
		return nil
	}
	r.Dead++
	why := fmt.Sprintf("%d failed attempts", failures)
	if failures < t.Policy.MaxAttempts {
		why = fmt.Sprintf("the event is %s old (max age %s)", age.Round(time.Second), t.Policy.MaxAge)
	}
	s.o.Logger.Error("delivery dead-lettered", "sink", t.Name, "eventId", d.EventID, "runId", d.RunID, "runSeq", d.RunSeq, "attempts", failures, "error", msg)
	payload, _ := json.Marshal(map[string]any{
		"sink": t.Name, "eventId": d.EventID, "eventType": d.EventType, "runSeq": d.RunSeq, "attempts": failures, "lastError": msg,
	})
	what, runID := fmt.Sprintf("event %s (run %s, runSeq %d)", d.EventID, d.RunID, d.RunSeq), d.RunID
	if d.Checkpoint != nil {
		// Not a run's: the alert stands alone, and later checkpoints wait.
		what, runID = fmt.Sprintf("the audit checkpoint of tree size %d (%s)", d.RunSeq, d.EventID), ""
	}
	_, err := s.o.Store.RecordAlert(ctx, engine.Alert{
		Key: string(engine.CodeEventBusDeliveryFailed) + ":" + t.Name + ":" + d.EventID, Code: engine.CodeEventBusDeliveryFailed,
		Severity: engine.SeverityP1, RunID: runID, TenantID: d.Event.TenantID, ProjectID: d.Event.ProjectID, EnvironmentID: d.Event.EnvironmentID,
		Message: fmt.Sprintf("%s moved to the dead letter of sink %s after %s: %s; replay with `dvtrun outbox retry %s --sink %s`",
			what, t.Name, why, msg, d.EventID, t.Name),
		Payload: payload,
	})
	return err
}
