package runner_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/runner"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

// runnerClock is a fake clock: each reading moves it on (1ms, or perRead
// when set), so emittedAt values are distinct and ordered, and tests can
// jump it forward.
type runnerClock struct {
	mu      sync.Mutex
	t       time.Time
	perRead time.Duration
}

func (c *runnerClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(cmp.Or(c.perRead, time.Millisecond))
	return c.t
}

// onlyAdvanced makes the clock's readings move it by a microsecond: in a
// test about a budget on this clock, only Advance passes the budget, not
// the many readings a slow machine's retries and pulses make meanwhile.
func (c *runnerClock) onlyAdvanced() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.perRead = time.Microsecond
}

func (c *runnerClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// seqIDs returns UUID-v4-shaped ids from a counter.
type seqIDs struct{ n atomic.Int64 }

func (s *seqIDs) NewID() string {
	return fmt.Sprintf("00000000-0000-4000-8000-%012x", s.n.Add(1))
}

// stepScript decides a step's result; call is 1 for the step's first
// RunStep call in the test, 2 for the next, and so on.
type stepScript func(ctx context.Context, req engine.StepRequest, call int) (engine.StepResult, error)

// fakeWarehouse runs scripted steps and records every request.
type fakeWarehouse struct {
	mu      sync.Mutex
	scripts map[string]stepScript
	calls   map[string][]engine.StepRequest
	ctxErrs map[string]error // the step context's error when its script returned
	pingErr error
	ledger  map[string]engine.LedgerEntry // by step id: attempts that committed
}

func newFakeWarehouse() *fakeWarehouse {
	return &fakeWarehouse{scripts: map[string]stepScript{}, calls: map[string][]engine.StepRequest{}, ctxErrs: map[string]error{}}
}

func (w *fakeWarehouse) Ping(context.Context) error { return w.pingErr }

func (w *fakeWarehouse) RunStep(ctx context.Context, req engine.StepRequest) (engine.StepResult, error) {
	w.mu.Lock()
	w.calls[req.StepID] = append(w.calls[req.StepID], req)
	call := len(w.calls[req.StepID])
	script := w.scripts[req.StepID]
	w.mu.Unlock()
	if script == nil {
		return engine.StepResult{RowsAffected: 1, QueryIDs: []string{"q-" + req.StepID}}, nil
	}
	res, err := script(ctx, req, call)
	w.mu.Lock()
	w.ctxErrs[req.StepID] = ctx.Err()
	w.mu.Unlock()
	return res, err
}

// LookupStep implements engine.Ledger over the entries a test put there.
func (w *fakeWarehouse) LookupStep(_ context.Context, runID, stepID string, logical int) (engine.LedgerEntry, bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.ledger[stepID]
	if !ok || e.RunID != runID || e.LogicalAttempt != logical {
		return engine.LedgerEntry{}, false, nil
	}
	e.Result.Ledger = &e
	return e, true, nil
}

func (w *fakeWarehouse) commit(e engine.LedgerEntry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ledger == nil {
		w.ledger = map[string]engine.LedgerEntry{}
	}
	w.ledger[e.StepID] = e
}

func (w *fakeWarehouse) set(step string, s stepScript) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.scripts[step] = s
}

func (w *fakeWarehouse) requests(step string) []engine.StepRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]engine.StepRequest(nil), w.calls[step]...)
}

func (w *fakeWarehouse) ctxErr(step string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ctxErrs[step]
}

// blockUntilDone is a step that runs until its context ends.
func blockUntilDone(started chan<- string) stepScript {
	return func(ctx context.Context, req engine.StepRequest, _ int) (engine.StepResult, error) {
		if started != nil {
			started <- req.StepID
		}
		<-ctx.Done()
		return engine.StepResult{}, ctx.Err()
	}
}

// blockUntilReleased is a step that reports its start and succeeds, one
// row affected, once release closes.
func blockUntilReleased(started chan<- string, release <-chan struct{}) stepScript {
	return func(_ context.Context, req engine.StepRequest, _ int) (engine.StepResult, error) {
		started <- req.StepID
		<-release
		return engine.StepResult{RowsAffected: 1}, nil
	}
}

// countingLog wraps the SQLite store: it records each AppendAndEnqueue
// batch, and can be made to fail every write (the store "goes away").
type countingLog struct {
	*sqlite.Store
	mu      sync.Mutex
	batches [][]engine.RunEventWrite
	down    atomic.Bool
	// refuse, when set, fails the appends it returns true for.
	refuse atomic.Pointer[func([]engine.RunEventWrite) bool]
	// cut, when set and answering i >= 0 for a batch, stores the batch's
	// first i events and fails the call: the log a runner leaves when it
	// stopped between appending two halves of what a group commit joins.
	cut atomic.Pointer[func([]engine.RunEventWrite) int]
	// hold, when set, holds the appends it matches (see holdAppends).
	hold atomic.Pointer[appendHold]
}

type appendHold struct {
	match   func([]engine.RunEventWrite) bool
	held    chan struct{}
	release chan struct{}
}

func (l *countingLog) AppendAndEnqueue(ctx context.Context, runID string, events []engine.RunEventWrite) (engine.AppendResult, error) {
	return l.append(ctx, events, func() (engine.AppendResult, error) { return l.Store.AppendAndEnqueue(ctx, runID, events) })
}

func (l *countingLog) AppendFenced(ctx context.Context, lease engine.Lease, events []engine.RunEventWrite) (engine.AppendResult, error) {
	return l.append(ctx, events, func() (engine.AppendResult, error) { return l.Store.AppendFenced(ctx, lease, events) })
}

func (l *countingLog) append(ctx context.Context, events []engine.RunEventWrite, write func() (engine.AppendResult, error)) (engine.AppendResult, error) {
	if h := l.hold.Load(); h != nil && h.match(events) {
		select {
		case h.held <- struct{}{}:
		default:
		}
		select {
		case <-h.release:
		case <-ctx.Done():
			return engine.AppendResult{}, ctx.Err()
		}
	}
	if f := l.refuse.Load(); l.down.Load() || (f != nil && (*f)(events)) {
		return engine.AppendResult{}, engine.Errorf(engine.CodeStoreUnavailable, "state store went away")
	}
	if f := l.cut.Load(); f != nil {
		if i := (*f)(events); i >= 0 {
			if i > 0 {
				if _, err := l.Store.AppendAndEnqueue(context.Background(), events[0].RunID, events[:i]); err != nil {
					return engine.AppendResult{}, err
				}
			}
			return engine.AppendResult{}, engine.Errorf(engine.CodeStoreUnavailable, "state store went away after %d event(s)", i)
		}
	}
	res, err := write()
	if err == nil {
		l.mu.Lock()
		l.batches = append(l.batches, events)
		l.mu.Unlock()
	}
	return res, err
}

func (l *countingLog) ReserveEventIDs(ctx context.Context, runID string, c map[string]string) (map[string]string, error) {
	if l.down.Load() {
		return nil, engine.Errorf(engine.CodeStoreUnavailable, "state store went away")
	}
	return l.Store.ReserveEventIDs(ctx, runID, c)
}

// appendsPerStep counts, per step, the append batches that carried one of
// its events.
func (l *countingLog) appendsPerStep() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, b := range l.batches {
		seen := map[string]bool{}
		for _, e := range b {
			if e.StepID != "" && !seen[e.StepID] {
				seen[e.StepID] = true
				out[e.StepID]++
			}
		}
	}
	return out
}

// progressLog collects Progress reports.
type progressLog struct {
	mu sync.Mutex
	ps []runner.Progress
}

func (p *progressLog) Report(x runner.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ps = append(p.ps, x)
}

func (p *progressLog) phase(ph runner.Phase) []runner.Progress {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []runner.Progress
	for _, x := range p.ps {
		if x.Phase == ph {
			out = append(out, x)
		}
	}
	return out
}

type harness struct {
	t        *testing.T
	ctx      context.Context
	store    *sqlite.Store
	log      *countingLog
	wh       *fakeWarehouse
	eng      *engine.Engine // the contract verbs: StartRun, Signal, GetRunStatus
	rn       *runner.Runner // Execute and Resume
	clock    *runnerClock
	progress *progressLog
	sleeps   []time.Duration
	sleepMu  sync.Mutex
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "state.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &harness{t: t, ctx: ctx, store: st, log: &countingLog{Store: st}, wh: newFakeWarehouse(),
		clock: &runnerClock{t: time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)}, progress: &progressLog{}}
	cfg := engine.Config{TenantID: "acme", ProjectID: "shop", EnvironmentID: "test"}
	ids := &seqIDs{}
	h.eng = &engine.Engine{Log: h.log, Clock: h.clock, IDs: ids, Config: cfg}
	h.rn = &runner.Runner{
		Log: h.log, Clock: h.clock, IDs: ids,
		Rand: func() float64 { return 0.5 },
		Sleep: func(ctx context.Context, d time.Duration) error {
			h.sleepMu.Lock()
			h.sleeps = append(h.sleeps, d)
			h.sleepMu.Unlock()
			return ctx.Err()
		},
		Observe: h.progress,
		Config: runner.Config{
			Config: cfg, Threads: 2, Owner: "runner-a",
			SignalPoll: 2 * time.Millisecond, Retry: runner.RetryPolicy{Max: 3, Initial: 100 * time.Millisecond, Ceiling: time.Second, Jitter: 0.2},
		},
	}
	return h
}

// start bootstraps a run of p with RunQueued.
func (h *harness) start(p *plan.Plan) string {
	h.t.Helper()
	id, err := h.eng.StartRun(h.ctx, engine.StartRequest{Plan: p})
	if err != nil {
		h.t.Fatalf("StartRun: %v", err)
	}
	return id
}

func (h *harness) events(runID string) []engine.RunEventRecord {
	h.t.Helper()
	evs, err := h.store.ListEvents(h.ctx, runID, 0, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	return evs
}

func (h *harness) status(runID string) engine.Snapshot {
	h.t.Helper()
	s, err := h.eng.GetRunStatus(h.ctx, runID)
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

// finish runs runID to its end with run (h.rn.Execute or h.rn.Resume);
// see finished.
func (h *harness) finish(runID string, p *plan.Plan, run func(context.Context, string, *plan.Plan, engine.Warehouse) (engine.Snapshot, error)) (engine.Snapshot, []engine.RunEventRecord) {
	h.t.Helper()
	snap, err := run(h.ctx, runID, p, h.wh)
	return h.finished(runID, execResult{snap, err})
}

// finished fails the test if the run ended with an error, and returns the
// run's log and the run's snapshot checked against it (checkLog).
func (h *harness) finished(runID string, res execResult) (engine.Snapshot, []engine.RunEventRecord) {
	h.t.Helper()
	if res.err != nil {
		h.t.Fatal(res.err)
	}
	evs := h.events(runID)
	return checkLog(h.t, evs, res.snap), evs
}

// execAsync runs Execute in a goroutine.
func (h *harness) execAsync(ctx context.Context, runID string, p *plan.Plan) <-chan execResult {
	done := make(chan execResult, 1)
	go func() {
		s, err := h.rn.Execute(ctx, runID, p, h.wh)
		done <- execResult{s, err}
	}()
	return done
}

type execResult struct {
	snap engine.Snapshot
	err  error
}

func (h *harness) wait(done <-chan execResult) execResult {
	h.t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(20 * time.Second):
		h.t.Fatal("Execute did not return")
		return execResult{}
	}
}

func (h *harness) signal(runID string, t engine.SignalType, step string) {
	h.t.Helper()
	if _, err := h.eng.Signal(h.ctx, runID, t, step, "test"); err != nil {
		h.t.Fatal(err)
	}
}

// waitUntil polls cond until it holds (the runner works in other goroutines).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func recv(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for a step to start")
		return ""
	}
}

// checkLog asserts what every run's log must satisfy: the reducer finds no
// invalid transition, no idempotency key repeats, and the runner's snapshot
// is the log's.
func checkLog(t *testing.T, evs []engine.RunEventRecord, got engine.Snapshot) engine.Snapshot {
	t.Helper()
	snap := engine.Project(got.RunID, evs)
	if snap.Inconsistent {
		t.Errorf("log is inconsistent: %+v", snap.Violations)
	}
	keys := map[string]engine.EventType{}
	for _, e := range evs {
		if prev, dup := keys[e.IdempotencyKey]; dup {
			t.Errorf("idempotency key of %s %s repeats (first %s)", e.EventType, e.StepID, prev)
		}
		keys[e.IdempotencyKey] = e.EventType
	}
	if got.Status != snap.Status || got.LastEventSeq != snap.LastEventSeq {
		t.Errorf("Execute returned %s@%d, the log projects %s@%d", got.Status, got.LastEventSeq, snap.Status, snap.LastEventSeq)
	}
	return snap
}

func checkTwoAppends(t *testing.T, l *countingLog) {
	t.Helper()
	for step, n := range l.appendsPerStep() {
		if n > 2 {
			t.Errorf("step %s took %d append batches, want at most 2", step, n)
		}
	}
}

func types(evs []engine.RunEventRecord, step string) []engine.EventType {
	var out []engine.EventType
	for _, e := range evs {
		if e.StepID == step {
			out = append(out, e.EventType)
		}
	}
	return out
}

func ofType(evs []engine.RunEventRecord, t engine.EventType) []engine.RunEventRecord {
	var out []engine.RunEventRecord
	for _, e := range evs {
		if e.EventType == t {
			out = append(out, e)
		}
	}
	return out
}

func payloadOf(t *testing.T, e engine.RunEventRecord) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(e.Payload, &m); err != nil {
		t.Fatalf("%s payload: %v", e.EventType, err)
	}
	return m
}

func loadShop(t *testing.T) *plan.Plan {
	t.Helper()
	p, _, err := plan.Load(os.DirFS("testdata").(plan.Source), "shop.json")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// chain builds a plan of sql steps; deps maps a step to its dependencies.
func chain(ids []string, deps map[string][]string) *plan.Plan {
	p := &plan.Plan{PlanID: "p", PlanVersion: "1"}
	for _, id := range ids {
		p.Steps = append(p.Steps, plan.Step{ID: id, Kind: plan.KindSQL, SQL: "select 1", DependsOn: deps[id]})
	}
	return p
}

func stepOf(s engine.Snapshot, id string) engine.StepSnapshot {
	st, _ := s.Step(id)
	return st
}
