// Package worker runs queued run requests: it claims them from the run
// queue within the limits, starts (or, after a takeover, resumes) their
// runs, and records the outcome. One heartbeat per worker process keeps
// its claims; when it stops heart-beating another worker takes them over.
package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/queue"
	"github.com/dvtrun/dvtrun/engine/service"
	"github.com/dvtrun/dvtrun/engine/wake"
)

// Executor runs a request's plan. The CLI's executor loads the plan,
// checks its sha256 against the request's and drives engine.Engine and
// runner.Runner.
type Executor interface {
	// Run brings run runID of request r to its end and returns the run's
	// status when it stopped: it starts the run with that id if it does not
	// exist yet (engine.Engine.StartRun), returns the status of a run that
	// already ended, and otherwise continues it from its log
	// (runner.Runner.Execute or Resume: no completed step runs again).
	// LEASE_HELD means another runner's lease on the run has not expired.
	//
	// Seam for fenced ownership: the runner takes the run's lease itself
	// (store AcquireLease today); when leases carry fence tokens, a resume
	// after a takeover is where the new token is obtained.
	Run(ctx context.Context, r queue.Request, runID string) (engine.RunStatus, error)
}

// refusals are the codes that mean the request can never run as made: it
// is finished, not handed to another worker.
var refusals = map[engine.Code]bool{
	engine.CodePlanInvalid: true, engine.CodePlanHashMismatch: true, engine.CodeInvalidArgument: true,
	engine.CodeCapabilitiesNotSupported: true, engine.CodeTargetAdapterMismatch: true, engine.CodeSecretNotFound: true,
}

// Worker is a service that claims and runs requests.
type Worker struct {
	Store queue.Store
	Exec  Executor
	ID    string // this process's owner id
	// Limits are honoured by every claim (over all workers).
	Limits queue.ClaimLimits
	// Slots bounds this process's concurrent runs (default 1).
	Slots int
	// HeartbeatTTL is how long claims outlive a silent worker (default 30s);
	// the heartbeat is renewed every third of it.
	HeartbeatTTL time.Duration
	// Poll is the pause when nothing is claimable (default 2s).
	Poll time.Duration
	// Wakeups, when the store pushes them, end that pause as soon as a
	// request becomes claimable; nil: the worker only polls.
	Wakeups wake.Source
	// Grace is how long Stop lets runs in flight finish before interrupting
	// them and handing their requests back (default 30s).
	Grace time.Duration
	// LeaseRetry is the pause before trying again to resume a run whose
	// dead runner's lease has not expired yet (default 1s).
	LeaseRetry time.Duration
	// MaxAttempts bounds the claims of one request that end in an error
	// that is not a refusal (default 5); then it is finished as FAILED.
	MaxAttempts int
	Clock       engine.Clock
	IDs         engine.IDSource
	Sleep       func(ctx context.Context, d time.Duration) error
	Log         *slog.Logger
	Metrics     *Counters

	loop     service.Loop
	mu       sync.Mutex
	inflight sync.WaitGroup
	runStop  context.CancelFunc // interrupts the runs in flight
	ready    bool
}

// Stats are the worker's metrics.
type Stats struct {
	Claims, Takeovers, Completed, Failed int64
	Released, ClaimErrors, Heartbeats    int64
	Running                              int64
	ClaimLatencySum                      time.Duration
	ClaimLatencyCount                    int64
}

// Counters collects Stats from the worker's goroutines.
type Counters struct {
	mu sync.Mutex
	s  Stats
}

func (c *Counters) update(f func(s *Stats)) {
	if c == nil {
		return
	}
	c.mu.Lock()
	f(&c.s)
	c.mu.Unlock()
}

// Snapshot returns the current stats.
func (c *Counters) Snapshot() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.s
}

func (w *Worker) defaults() {
	if w.Slots <= 0 {
		w.Slots = 1
	}
	if w.HeartbeatTTL <= 0 {
		w.HeartbeatTTL = 30 * time.Second
	}
	if w.Poll <= 0 {
		w.Poll = 2 * time.Second
	}
	if w.Grace <= 0 {
		w.Grace = 30 * time.Second
	}
	if w.LeaseRetry <= 0 {
		w.LeaseRetry = time.Second
	}
	if w.MaxAttempts <= 0 {
		w.MaxAttempts = 5
	}
	if w.Log == nil {
		w.Log = slog.New(slog.DiscardHandler)
	}
}

// Ready reports whether the worker has heart-beaten at least once.
func (w *Worker) Ready() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ready
}

// Start implements service.Service: the first heartbeat is written before
// it returns.
func (w *Worker) Start(ctx context.Context) error {
	w.defaults()
	if err := w.Store.Heartbeat(ctx, w.ID, w.HeartbeatTTL); err != nil {
		return err
	}
	w.mu.Lock()
	w.ready = true
	w.mu.Unlock()
	w.Metrics.update(func(c *Stats) { c.Heartbeats++ })
	return w.loop.Start(ctx, w.run)
}

// Stop implements service.Service: claiming stops, runs in flight get the
// grace period, then are interrupted and handed back.
func (w *Worker) Stop() { w.loop.Stop() }

// Running reports whether the service runs (for readiness).
func (w *Worker) Running() bool { return w.loop.Running() }

func (w *Worker) run(ctx context.Context) {
	// Runs get their own context: stopping the worker must not interrupt
	// them before the grace period is over.
	runCtx, runStop := context.WithCancel(context.WithoutCancel(ctx))
	w.mu.Lock()
	w.runStop = runStop
	w.mu.Unlock()
	defer runStop()

	hbCtx, hbStop := context.WithCancel(context.WithoutCancel(ctx))
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		w.heartbeat(hbCtx)
	}()

	var woken <-chan string
	if w.Wakeups != nil {
		ids, cancel := w.Wakeups.Subscribe(wake.Queue)
		defer cancel()
		woken = ids
	}
	slots := make(chan struct{}, w.Slots)
	for ctx.Err() == nil {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		start := w.Clock.Now()
		r, ok, err := w.Store.ClaimRequest(ctx, w.ID, w.HeartbeatTTL, w.Limits)
		lat := w.Clock.Now().Sub(start)
		if err != nil || !ok {
			<-slots
			if err != nil && ctx.Err() == nil {
				w.Metrics.update(func(c *Stats) { c.ClaimErrors++ })
				w.Log.Error("claim failed", "worker", w.ID, "error", err.Error())
			}
			if woken != nil {
				_ = wake.Wait(ctx, woken, nil, w.Poll)
			} else {
				_ = w.Sleep(ctx, w.Poll)
			}
			continue
		}
		w.Metrics.update(func(c *Stats) {
			c.Claims++
			c.ClaimLatencySum += lat
			c.ClaimLatencyCount++
			c.Running++
			if r.TakenOver {
				c.Takeovers++
			}
		})
		w.Log.Info("claimed", "worker", w.ID, "request", r.RequestID, "plan", r.PlanID, "runRequestId", r.RunRequestID, "takeover", r.TakenOver, "attempt", r.Attempts)
		w.inflight.Add(1)
		go func() {
			defer func() {
				<-slots
				w.Metrics.update(func(c *Stats) { c.Running-- })
				w.inflight.Done()
			}()
			w.handle(runCtx, r)
		}()
	}
	// Stopping: no more claims. Let runs in flight finish within the grace
	// period; then interrupt them (each hands its request back).
	done := make(chan struct{})
	go func() { w.inflight.Wait(); close(done) }()
	grace := time.NewTimer(w.Grace)
	select {
	case <-done:
	case <-grace.C:
		w.Log.Warn("grace period over: interrupting runs in flight", "worker", w.ID)
		runStop()
		<-done
	}
	grace.Stop()
	hbStop()
	<-hbDone
	// Without its heartbeat row this worker's claims (none, if every run
	// finished or was handed back) are claimable at once.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := w.Store.RetireWorker(rctx, w.ID); err != nil {
		w.Log.Error("retiring the worker failed", "worker", w.ID, "error", err.Error())
	}
}

func (w *Worker) heartbeat(ctx context.Context) {
	for {
		if err := w.Sleep(ctx, w.HeartbeatTTL/3); err != nil {
			return
		}
		if err := w.Store.Heartbeat(ctx, w.ID, w.HeartbeatTTL); err != nil {
			if ctx.Err() == nil {
				w.Log.Error("heartbeat failed", "worker", w.ID, "error", err.Error())
			}
			continue
		}
		w.Metrics.update(func(c *Stats) { c.Heartbeats++ })
	}
}

// handle runs one claimed request to its end, or hands it back.
func (w *Worker) handle(ctx context.Context, r queue.Request) {
	log := w.Log.With("worker", w.ID, "request", r.RequestID)
	// Bookkeeping writes outlive an interrupted run.
	bk, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	runID := r.RunID
	if runID == "" {
		// The run's id is recorded with the claim before the run exists:
		// whoever holds the request next starts or continues that run, never
		// a second one.
		runID = w.IDs.NewID()
		if err := w.Store.SetRequestRun(bk, r.RequestID, w.ID, runID); err != nil {
			log.Error("recording the run id failed", "error", err.Error())
			return
		}
	}
	for {
		status, err := w.Exec.Run(ctx, r, runID)
		code := engine.CodeOf(err)
		switch {
		case ctx.Err() != nil:
			w.release(bk, r, log)
		case errors.Is(err, engine.ErrLeaseHeld):
			// The dead runner's lease has not expired yet.
			if w.Sleep(ctx, w.LeaseRetry) == nil {
				continue
			}
			w.release(bk, r, log)
		case err != nil && refusals[code]:
			log.Error("request refused", "run", runID, "error", err.Error(), "code", string(code))
			w.finish(bk, r, "REFUSED:"+string(code), log)
		case err != nil && r.Attempts >= w.MaxAttempts:
			log.Error("run failed; attempts used up", "run", runID, "error", err.Error(), "attempts", r.Attempts)
			w.finish(bk, r, string(engine.StatusFailed), log)
		case err != nil:
			log.Error("run stopped on an error; handing it back", "run", runID, "error", err.Error(), "code", string(code))
			w.release(bk, r, log)
		case !status.Terminal():
			log.Info("run stopped before its end; handing it back", "run", runID, "status", string(status))
			w.release(bk, r, log)
		default:
			log.Info("run finished", "run", runID, "status", string(status))
			w.finish(bk, r, string(status), log)
		}
		return
	}
}

func (w *Worker) finish(ctx context.Context, r queue.Request, outcome string, log *slog.Logger) {
	if err := w.Store.FinishRequest(ctx, r.RequestID, w.ID, outcome); err != nil {
		log.Error("recording the outcome failed", "error", err.Error())
		return
	}
	w.Metrics.update(func(c *Stats) {
		if outcome == string(engine.StatusCompleted) {
			c.Completed++
		} else {
			c.Failed++
		}
	})
}

func (w *Worker) release(ctx context.Context, r queue.Request, log *slog.Logger) {
	if err := w.Store.ReleaseRequest(ctx, r.RequestID, w.ID); err != nil {
		log.Error("handing the request back failed", "error", err.Error())
		return
	}
	w.Metrics.update(func(c *Stats) { c.Released++ })
	log.Info("request handed back", "run", r.RunID)
}
