package runner

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/dag"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/pulse"
	"github.com/dvtrun/dvtrun/engine/run"
	"github.com/dvtrun/dvtrun/engine/stepexec"
)

// Pinger is what a warehouse may implement so that the runner can check it
// before it starts a run.
type Pinger interface {
	Ping(ctx context.Context) error
}

// StaleTxEnder is what a warehouse implements when a transaction that a
// dead runner of a run left open would block the run's steps until the
// warehouse itself gives up on it (Snowflake: its table locks outlive the
// client by 5 minutes or more). A runner that continues a run it did not
// start ends them before its first step: it holds the run's lease with a
// higher fence, so their owner is fenced off anyway. It returns how many
// it ended.
type StaleTxEnder interface {
	EndStaleTransactions(ctx context.Context, runID string) (int, error)
}

// FenceCloser is what a warehouse implements when it keeps objects per
// run for the run's fence (Snowflake: a table per run): the runner that
// stored the run's end closes them, so that they do not pile up with the
// runs. Best effort, bounded by closeFenceWait: what is not closed (a
// runner that died before the run's end, a close that failed) stays until
// `dvtrun warehouse cleanup`. fence is the closing runner's.
type FenceCloser interface {
	CloseRun(ctx context.Context, runID string, fence int64) error
}

// closeFenceWait bounds FenceCloser.CloseRun at a run's end.
const closeFenceWait = 10 * time.Second

// EngineType is RunStarted's payload.engineType for the local adapter.
const EngineType = "local"

// outcome is what a step's goroutine reports back to the run loop.
type outcome struct {
	i int
	stepexec.Outcome
}

// flight is a step running now.
type flight struct {
	cancel  context.CancelFunc
	started time.Time
	// rerun: the log shows the step RUNNING from an earlier runner, so this
	// engine attempt has no StepStarted of its own (one would repeat the
	// logical attempt's idempotency key, RunEvents §3.1).
	rerun bool
}

// execution is one Execute call's state. The run loop owns every field except
// results (written by step goroutines) and randMu.
type execution struct {
	e   *Runner
	cfg Config
	p   *plan.Plan
	wh  engine.Warehouse
	// written is the plan as the caller gave it; prep is the run prepared
	// from it and its recorded shape (rebuild), and p is prep.Plan: the
	// steps the run executes, ephemeral models inlined, selection applied.
	written *plan.Plan
	prep    *run.Prepared
	meta    engine.RunMetadata
	em      *engine.Emitter
	runID   string
	// x executes the run's steps (render, warehouse, ledger, redaction).
	x *stepexec.Executor

	steps []plan.Step
	// dag is the scheduling state: statuses, logical attempts, what is
	// ready, fail-fast and the run's status.
	dag       *dag.State
	engineAtt []int // engine attempt of the last recorded event
	order     []int // 1-based progress index, 0 until the step starts or is skipped
	nextIndex int

	rerun    []int // steps the log shows RUNNING: started by an earlier runner
	inflight map[int]*flight
	results  chan outcome

	sigSeq       int64  // last signal seq handled
	rejected     string // why the signal being handled was rejected ("" = applied)
	pausedAt     time.Time
	pauseSeq     int64
	drainAlerted bool

	// w appends what the run emits (group commit); records holds what it
	// stored, under recMu (the writer's goroutine adds to it).
	w       *writer
	writing chan struct{} // closed when the writer's goroutine ended; nil: never started
	recMu   sync.Mutex
	records []engine.RunEventRecord
	randMu  sync.Mutex

	lease engine.Lease
	// member is the run in its process's pulse: the pulse renews the lease
	// and fetches the run's signals. Past the member's valid-until (the
	// start of the last successful renewal plus the TTL, Runner.Clock) the
	// runner starts no step (self-fencing), whatever the store says.
	member   *pulse.Member
	stopping error // an outcome's stop: no new work, the loop returns it
}

func (e *Runner) execute(ctx context.Context, runID string, p *plan.Plan, wh engine.Warehouse) (engine.Snapshot, error) {
	if e.Log == nil || e.Clock == nil || e.IDs == nil {
		return engine.Snapshot{}, engine.Errorf(engine.CodeInvalidArgument, "Execute needs an engine with a state store, a clock and an ID source (run %s)", runID)
	}
	if p == nil || wh == nil {
		return engine.Snapshot{}, engine.Errorf(engine.CodeInvalidArgument, "Execute needs a plan and a warehouse (run %s)", runID)
	}
	if err := p.Validate(); err != nil {
		return engine.Snapshot{}, err
	}
	meta, err := e.Log.GetRun(ctx, runID)
	if err != nil {
		return engine.Snapshot{}, err
	}
	if err := run.MatchesRun(meta, p); err != nil {
		return engine.Snapshot{}, err
	}
	cfg := e.Config.withDefaults()
	if e.Pulse != nil {
		cfg.Owner = e.Pulse.Owner() // the pulse renews its owner's leases only
	}
	if cfg.Owner == "" {
		cfg.Owner = e.IDs.NewID()
	}
	asked := e.Clock.Now()
	lease, err := e.Log.AcquireFencedLease(ctx, runID, cfg.Owner, cfg.LeaseTTL)
	if err != nil {
		return engine.Snapshot{}, err
	}
	r := &execution{e: e, cfg: cfg, written: p, wh: wh, meta: meta, runID: runID, em: engine.NewEmitter(e.Log, e.Clock, e.IDs, meta), lease: lease}
	r.em.SetLease(lease)
	// Plan, Render and Redact are the prepared run's (rebuild).
	r.x = &stepexec.Executor{RunID: runID, Warehouse: wh, Secrets: e.Secrets,
		Fence: lease.Fence, MaxRetries: cfg.Retry.Max, Sleep: r.sleep, LeaseValid: r.leaseValid, SelfFenced: r.selfFenced,
		Backoff: func(n int) time.Duration { return cfg.Retry.Backoff(n, r.rand()) },
		OnRetry: func(s plan.Step, err error, next, logical int) {
			e.report(Progress{Phase: PhaseStepRetry, RunID: runID, Index: r.order[r.index(s.ID)], Total: len(r.steps), Step: s,
				Err: err, EngineAttempt: next, LogicalAttempt: logical})
		}}
	r.w = newWriter(r.em, e.Clock, runID, cfg.WriteBudget, e.Spool)
	r.w.backoff = func(n int) time.Duration { return cfg.Retry.Backoff(n, r.rand()) }
	r.w.sleep = r.sleep
	r.w.stored = r.addRecords
	// The writer outlives the run's context by up to its budget: what the
	// run emitted before an interrupt is still stored.
	writeCtx, stopWriter := context.WithCancel(context.WithoutCancel(ctx))
	runCtx, stopRun := context.WithCancel(ctx)
	pl, stopPulse, err := r.heartbeat(runCtx)
	if err != nil {
		stopRun()
		stopWriter()
		return engine.Snapshot{}, err
	}
	// Signals decided before this runner started are skipped by their seq
	// (r.sigSeq, from the log), so the cursor starts at 0.
	r.member = pl.Join(lease, asked.Add(cfg.LeaseTTL), 0)
	ended := false // this runner stored the run's end
	defer func() {
		stopRun()
		r.closeWriter(ctx, stopWriter) // its appends are fenced: before the lease goes
		r.member.Leave()
		stopPulse() // a private pulse: no renewal may land after the release
		if ended {
			// Nobody takes over a run whose end is stored: its lease
			// expires on its own, and the run saves a round trip.
			return
		}
		// Release even when ctx ended: another runner may take over at once
		// instead of waiting for the lease to expire.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = e.Log.ReleaseLease(rctx, runID, cfg.Owner)
	}()

	if err := r.replaySpool(runCtx); err != nil {
		return engine.Snapshot{}, err
	}
	if err := r.rebuild(runCtx); err != nil {
		return engine.Snapshot{}, err
	}
	if e.Artifacts != nil {
		r.em.OnClose(e.runResults(runID, r.prep.Full, func(context.Context) ([]engine.RunEventRecord, error) { return r.log(), nil }))
	}
	if r.dag.Run.Terminal() {
		return r.snapshot(), nil
	}
	// What the run's recorded context cannot render (a var without value
	// or default, an interval name in a run without one) is refused before
	// RunStarted: the same check `run` made before recording the run.
	if err := r.prep.CheckContext(); err != nil {
		return r.snapshot(), err
	}
	if err := r.start(runCtx); err != nil {
		return r.snapshot(), err
	}
	if r.dag.Run.Terminal() { // the adapter could not start: RunQueued → RunFailed
		snap := r.snapshot()
		e.report(Progress{Phase: PhaseRunDone, RunID: runID, Total: len(r.steps), Snapshot: &snap})
		return snap, nil
	}
	r.writing = make(chan struct{})
	go func() {
		defer close(r.writing)
		r.w.run(writeCtx)
	}()
	err = r.loop(runCtx, r.member.Lost())
	stopRun()
	r.drain()
	if ferr := r.flush(ctx); err == nil {
		err = ferr
	}
	snap := r.snapshot()
	if err != nil {
		return snap, err
	}
	ended = snap.Status.Terminal()
	if closer, ok := r.wh.(FenceCloser); ok && ended {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeFenceWait)
		_ = closer.CloseRun(cctx, runID, r.lease.Fence)
		cancel()
	}
	e.report(Progress{Phase: PhaseRunDone, RunID: runID, Threads: cfg.Threads, Total: len(r.steps), Snapshot: &snap})
	return snap, nil
}

// heartbeat is the process's pulse the run joins (Runner.Pulse), or, when
// there is none, a private pulse for this run alone that renews the lease
// and fetches signals every SignalPoll (at most TTL/3); stop stops it.
func (r *execution) heartbeat(ctx context.Context) (pl Pulse, stop func(), err error) {
	if r.e.Pulse != nil {
		return r.e.Pulse, func() {}, nil
	}
	own, err := pulse.New(pulse.Options{Store: r.e.Log, Owner: r.cfg.Owner, TTL: r.cfg.LeaseTTL, Interval: r.cfg.SignalPoll, Clock: r.e.Clock})
	if err != nil {
		return nil, nil, err
	}
	if err := own.Start(ctx); err != nil {
		return nil, nil, err
	}
	return own, own.Stop, nil
}

// leaseValid reports whether this runner's lease is still surely its own:
// its last successful renewal is younger than the TTL.
func (r *execution) leaseValid() bool {
	return r.member.Valid()
}

// leaseLost is the error of a runner whose pulse member lost the lease:
// taken over, or self-fenced.
func (r *execution) leaseLost() error {
	if !r.leaseValid() {
		return r.selfFenced()
	}
	return engine.Errorf(engine.CodeLeaseLost, "run %s: another runner took the lease; this runner stopped", r.runID)
}

// selfFenced is the error of a runner whose renewals failed past its TTL.
func (r *execution) selfFenced() error {
	return engine.Errorf(engine.CodeLeaseLost, "run %s: this runner could not renew its lease for longer than its TTL (%s), so it stopped starting steps; resume the run", r.runID, r.cfg.LeaseTTL)
}

// rebuild projects the run's log and derives the scheduler's state from it.
func (r *execution) rebuild(ctx context.Context) error {
	events, err := r.e.Log.ListEvents(ctx, r.runID, 0, 0)
	if err != nil {
		return err
	}
	r.records = events
	snap := engine.Project(r.runID, events)
	for _, ev := range events {
		if ev.EventType == engine.SignalAccepted || ev.EventType == engine.SignalRejected {
			// A signal decision's logical attempt is the signal's seq.
			r.sigSeq = max(r.sigSeq, int64(ev.LogicalAttemptID))
		}
	}
	r.em.SetRunStatus(snap.Status)
	// A selected run (dbt --select, dvtrun retry) executes the steps its
	// RunQueued recorded, whatever plan subset the caller holds: a resumed
	// run keeps its selection. Subset of a subset is the same plan.
	q, err := engine.QueuedRequest(events)
	if err != nil {
		return err
	}
	// So is --full-refresh, and so are the vars and the data interval the
	// steps are rendered with.
	r.x.FullRefresh = q.FullRefresh
	dialect, _ := r.wh.(plan.Dialect) // nil: plain names
	if r.prep, err = run.Prepare(run.Input{Plan: r.written, Shape: q, Secrets: r.e.Secrets, Dialect: dialect}); err != nil {
		return err
	}
	r.p = r.prep.Plan
	r.x.Plan, r.x.Render, r.x.Redact = r.p, r.prep.Render, r.prep.Redact
	n := len(r.p.Steps)
	r.steps = r.p.Steps
	r.dag = dag.New(r.p)
	r.dag.Run = snap.Status
	r.engineAtt = make([]int, n)
	r.order = make([]int, n)
	r.inflight = map[int]*flight{}
	r.results = make(chan outcome, n)
	for i := range r.steps {
		r.engineAtt[i] = 1
	}
	for _, st := range snap.Steps {
		i, ok := r.dag.Index(st.StepID)
		if !ok {
			continue // not in this plan (the plan id and version matched, so never in practice)
		}
		r.dag.Set(i, st.Status)
		r.dag.SetLogical(i, max(st.LogicalAttemptID, 1))
		r.engineAtt[i] = max(st.EngineAttemptID, 1)
		r.em.SetStepState(st.StepID, engine.StepState{Status: st.Status, LogicalAttemptID: st.LogicalAttemptID})
		r.nextIndex++
		r.order[i] = r.nextIndex
		if st.Status == engine.StepStatusRunning {
			r.rerun = append(r.rerun, i)
		}
	}
	r.dag.Seed()
	// A RETRY_STEP accepted by a runner that stopped before starting it.
	for _, ev := range events {
		if ev.EventType != engine.SignalAccepted {
			continue
		}
		var sp dag.SignalPayload
		if json.Unmarshal(ev.Payload, &sp) != nil || sp.SignalType != engine.SignalRetryStep {
			continue
		}
		if i, ok := r.dag.Index(sp.StepID); ok && r.dag.Status(i) == engine.StepStatusFailed && r.dag.Logical(i) < sp.RetryAttempt {
			r.dag.QueueRetry(i, sp.RetryAttempt)
		}
	}
	if r.dag.Run == engine.StatusPaused {
		r.pausedAt = r.e.Clock.Now()
	}
	return nil
}

// start checks the warehouse and emits RunStarted for a queued run, and
// has the writer reserve the eventIds of every step's likely events in one
// store call before its first append.
func (r *execution) start(ctx context.Context) error {
	ping := func() error {
		if pg, ok := r.wh.(Pinger); ok {
			return pg.Ping(ctx)
		}
		return nil
	}
	switch r.dag.Run {
	case engine.StatusQueued, engine.StatusApproved:
		if err := ping(); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if r.dag.Run != engine.StatusQueued {
				return engine.Errorf(engine.CodeInvalidArgument, "run %s: the warehouse is unusable and an %s run cannot fail before it starts: %w", r.runID, r.dag.Run, err)
			}
			if aerr := r.e.AbortStart(ctx, r.runID, err); aerr != nil {
				return aerr
			}
			return r.rebuild(ctx)
		}
	case engine.StatusRunning, engine.StatusPaused:
		if err := ping(); err != nil {
			return engine.Errorf(engine.CodeStoreUnavailable, "run %s: the warehouse is unusable, the run stays %s (resume it later): %w", r.runID, r.dag.Run, err)
		}
		// Best effort: when it fails (the role may not abort), a step that
		// meets the dead runner's lock waits for it within its bounded
		// lock wait, saying who holds it.
		if ender, ok := r.wh.(StaleTxEnder); ok {
			if _, err := ender.EndStaleTransactions(ctx, r.runID); err != nil && ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	ems := make([]engine.Emission, 0, 2*len(r.steps)+3)
	for i, s := range r.steps {
		if r.dag.Status(i) == engine.StepStatusPending {
			ems = append(ems, engine.Emission{Type: engine.StepStarted, Step: s.ID, Attempt: r.dag.Logical(i)}, engine.Emission{Type: engine.StepCompleted, Step: s.ID, Attempt: r.dag.Logical(i)})
		}
	}
	ems = append(ems, engine.Emission{Type: engine.RunStarted, Attempt: 1}, engine.Emission{Type: engine.RunCompleted, Attempt: 1}, engine.Emission{Type: engine.RunFailed, Attempt: 1})
	queued := r.dag.Run == engine.StatusQueued || r.dag.Run == engine.StatusApproved
	ref := fmt.Sprintf("%s://%s/%s", engine.AdapterName, r.cfg.Owner, r.runID)
	// The writer does these before its first append, so no step waits for
	// them.
	r.w.first = func(ctx context.Context) error {
		if err := r.em.ReserveKeys(ctx, ems); err != nil {
			return err
		}
		if queued {
			return r.e.Log.SetProviderRunRef(ctx, r.runID, ref)
		}
		return nil
	}
	if queued {
		if err := r.emit(ctx, engine.Emission{Type: engine.RunStarted, Attempt: 1, Payload: map[string]any{
			"engineRunRef": ref, "engineType": EngineType, "owner": r.cfg.Owner, "threads": r.cfg.Threads,
			"context": map[string]any{"tenantId": r.meta.TenantID, "projectId": r.meta.ProjectID, "environmentId": r.meta.EnvironmentID,
				"triggeredBy": r.cfg.TriggeredBy, "triggerSource": r.cfg.TriggerSource},
		}}); err != nil {
			return err
		}
		r.dag.Run = engine.StatusRunning
	}
	r.e.report(Progress{Phase: PhaseRunStarted, RunID: r.runID, Threads: r.cfg.Threads, Total: len(r.steps)})
	return nil
}

// replaySpool appends, before anything else, the events an earlier runner
// of this run on this machine spooled because the store did not take them
// within its budget.
// The store dedupes those it took after all; a spool the run went past
// (its steps were skipped or the run ended meanwhile) is dropped.
func (r *execution) replaySpool(ctx context.Context) error {
	if r.e.Spool == nil {
		return nil
	}
	pending, err := r.e.Spool.Pending(r.runID)
	if err != nil || len(pending) == 0 {
		return err
	}
	for start := 0; start < len(pending); start += maxAppend {
		batch := pending[start:min(start+maxAppend, len(pending))]
		if _, err := r.em.Append(ctx, batch); err != nil {
			if engine.CodeOf(err) != engine.CodeInvalidTransition {
				return engine.Errorf(engine.CodeOf(err), "run %s: could not append %d spooled event(s) (%s) before carrying on: %w", r.runID, len(pending), describeBatch(batch), err)
			}
			// The run went on without them (RunEvents §5.3 refuses them now).
			break
		}
	}
	return r.e.Spool.Clear(r.runID)
}

// emit hands one batch to the run's writer, after the Emitter's Layer 1
// check, and returns without waiting for the store (see writer): the
// error is Layer 1's, or the writer's once it stopped.
func (r *execution) emit(_ context.Context, ems ...engine.Emission) error {
	events, err := r.em.Prepare(ems...)
	if err != nil {
		return err
	}
	return r.w.submit(events)
}

// addRecords keeps what the writer stored.
func (r *execution) addRecords(recs []engine.RunEventRecord) {
	r.recMu.Lock()
	defer r.recMu.Unlock()
	r.records = append(r.records, recs...)
}

// flush waits, after the run loop ended, until everything the run emitted
// is stored or the writer gives up (its budget); when it gives up, the
// StepStarted events not stored go to the spool.
func (r *execution) flush(ctx context.Context) error {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*r.cfg.WriteBudget)
	defer cancel()
	err := r.w.flush(fctx)
	if err != nil && engine.CodeOf(err) != engine.CodeLeaseLost {
		if serr := r.w.spoolRest(); serr != nil {
			err = fmt.Errorf("%w (and the spool failed too: %v)", err, serr)
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return engine.Errorf(engine.CodeStoreUnavailable, "run %s stopped: the state store did not take its last events within %s (resume it once the store is back)", r.runID, 2*r.cfg.WriteBudget)
	}
	return err
}

// closeWriter stops the writer, after a last flush when the run ended
// early (a no-op when the run loop flushed already).
func (r *execution) closeWriter(ctx context.Context, stop context.CancelFunc) {
	if r.writing != nil && r.w.failure() == nil {
		_ = r.flush(ctx)
	}
	stop()
	if r.writing != nil {
		<-r.writing
	}
}

func (r *execution) rand() float64 {
	if r.e.Rand == nil {
		return 0.5 // no jitter source injected: the middle of the jitter band
	}
	r.randMu.Lock()
	defer r.randMu.Unlock()
	return r.e.Rand()
}

func (r *execution) sleep(ctx context.Context, d time.Duration) error {
	if r.e.Sleep != nil {
		return r.e.Sleep(ctx, d)
	}
	return engine.Sleep(ctx, d)
}

// loop schedules steps and handles their outcomes and the run's signals
// until the run ends, ctx ends, the lease is lost or the store fails.
func (r *execution) loop(ctx context.Context, leaseLost <-chan struct{}) error {
	if err := r.skipBlocked(ctx); err != nil {
		return err
	}
	if err := r.firstSignals(ctx, leaseLost); err != nil {
		return err
	}
	tick := time.NewTicker(r.cfg.SignalPoll)
	defer tick.Stop()
	failed := r.w.failed()
	for !r.dag.Run.Terminal() {
		if err := r.finishIfDone(ctx); err != nil || r.dag.Run.Terminal() {
			return err
		}
		if err := r.schedule(ctx); err != nil {
			return err
		}
		select {
		case o := <-r.results:
			outs := []outcome{o}
		more:
			for {
				select {
				case o := <-r.results:
					outs = append(outs, o)
				default:
					break more
				}
			}
			for _, o := range outs {
				if o.Stop != nil && r.stopping == nil {
					r.stopping = o.Stop
				}
			}
			if err := r.complete(ctx, outs); err != nil {
				return err
			}
			if r.stopping != nil {
				return r.stopping
			}
		case <-tick.C:
			if !r.leaseValid() {
				return r.selfFenced()
			}
			r.checkDrain(ctx)
		case <-r.member.Ready():
			if err := r.pollSignals(ctx); err != nil {
				return err
			}
		case <-failed:
			return r.w.failure()
		case <-leaseLost:
			return r.leaseLost()
		case <-ctx.Done():
			return fmt.Errorf("run %s interrupted (resume it to carry on): %w", r.runID, ctx.Err())
		}
	}
	return nil
}

// drain waits for the step goroutines after the run loop stopped (their
// contexts are cancelled by then) so that none outlives Execute.
func (r *execution) drain() {
	for len(r.inflight) > 0 {
		o := <-r.results
		delete(r.inflight, o.i)
	}
}

// skipBlocked skips PENDING steps whose upstream FAILED or was SKIPPED:
// normally done in the batch of the failure, this catches a log written by
// another runner.
func (r *execution) skipBlocked(ctx context.Context) error {
	ems, reports := r.skipped(r.dag.Blocked(), nil, nil)
	if len(ems) == 0 {
		return nil
	}
	if err := r.emit(ctx, ems...); err != nil {
		return err
	}
	r.reportAll(reports)
	return nil
}

// skipped builds the StepSkipped events and reports of steps the DAG
// rules marked SKIPPED.
func (r *execution) skipped(skips []dag.Skip, ems []engine.Emission, reports []Progress) ([]engine.Emission, []Progress) {
	for _, sk := range skips {
		i, reason := sk.I, sk.Reason
		if r.order[i] == 0 {
			r.nextIndex++
			r.order[i] = r.nextIndex
		}
		ems = append(ems, engine.Emission{Type: engine.StepSkipped, Step: r.steps[i].ID, Attempt: r.dag.Logical(i), Payload: map[string]any{"reason": reason}})
		reports = append(reports, Progress{Phase: PhaseStepDone, RunID: r.runID, Index: r.order[i], Total: len(r.steps), Step: r.steps[i],
			Status: engine.StepStatusSkipped, SkipReason: reason, LogicalAttempt: r.dag.Logical(i)})
	}
	return ems, reports
}

func (r *execution) reportAll(ps []Progress) {
	for _, p := range ps {
		r.e.report(p)
	}
}

// finishIfDone ends a RUNNING run whose steps are all terminal.
func (r *execution) finishIfDone(ctx context.Context) error {
	x, ok := r.final()
	if !ok {
		return nil
	}
	if err := r.emit(ctx, x); err != nil {
		return err
	}
	r.dag.Run = engine.RunStatus(mustTarget(x.Type))
	return nil
}

func mustTarget(t engine.EventType) string {
	s, _ := engine.TargetOf(t)
	return s
}

// final returns the run's closing event when every step is terminal, none
// is in flight and the run is RUNNING (a PAUSED run waits for RESUME).
func (r *execution) final() (engine.Emission, bool) {
	return r.dag.Final(len(r.inflight) > 0 || len(r.rerun) > 0)
}

// schedule starts what may start: steps the log showed RUNNING (they are in
// flight already, even while PAUSED), then ready steps (see pickStarts),
// whose StepStarted events go in one batch.
func (r *execution) schedule(ctx context.Context) error {
	for len(r.rerun) > 0 && len(r.inflight) < r.cfg.Threads && r.stopping == nil && r.leaseValid() {
		i := r.rerun[0]
		r.rerun = r.rerun[1:]
		r.engineAtt[i]++
		// Its StepStarted is the earlier runner's: say it starts again here.
		r.e.report(Progress{Phase: PhaseStepStarted, RunID: r.runID, Index: r.order[i], Total: len(r.steps), Step: r.steps[i],
			EngineAttempt: r.engineAtt[i], LogicalAttempt: r.dag.Logical(i)})
		r.dispatch(ctx, i, true)
	}
	starts, ems := r.pickStarts(nil)
	if len(starts) == 0 {
		return nil
	}
	if err := r.emit(ctx, ems...); err != nil {
		return err
	}
	r.launch(ctx, starts)
	return nil
}

// pickStarts takes, while the run is RUNNING and fail-fast has not
// tripped, ready steps and RETRY_STEP steps up to Threads in flight, and
// appends their StepStarted events to ems. The caller emits them, then
// launches the steps.
func (r *execution) pickStarts(ems []engine.Emission) ([]int, []engine.Emission) {
	if r.stopping != nil || !r.leaseValid() {
		return nil, ems
	}
	starts := r.dag.Pick(r.cfg.Threads - len(r.inflight))
	for _, i := range starts {
		r.engineAtt[i] = 1
		ems = append(ems, engine.Emission{Type: engine.StepStarted, Step: r.steps[i].ID, Attempt: r.dag.Logical(i), Payload: stepexec.StartedPayload(r.steps[i])})
	}
	return starts, ems
}

// launch runs steps whose StepStarted is recorded.
func (r *execution) launch(ctx context.Context, starts []int) {
	for _, i := range starts {
		r.dag.Set(i, engine.StepStatusRunning)
		if r.order[i] == 0 {
			r.nextIndex++
			r.order[i] = r.nextIndex
		}
		r.e.report(Progress{Phase: PhaseStepStarted, RunID: r.runID, Index: r.order[i], Total: len(r.steps), Step: r.steps[i],
			EngineAttempt: 1, LogicalAttempt: r.dag.Logical(i)})
		r.dispatch(ctx, i, false)
	}
}

// dispatch runs step i in a goroutine; rerun says an earlier runner
// started it (the log shows it RUNNING), so the warehouse's ledger is asked
// first whether it committed.
func (r *execution) dispatch(ctx context.Context, i int, rerun bool) {
	sctx, cancel := context.WithCancel(ctx)
	r.inflight[i] = &flight{cancel: cancel, started: r.e.Clock.Now(), rerun: rerun}
	logical, engineAttempt := r.dag.Logical(i), r.engineAtt[i]
	go func() {
		o := outcome{i: i, Outcome: r.x.Run(ctx, sctx, r.steps[i], logical, engineAttempt, rerun)}
		cancel()
		r.results <- o
	}()
}

// complete records the outcomes that arrived together in one batch (see
// completion) with the StepStarted of the steps that may start now — one
// append for both halves, which halves the store's transactions — or with
// the run's closing event when this was the last work.
func (r *execution) complete(ctx context.Context, outs []outcome) error {
	ems, reports := r.completion(outs, nil, nil)
	starts, ems := r.pickStarts(ems)
	if x, ok := r.final(); ok && len(starts) == 0 {
		ems = append(ems, x)
		r.dag.Run = engine.RunStatus(mustTarget(x.Type))
	}
	if len(ems) == 0 {
		return nil
	}
	if err := r.emit(ctx, ems...); err != nil {
		return err
	}
	r.reportAll(reports)
	if r.dag.Run == engine.StatusPaused && len(r.inflight) == 0 {
		r.e.report(Progress{Phase: PhaseDrained, RunID: r.runID, Total: len(r.steps)})
	}
	r.launch(ctx, starts)
	return nil
}

// completion builds the events of outcomes that arrived together: each
// step's StepCompleted or StepFailed, and the StepSkipped of the dependents
// of the failed ones (under fail-fast, of every step not started). It
// appends to ems and reports.
func (r *execution) completion(outs []outcome, ems []engine.Emission, reports []Progress) ([]engine.Emission, []Progress) {
	now := r.e.Clock.Now()
	for _, o := range outs {
		fl := r.inflight[o.i]
		delete(r.inflight, o.i)
		if o.Aborted {
			continue
		}
		i, s := o.i, r.steps[o.i]
		r.engineAtt[i] = o.EngineAttempt
		var elapsed time.Duration
		if fl != nil {
			elapsed = now.Sub(fl.started)
		}
		var attemptStarted time.Time
		if fl != nil && fl.rerun {
			// The step's StepStarted is an earlier runner's: the reducer
			// times the step from this attempt's start, not across the
			// crash and the wait for the lease.
			attemptStarted = fl.started
		}
		ev := r.x.Event(s, r.dag.Logical(i), o.Outcome, elapsed, attemptStarted)
		p := Progress{Phase: PhaseStepDone, RunID: r.runID, Index: r.order[i], Total: len(r.steps), Step: s, Result: o.Res,
			Err: o.ProgressErr, EngineAttempt: o.EngineAttempt, Elapsed: elapsed, Warning: o.Warning, LogicalAttempt: r.dag.Logical(i)}
		if o.Err == nil {
			r.dag.Succeeded(i)
			ems = append(ems, ev)
			p.Status = engine.StepStatusSuccess
			reports = append(reports, p)
			continue
		}
		skips := r.dag.Failed(i, r.cfg.FailFast)
		ems = append(ems, ev)
		p.Status = engine.StepStatusFailed
		reports = append(reports, p)
		ems, reports = r.skipped(skips, ems, reports)
	}
	return ems, reports
}

// index is the position of step id in r.steps.
func (r *execution) index(id string) int {
	i, _ := r.dag.Index(id)
	return i
}

// snapshot projects what this runner read and wrote: the run's log.
func (r *execution) snapshot() engine.Snapshot {
	return engine.Project(r.runID, r.log())
}

// log is what this runner read and wrote of the run's log, in runSeq order
// without repeats.
func (r *execution) log() []engine.RunEventRecord {
	r.recMu.Lock()
	recs := slices.Clone(r.records)
	r.recMu.Unlock()
	slices.SortStableFunc(recs, func(a, b engine.RunEventRecord) int { return cmp.Compare(a.RunSeq, b.RunSeq) })
	return slices.CompactFunc(recs, func(a, b engine.RunEventRecord) bool { return a.RunSeq == b.RunSeq })
}
