package e2e

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/server/temporaltest"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/runner"
	dvtemporal "github.com/dvtrun/dvtrun/engine/temporal"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

const taskQueue = "dvtrun"

// recordHistory, when set, saves the shop run's workflow history there:
// how engine/temporal/testdata/*.history.json, which the main module's
// replay test runs, are made (make record-temporal-history, or
// go test -run TestShopOnTemporalMatchesLocal . -args -record-history PATH).
var recordHistory = flag.String("record-history", "", "save the shop run's workflow history as JSON to `FILE`")

// saveHistory writes a workflow's history in the JSON form
// worker.WorkflowReplayer reads.
func saveHistory(t *testing.T, c client.Client, wfID, file string) {
	t.Helper()
	var h historypb.History
	it := c.GetWorkflowHistory(context.Background(), wfID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	data, err := protojson.MarshalOptions{Indent: "  "}.Marshal(&h)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

type osFiles struct{}

func (osFiles) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }

type uuids struct{}

func (uuids) NewID() string { return uuid.NewString() }

var wallClock = engine.ClockFunc(time.Now)

var cfg = engine.Config{TenantID: "acme", ProjectID: "shop", EnvironmentID: "test"}

// env is a state store, a warehouse and a Temporal server with a worker
// running dvtrun's adapter.
type env struct {
	t     testing.TB
	ctx   context.Context
	ts    *temporaltest.TestServer
	c     client.Client
	store *sqlite.Store
	wh    *sqlite.Warehouse
	eng   *engine.Engine
	acts  *dvtemporal.Activities
	dir   string
}

func newEnv(t testing.TB, ts *temporaltest.TestServer, wh engine.Warehouse) *env {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "state.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	w, err := sqlite.OpenWarehouse(ctx, filepath.Join(dir, "wh.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if wh == nil {
		wh = w
	}
	e := &env{t: t, ctx: ctx, ts: ts, c: ts.GetDefaultClient(), store: st, wh: w, dir: dir,
		eng: &engine.Engine{Log: st, Clock: wallClock, IDs: uuids{}, Config: cfg}}
	e.acts = &dvtemporal.Activities{Log: st, Clock: wallClock, IDs: uuids{}, Warehouse: wh, Namespace: ts.GetDefaultNamespace(), Config: cfg,
		Heartbeat: 200 * time.Millisecond}
	return e
}

// worker starts a worker on its own task queue (tests run in parallel on
// one server) running plan p.
func (e *env) worker(queue string, p *plan.Plan) {
	e.acts.Plans = dvtemporal.PlanFunc(func(context.Context, string) (*plan.Plan, error) { return p, nil })
	w := e.ts.NewWorker(queue, func(r worker.Registry) { dvtemporal.Register(r, e.acts) })
	_ = w // started by NewWorker, stopped with the server
}

func (e *env) start(p *plan.Plan) string {
	e.t.Helper()
	id, err := e.eng.StartRun(e.ctx, engine.StartRequest{Plan: p})
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

func (e *env) events(runID string) []engine.RunEventRecord {
	e.t.Helper()
	evs, err := e.store.ListEvents(e.ctx, runID, 0, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return evs
}

// verify is `dvtrun verify RUN_ID`: the store's SQL projection equals the
// Go reducer over the log.
func (e *env) verify(runID string) engine.Snapshot {
	e.t.Helper()
	sqlSnap, err := e.store.ProjectSQL(e.ctx, runID)
	if err != nil {
		e.t.Fatal(err)
	}
	goSnap := engine.Project(runID, e.events(runID))
	if d := engine.DiffSnapshots(sqlSnap, goSnap); len(d) > 0 {
		e.t.Fatalf("verify: SQL projection != Go reducer: %+v", d)
	}
	return goSnap
}

func (e *env) run(queue string, in dvtemporal.Input) client.WorkflowRun {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	r, err := dvtemporal.StartRun(ctx, e.c, queue, in)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// wait waits (bounded) for the run's workflow to end.
func (e *env) wait(r client.WorkflowRun, within time.Duration) error {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, within)
	defer cancel()
	err := r.Get(ctx, nil)
	if ctx.Err() != nil {
		e.t.Fatalf("the workflow of run %s did not end within %s", r.GetID(), within)
	}
	return err
}

func newServer(t *testing.T) *temporaltest.TestServer {
	return temporaltest.NewServer(temporaltest.WithT(t))
}

func loadShop(t *testing.T) *plan.Plan {
	t.Helper()
	b, err := plan.LoadBundle(osFiles{}, "../../../plans/shop/plan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return b.Plan
}

// tables reads every user table of a warehouse, rows sorted, as text.
func tables(t *testing.T, db *sql.DB) map[string][]string {
	t.Helper()
	names, err := db.Query(`SELECT name FROM sqlite_master WHERE type IN ('table','view') AND name NOT LIKE 'dvt%' AND name NOT LIKE 'sqlite%' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	var list []string
	for names.Next() {
		var n string
		if err := names.Scan(&n); err != nil {
			t.Fatal(err)
		}
		list = append(list, n)
	}
	names.Close()
	out := map[string][]string{}
	for _, n := range list {
		rows, err := db.Query(fmt.Sprintf(`SELECT * FROM "%s"`, n))
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			out[n] = append(out[n], fmt.Sprint(vals...))
		}
		rows.Close()
		slices.Sort(out[n])
	}
	return out
}

// TestShopOnTemporalMatchesLocal runs README's example plan on the Temporal
// adapter against the real server and on the local runner, each on its
// own warehouse: same results, the Temporal run COMPLETED and verified,
// its RunStarted says engineType temporal with its engineRunRef.
func TestShopOnTemporalMatchesLocal(t *testing.T) {
	t.Parallel()
	ts := newServer(t)
	p := loadShop(t)
	e := newEnv(t, ts, nil)
	e.worker(taskQueue, p)
	runID := e.start(p)
	r := e.run(taskQueue, dvtemporal.Input{RunID: runID, Threads: 4})
	if err := e.wait(r, 2*time.Minute); err != nil {
		t.Fatalf("workflow: %v", err)
	}
	snap := e.verify(runID)
	if snap.Status != engine.StatusCompleted {
		t.Fatalf("run %s is %s, want COMPLETED", runID, snap.Status)
	}
	wantRef := fmt.Sprintf(`"engineRunRef":"temporal://%s/%s/%s"`, ts.GetDefaultNamespace(), runID, r.GetRunID())
	for _, ev := range e.events(runID) {
		if ev.EventType == engine.RunStarted && (!strings.Contains(string(ev.Payload), `"engineType":"temporal"`) || !strings.Contains(string(ev.Payload), wantRef)) {
			t.Fatalf("RunStarted payload %s, want engineType temporal and %s", ev.Payload, wantRef)
		}
	}

	if *recordHistory != "" {
		saveHistory(t, e.c, runID, *recordHistory)
	}

	// The same plan on the local runner, same store kind, its own warehouse.
	local := newEnv(t, ts, nil)
	lid := local.start(p)
	rn := &runner.Runner{Log: local.store, Clock: wallClock, IDs: uuids{}, Config: runner.Config{Config: cfg, Threads: 4, Owner: "local"}}
	lsnap, err := rn.Execute(e.ctx, lid, p, local.wh)
	if err != nil || lsnap.Status != engine.StatusCompleted {
		t.Fatalf("local run: %s, %v", lsnap.Status, err)
	}
	got, want := tables(t, e.wh.DB()), tables(t, local.wh.DB())
	if len(want) == 0 {
		t.Fatal("the local run built no table")
	}
	for name, rows := range want {
		if !slices.Equal(got[name], rows) {
			t.Errorf("table %s: Temporal has %d rows, local %d (or they differ)", name, len(got[name]), len(rows))
		}
	}
	if len(got) != len(want) {
		t.Errorf("Temporal built %d relations, local %d", len(got), len(want))
	}
}

// gate is a warehouse step that blocks until released or cancelled; it
// reports each start and whether its context was cancelled.
type gateWarehouse struct {
	engine.Warehouse
	mu        sync.Mutex
	gates     map[string]chan struct{}
	started   chan string
	cancelled map[string]int
	calls     map[string]int
	failFirst map[string]bool
}

func newGate(wh engine.Warehouse, steps ...string) *gateWarehouse {
	g := &gateWarehouse{Warehouse: wh, gates: map[string]chan struct{}{}, started: make(chan string, 16), cancelled: map[string]int{}, calls: map[string]int{}, failFirst: map[string]bool{}}
	for _, s := range steps {
		g.gates[s] = make(chan struct{})
	}
	return g
}

func (g *gateWarehouse) RunStep(ctx context.Context, req engine.StepRequest) (engine.StepResult, error) {
	g.mu.Lock()
	g.calls[req.StepID]++
	n := g.calls[req.StepID]
	gate := g.gates[req.StepID]
	fail := g.failFirst[req.StepID] && n == 1
	g.mu.Unlock()
	if fail {
		return engine.StepResult{}, engine.Errorf(engine.CodeStepFailed, "permission denied on relation %s", req.Relation)
	}
	if gate != nil {
		g.started <- req.StepID
		select {
		case <-gate:
		case <-ctx.Done():
			g.mu.Lock()
			g.cancelled[req.StepID]++
			g.mu.Unlock()
			return engine.StepResult{}, ctx.Err()
		}
	}
	return g.Warehouse.RunStep(ctx, req)
}

func (g *gateWarehouse) release(step string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.gates[step])
	delete(g.gates, step)
}

func (g *gateWarehouse) count(m map[string]int, step string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return m[step]
}

func recv(t *testing.T, ch <-chan string, what string) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(time.Minute):
		t.Fatalf("timed out after 1m waiting for %s", what)
	}
	return ""
}

// waitFor polls the run's log (bounded) until cond holds.
func (e *env) waitFor(runID, what string, cond func(engine.Snapshot) bool) {
	e.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if cond(engine.Project(runID, e.events(runID))) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Fatalf("timed out after 1m waiting until %s", what)
}

func (e *env) signal(runID string, t engine.SignalType, step string) {
	e.t.Helper()
	sg, err := e.eng.Signal(e.ctx, runID, t, step, "e2e")
	if err != nil {
		e.t.Fatal(err)
	}
	if err := dvtemporal.Forward(e.ctx, e.c, sg); err != nil {
		e.t.Fatal(err)
	}
}

func types(evs []engine.RunEventRecord) []engine.EventType {
	var out []engine.EventType
	for _, ev := range evs {
		out = append(out, ev.EventType)
	}
	return out
}

func stepStatus(s engine.Snapshot, id string) engine.StepStatus {
	for _, st := range s.Steps {
		if st.StepID == id {
			return st.Status
		}
	}
	return ""
}

// sqlPlan is independent sql steps a and b, and c after both.
func sqlPlan() *plan.Plan {
	return &plan.Plan{PlanID: "signals", PlanVersion: "1", SchemaVersion: "1.0", Steps: []plan.Step{
		{ID: "sql.a", Kind: plan.KindSQL, SQL: "CREATE TABLE IF NOT EXISTS a_done (x INTEGER)"},
		{ID: "sql.b", Kind: plan.KindSQL, SQL: "CREATE TABLE IF NOT EXISTS b_done (x INTEGER)"},
		{ID: "sql.c", Kind: plan.KindSQL, SQL: "CREATE TABLE IF NOT EXISTS c_done (x INTEGER)", DependsOn: []string{"sql.a", "sql.b"}},
	}}
}

// TestSignals: PAUSE is immediate (the step in flight is cancelled, its SQL
// with it, and runs again after RESUME); CANCEL cancels the step in flight
// and ends the run CANCELLED; RETRY_STEP re-runs a failed step at the next
// logical attempt. Each decision is in the store.
func TestSignals(t *testing.T) {
	t.Parallel()
	ts := newServer(t)
	t.Run("pause resume", func(t *testing.T) {
		p := sqlPlan()
		var g *gateWarehouse
		e := newEnv(t, ts, nil)
		g = newGate(e.wh, "sql.b")
		e.acts.Warehouse = g
		e.worker("pause", p)
		runID := e.start(p)
		r := e.run("pause", dvtemporal.Input{RunID: runID, Threads: 2, HeartbeatTimeout: time.Second})
		recv(t, g.started, "sql.b to start")
		e.signal(runID, engine.SignalPause, "")
		e.waitFor(runID, "PAUSED", func(s engine.Snapshot) bool { return s.Status == engine.StatusPaused })
		deadline := time.Now().Add(time.Minute)
		for g.count(g.cancelled, "sql.b") == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if g.count(g.cancelled, "sql.b") == 0 {
			t.Fatal("PAUSE did not cancel the step in flight within 1m")
		}
		if s := engine.Project(runID, e.events(runID)); stepStatus(s, "sql.c") != engine.StepStatusPending && stepStatus(s, "sql.c") != "" {
			t.Fatalf("sql.c is %s while PAUSED", stepStatus(s, "sql.c"))
		}
		g.release("sql.b")
		e.signal(runID, engine.SignalResume, "")
		if err := e.wait(r, time.Minute); err != nil {
			t.Fatal(err)
		}
		snap := e.verify(runID)
		if snap.Status != engine.StatusCompleted || g.count(g.calls, "sql.b") != 2 {
			t.Fatalf("run %s with sql.b called %d times; want COMPLETED, twice (cancelled, then again): %v", snap.Status, g.count(g.calls, "sql.b"), types(e.events(runID)))
		}
		for _, want := range []engine.EventType{engine.SignalAccepted, engine.RunPaused, engine.RunResumed, engine.RunCompleted} {
			if !slices.Contains(types(e.events(runID)), want) {
				t.Errorf("no %s in the log", want)
			}
		}
	})
	t.Run("cancel", func(t *testing.T) {
		p := sqlPlan()
		e := newEnv(t, ts, nil)
		g := newGate(e.wh, "sql.b")
		e.acts.Warehouse = g
		e.worker("cancel", p)
		runID := e.start(p)
		r := e.run("cancel", dvtemporal.Input{RunID: runID, Threads: 2, HeartbeatTimeout: time.Second})
		recv(t, g.started, "sql.b to start")
		e.signal(runID, engine.SignalCancel, "")
		if err := e.wait(r, time.Minute); err != nil {
			t.Fatal(err)
		}
		snap := e.verify(runID)
		if snap.Status != engine.StatusCancelled {
			t.Fatalf("run is %s, want CANCELLED", snap.Status)
		}
		if g.count(g.cancelled, "sql.b") != 1 {
			t.Fatal("the in-flight step's SQL was not cancelled")
		}
		if stepStatus(snap, "sql.b") != engine.StepStatusFailed || stepStatus(snap, "sql.c") != engine.StepStatusSkipped {
			t.Fatalf("sql.b %s, sql.c %s; want FAILED (cancelled) and SKIPPED", stepStatus(snap, "sql.b"), stepStatus(snap, "sql.c"))
		}
	})
	t.Run("retry step", func(t *testing.T) {
		// c waits for b only: a's retry is what decides the run.
		p := sqlPlan()
		p.Steps[2].DependsOn = []string{"sql.b"}
		e := newEnv(t, ts, nil)
		g := newGate(e.wh, "sql.b")
		g.failFirst["sql.a"] = true
		e.acts.Warehouse = g
		e.worker("retry", p)
		runID := e.start(p)
		r := e.run("retry", dvtemporal.Input{RunID: runID, Threads: 2, HeartbeatTimeout: time.Second})
		recv(t, g.started, "sql.b to start")
		e.waitFor(runID, "sql.a FAILED", func(s engine.Snapshot) bool { return stepStatus(s, "sql.a") == engine.StepStatusFailed })
		if g.count(g.calls, "sql.a") != 1 {
			t.Fatalf("a permission error was retried by Temporal: %d calls", g.count(g.calls, "sql.a"))
		}
		e.signal(runID, engine.SignalRetryStep, "sql.a")
		e.waitFor(runID, "sql.a SUCCESS", func(s engine.Snapshot) bool { return stepStatus(s, "sql.a") == engine.StepStatusSuccess })
		g.release("sql.b")
		if err := e.wait(r, time.Minute); err != nil {
			t.Fatal(err)
		}
		snap := e.verify(runID)
		if snap.Status != engine.StatusCompleted {
			t.Fatalf("run is %s, want COMPLETED: %v", snap.Status, types(e.events(runID)))
		}
	})
}

// TestContinueAsNewOnALongPlan runs a 3,000-step plan with a history
// budget of 2,000 events: the workflow continues as new carrying the
// statuses, and every step runs exactly once.
func TestContinueAsNewOnALongPlan(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: the 3,000-step plan takes minutes")
	}
	ts := newServer(t)
	const n = 3000
	p := &plan.Plan{PlanID: "long", PlanVersion: "1", SchemaVersion: "1.0"}
	for i := range n {
		s := plan.Step{ID: fmt.Sprintf("sql.s%04d", i), Kind: plan.KindSQL, SQL: "SELECT 1"}
		if i >= 50 {
			s.DependsOn = []string{fmt.Sprintf("sql.s%04d", i-50)}
		}
		p.Steps = append(p.Steps, s)
	}
	e := newEnv(t, ts, nil)
	e.worker("long", p)
	runID := e.start(p)
	r := e.run("long", dvtemporal.Input{RunID: runID, Threads: 16, HistoryBudget: 2000})
	first := r.GetRunID() // Get follows the chain of runs and moves it on
	if err := e.wait(r, 9*time.Minute); err != nil {
		t.Fatal(err)
	}
	snap := e.verify(runID)
	if snap.Status != engine.StatusCompleted || len(snap.Steps) != n {
		t.Fatalf("run %s with %d steps, want COMPLETED with %d", snap.Status, len(snap.Steps), n)
	}
	desc, err := e.c.DescribeWorkflowExecution(e.ctx, runID, "")
	if err != nil {
		t.Fatal(err)
	}
	if desc.WorkflowExecutionInfo.GetExecution().GetRunId() == first {
		t.Fatal("the workflow never continued as new")
	}
	started := 0
	for _, ev := range e.events(runID) {
		if ev.EventType == engine.StepStarted {
			started++
		}
	}
	if started != n {
		t.Fatalf("%d StepStarted for %d steps", started, n)
	}
}
