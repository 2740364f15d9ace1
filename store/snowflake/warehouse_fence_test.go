package snowflake_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/runner"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
)

var _ runner.StaleTxEnder = (*snowflake.Warehouse)(nil)

// Issue 16 item 1: a runner killed inside a ledgered DML step leaves its
// transaction open, and Snowflake keeps its table locks until it aborts the
// detached transaction ~5 minutes later. These tests play the killed
// runner with a held answer (sftest HoldAnswers): the server executed the
// step's DML inside the transaction, and its client never hears back, as a
// process killed between request and answer.

// waits records the progress reports of a warehouse's lock waits.
type waits struct {
	mu  sync.Mutex
	got []engine.LockWait
}

func (w *waits) report(l engine.LockWait) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, l)
}

func (w *waits) all() []engine.LockWait {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]engine.LockWait(nil), w.got...)
}

func openWarehouseOpts(t *testing.T, srv *sftest.Server, opts snowflake.WarehouseOptions) *snowflake.Warehouse {
	t.Helper()
	w, err := snowflake.OpenWarehouse(ctx, srv.DSN("analytics", "public"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// effectStep is a ledgered DML step of run that inserts one row naming
// the run and step into effects.
func effectStep(run, step string, fence int64) engine.StepRequest {
	return engine.StepRequest{RunID: run, StepID: step, Kind: plan.KindSQL,
		SQL:            fmt.Sprintf("INSERT INTO effects SELECT '%s', '%s'", run, step),
		LogicalAttempt: 1, EngineAttempt: 1, Fence: fence}
}

// holdsStep matches the first request of run's step, the dead runner's;
// a taker's run of the step is answered.
func holdsStep(run, step string) func(string) bool {
	marker := fmt.Sprintf("'%s', '%s'", run, step)
	var once atomic.Bool
	return func(sqlText string) bool {
		return strings.Contains(sqlText, marker) && once.CompareAndSwap(false, true)
	}
}

func effectRows(t *testing.T, w *snowflake.Warehouse, run, step string) int {
	t.Helper()
	var n int
	if err := w.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM effects WHERE run = ? AND step = ?", run, step).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func createEffects(t *testing.T, w *snowflake.Warehouse) {
	t.Helper()
	if _, err := w.DB().ExecContext(ctx, "CREATE TABLE effects (run VARCHAR, step VARCHAR)"); err != nil {
		t.Fatal(err)
	}
}

// stepAsync runs req on w in a goroutine.
func stepAsync(w *snowflake.Warehouse, req engine.StepRequest) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := w.RunStep(ctx, req)
		done <- err
	}()
	return done
}

// awaitHeld waits, bounded, until the server holds an answer.
func awaitHeld(t *testing.T, held <-chan sftest.HeldAnswer, what string) {
	t.Helper()
	select {
	case <-held:
	case <-time.After(15 * time.Second):
		t.Fatalf("waited 15s for %s's DML to execute inside its transaction", what)
	}
}

// TestWarehouseRunsLedgeredStepsInParallel: the ledgered DML steps of N
// runs are inside their transactions, each holding its run's fence lock,
// at the same time. With one fence table for all runs the second claim
// would wait for the first commit, and the held answers would never all
// arrive.
func TestWarehouseRunsLedgeredStepsInParallel(t *testing.T) {
	srv := sftest.Start(t)
	w := openWarehouseOpts(t, srv, snowflake.WarehouseOptions{LockWait: 20 * time.Second})
	createEffects(t, w)
	const n = 4
	held, release := srv.HoldAnswers(func(q string) bool { return strings.Contains(q, "'sql.held'") }) // any run's
	defer release()
	done := make([]<-chan error, n)
	for k := range n {
		done[k] = stepAsync(w, effectStep(fmt.Sprintf("run-%d", k), "sql.held", 1))
	}
	timeout := time.After(15 * time.Second)
	for i := range n {
		select {
		case <-held:
		case <-timeout:
			t.Fatalf("after 15s only %d of %d runs were inside a ledgered step at once: the fence serialises runs", i, n)
		}
	}
	release()
	for k := range n {
		if err := <-done[k]; err != nil {
			t.Fatalf("run-%d: %v", k, err)
		}
		if got := effectRows(t, w, fmt.Sprintf("run-%d", k), "sql.held"); got != 1 {
			t.Fatalf("run-%d: %d effects, want 1", k, got)
		}
	}
}

// TestWarehouseDeadRunnerHarmsOnlyItsRun: run A's runner dies inside a
// ledgered step (its transaction open, holding A's fence). Run B's
// ledgered steps on the same warehouse database do not wait at all; the
// runner that takes A over (fence 2) ends the dead transaction and runs the
// step, whose effect then exists once; the dead runner, should it wake,
// commits nothing.
func TestWarehouseDeadRunnerHarmsOnlyItsRun(t *testing.T) {
	srv := sftest.Start(t)
	dead := openWarehouseOpts(t, srv, snowflake.WarehouseOptions{})
	createEffects(t, dead)
	held, release := srv.HoldAnswers(holdsStep("run-a", "sql.x"))
	defer release()
	deadDone := stepAsync(dead, effectStep("run-a", "sql.x", 1))
	awaitHeld(t, held, "run-a's dead runner")

	var otherWaits waits
	other := openWarehouseOpts(t, srv, snowflake.WarehouseOptions{LockWait: 2 * time.Second, OnWait: otherWaits.report})
	for i := range 3 {
		step := fmt.Sprintf("sql.b%d", i)
		if _, err := other.RunStep(ctx, effectStep("run-b", step, 1)); err != nil {
			t.Fatalf("run-b %s while run-a's runner is dead: %v", step, err)
		}
	}
	if w := otherWaits.all(); len(w) > 0 {
		t.Fatalf("run-b waited for a lock: %v", w)
	}

	var takerWaits waits
	taker := openWarehouseOpts(t, srv, snowflake.WarehouseOptions{LockWait: 5 * time.Second, OnWait: takerWaits.report})
	ended, err := taker.EndStaleTransactions(ctx, "run-a")
	if err != nil || ended != 1 {
		t.Fatalf("EndStaleTransactions: %d %v, want the dead runner's one transaction", ended, err)
	}
	if ended, err := taker.EndStaleTransactions(ctx, "run-b"); err != nil || ended != 0 {
		t.Fatalf("EndStaleTransactions of run-b: %d %v, want none (nothing holds its fence)", ended, err)
	}
	req := effectStep("run-a", "sql.x", 2)
	req.EngineAttempt = 2
	res, err := taker.RunStep(ctx, req)
	if err != nil || res.Ledger != nil {
		t.Fatalf("taker: %+v %v, want the step run (the dead runner committed nothing)", res, err)
	}
	if w := takerWaits.all(); len(w) > 0 {
		t.Fatalf("the taker waited for a lock after ending the dead transaction: %v", w)
	}
	release()
	select {
	case err := <-deadDone:
		if err == nil {
			t.Fatal("the dead runner's step committed after its transaction was ended")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the dead runner's RunStep did not return within 15s of its answer")
	}
	if got := effectRows(t, taker, "run-a", "sql.x"); got != 1 {
		t.Fatalf("run-a sql.x: %d effects, want 1", got)
	}
	e, ok, err := taker.LookupStep(ctx, "run-a", "sql.x", 1)
	if err != nil || !ok || e.Fence != 2 || e.EngineAttempt != 2 {
		t.Fatalf("ledger of run-a sql.x: %+v %v %v, want the taker's commit (fence 2)", e, ok, err)
	}
}

// TestWarehouseFenceWaitBounded: a runner that meets its run's fence held
// by a transaction nobody ends waits at most its budget, reporting what it
// waits for (table, run, holder, since when), then fails with
// STORE_UNAVAILABLE that is not transient: the runner stops the run,
// resumable, instead of retrying the wait.
func TestWarehouseFenceWaitBounded(t *testing.T) {
	srv := sftest.Start(t)
	dead := openWarehouseOpts(t, srv, snowflake.WarehouseOptions{})
	createEffects(t, dead)
	held, release := srv.HoldAnswers(holdsStep("run-a", "sql.x"))
	defer release()
	deadDone := stepAsync(dead, effectStep("run-a", "sql.x", 1))
	awaitHeld(t, held, "run-a's dead runner")

	const budget = 3 * time.Second
	var ws waits
	w := openWarehouseOpts(t, srv, snowflake.WarehouseOptions{LockWait: budget, OnWait: ws.report})
	start := time.Now()
	_, err := w.RunStep(ctx, effectStep("run-a", "sql.y", 1))
	elapsed := time.Since(start)
	table := snowflake.FenceTable("run-a")
	if engine.CodeOf(err) != engine.CodeStoreUnavailable || engine.IsTransient(err) ||
		!strings.Contains(err.Error(), table) || !strings.Contains(err.Error(), "run-a") || !strings.Contains(err.Error(), "3s") {
		t.Fatalf("RunStep: %v, want a STORE_UNAVAILABLE naming %s, run-a and the 3s budget, not transient", err, table)
	}
	if elapsed < budget || elapsed > budget+10*time.Second {
		t.Fatalf("gave up after %s, want the budget %s (plus at most a LOCK_TIMEOUT slice)", elapsed, budget)
	}
	got := ws.all()
	if len(got) == 0 {
		t.Fatal("no progress report while waiting")
	}
	var last time.Duration
	for _, l := range got {
		if !strings.HasSuffix(l.Resource, "."+table) || l.RunID != "run-a" || l.Budget != budget ||
			!strings.HasPrefix(l.Holder, "transaction ") || l.Since.IsZero() || l.Waited <= last || l.Waited >= budget {
			t.Fatalf("progress %+v (%s): want the fence table, run-a, its holder since when, growing waits under the budget", l, l)
		}
		last = l.Waited
	}
	release()
	<-deadDone
	if got := effectRows(t, w, "run-a", "sql.y"); got != 0 {
		t.Fatalf("run-a sql.y: %d effects, want none", got)
	}
}

// TestWarehouseLegacyFence: a run in flight across the upgrade has its
// fence in the shared dvt_run_fences of earlier versions. The higher of the
// two counts, and a newer runner raises the shared row, so that a runner of
// the earlier version, which still claims there, is fenced off.
func TestWarehouseLegacyFence(t *testing.T) {
	srv := sftest.Start(t)
	w := openWarehouseOpts(t, srv, snowflake.WarehouseOptions{})
	createEffects(t, w)
	for _, q := range []string{
		"CREATE TABLE dvt_run_fences (run_id VARCHAR NOT NULL, fence BIGINT NOT NULL)",
		"INSERT INTO dvt_run_fences VALUES ('run-old', 5)",
	} {
		if _, err := w.DB().ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.RunStep(ctx, effectStep("run-old", "sql.stale", 4)); engine.CodeOf(err) != engine.CodeLeaseLost {
		t.Fatalf("fence 4 after the shared table saw 5: %v, want LEASE_LOST", err)
	}
	if _, err := w.RunStep(ctx, effectStep("run-old", "sql.new", 6)); err != nil {
		t.Fatal(err)
	}
	var shared int64
	if err := w.DB().QueryRowContext(ctx, "SELECT MAX(fence) FROM dvt_run_fences WHERE run_id = 'run-old'").Scan(&shared); err != nil || shared != 6 {
		t.Fatalf("shared fence %d %v, want 6: an earlier version's runner must be fenced off", shared, err)
	}
	if a, b := effectRows(t, w, "run-old", "sql.stale"), effectRows(t, w, "run-old", "sql.new"); a != 0 || b != 1 {
		t.Fatalf("effects: stale %d, new %d; want 0 and 1", a, b)
	}
	// A run that never had a shared row does not touch the shared table.
	if _, err := w.RunStep(ctx, effectStep("run-new", "sql.a", 1)); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := w.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM dvt_run_fences WHERE run_id = 'run-new'").Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("run-new has %d shared fence rows (%v), want 0", rows, err)
	}
}

// TestRunnerLockWaitNotMultipliedByRetries: a runner that retries
// transient step errors three times meets its run's fence held by a dead
// transaction: it waits the budget once and stops the run with
// STORE_UNAVAILABLE, resumable, without a single retry.
func TestRunnerLockWaitNotMultipliedByRetries(t *testing.T) {
	srv := sftest.Start(t)
	st := openStore(t, srv.DSN("dvt", "state"), snowflake.Options{})
	t.Cleanup(func() { st.Close() })
	dead := openWarehouseOpts(t, srv, snowflake.WarehouseOptions{})
	createEffects(t, dead)
	p, err := plan.Parse([]byte(`
planId: sf_wait
planVersion: "1"
steps:
  - {id: sql.insert, kind: sql, sql: "INSERT INTO effects SELECT 'r', 'sql.insert'"}
`), "plan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clock := engine.ClockFunc(time.Now)
	ids := engine.IDFunc(uuid.NewString)
	cfg := engine.Config{TenantID: "acme", ProjectID: "shop", EnvironmentID: "test"}
	eng := &engine.Engine{Log: st, Clock: clock, IDs: ids, Config: cfg}
	runID, err := eng.StartRun(ctx, engine.StartRequest{Plan: p})
	if err != nil {
		t.Fatal(err)
	}
	// The run's dead runner holds its fence.
	held, release := srv.HoldAnswers(holdsStep(runID, "sql.dead"))
	defer release()
	deadDone := stepAsync(dead, effectStep(runID, "sql.dead", 1))
	awaitHeld(t, held, "the dead runner")

	const budget = 2 * time.Second
	var ws waits
	w := openWarehouseOpts(t, srv, snowflake.WarehouseOptions{LockWait: budget, OnWait: ws.report})
	var retries sync.Map
	rn := &runner.Runner{Log: st, Clock: clock, IDs: ids,
		Observe: runner.ObserverFunc(func(pr runner.Progress) {
			if pr.Phase == runner.PhaseStepRetry {
				retries.Store(pr.EngineAttempt, pr.Err)
			}
		}),
		Config: runner.Config{Config: cfg, Owner: "runner-b", LeaseTTL: time.Minute, Retry: runner.RetryPolicy{Max: 3, Initial: 10 * time.Millisecond}}}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = rn.Execute(rctx, runID, p, w)
	if engine.CodeOf(err) != engine.CodeStoreUnavailable {
		t.Fatalf("Execute: %v, want STORE_UNAVAILABLE", err)
	}
	retries.Range(func(k, v any) bool {
		t.Errorf("engine attempt %v retried the lock wait after %v", k, v)
		return true
	})
	if len(ws.all()) == 0 {
		t.Fatal("no progress report while waiting")
	}
	evs, err := st.ListEvents(ctx, runID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if snap := engine.Project(runID, evs); snap.Status.Terminal() {
		t.Fatalf("run %s after the wait, want it resumable", snap.Status)
	}
	release()
	<-deadDone
}
