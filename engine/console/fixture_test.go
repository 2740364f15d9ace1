package console_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/console"
	"github.com/dvtrun/dvtrun/store"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/storetest"
)

var ctx = context.Background()

// hostileStep is a step id with markup and control characters: every page
// must show it escaped.
const hostileStep = "model.<script>alert(1)</script>\x1b[31m"

// failingSQL and failingMsg are what the failing step of the failed run
// sent and got back.
const (
	failingSQL = "SELECT *\nFROM orders\n\tWHERE amount < 0 -- <b>not bold</b>"
	failingMsg = "test found 3 rows with a negative amount"
)

// world is a SQLite state store with four runs of scope acme/shop/dev: one
// completed, one failed by a test (triggered by a schedule, with a target
// and an interval), one still running, and one whose step id is hostile.
type world struct {
	st                        *sqlite.Store
	ok, failed, live, hostile *storetest.Fixture
}

func newWorld(t testing.TB) *world {
	t.Helper()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "state.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	w := &world{st: st}
	w.ok = run(t, st, "shop_plan", map[string]any{"triggeredBy": "ann", "triggerSource": "cli"},
		ev(engine.RunStarted, "", ""),
		ev(engine.StepStarted, "seed.customers", ""), ev(engine.StepCompleted, "seed.customers", `{"rowsAffected":3}`),
		ev(engine.StepStarted, "model.orders", ""), ev(engine.StepCompleted, "model.orders", `{"rowsAffected":42,"sql":"CREATE TABLE orders AS SELECT 1"}`),
		ev(engine.RunCompleted, "", ""))
	w.failed = run(t, st, "nightly_plan", map[string]any{"triggeredBy": "schedule:nightly", "triggerSource": "schedule", "target": "prod",
		"dataInterval": map[string]any{"start": "2026-04-01T00:00:00Z", "end": "2026-04-02T00:00:00Z"}},
		ev(engine.RunStarted, "", ""),
		ev(engine.StepStarted, "model.orders", ""), ev(engine.StepCompleted, "model.orders", `{"rowsAffected":42}`),
		ev(engine.StepStarted, "test.positive_amount", ""),
		ev(engine.StepFailed, "test.positive_amount", mustJSON(map[string]any{"sql": failingSQL, "failures": 3,
			"error": map[string]any{"code": "TEST_FAILED", "message": failingMsg}})),
		ev(engine.StepSkipped, "model.report", `{"reason":"dependency failed"}`),
		ev(engine.RunFailed, "", `{"error":{"code":"STEP_FAILED","message":"1 step failed"}}`))
	w.live = run(t, st, "shop_plan", map[string]any{"triggeredBy": "bob", "triggerSource": "cli"},
		ev(engine.RunStarted, "", ""), ev(engine.StepStarted, "model.orders", ""))
	w.hostile = run(t, st, "shop_plan", map[string]any{"triggeredBy": "eve", "triggerSource": "cli"},
		ev(engine.RunStarted, "", ""), ev(engine.StepStarted, hostileStep, ""),
		ev(engine.StepFailed, hostileStep, `{"error":{"code":"X","message":"<img src=x onerror=alert(2)>"}}`),
		ev(engine.RunFailed, "", `{"error":{"code":"STEP_FAILED","message":"1 step failed"}}`))
	return w
}

type evSpec struct {
	typ     engine.EventType
	step    string
	payload string
}

func ev(t engine.EventType, step, payload string) evSpec { return evSpec{t, step, payload} }

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// run creates a run of plan with the RunQueued payload queued and then
// the events evs, each appended on its own.
func run(t testing.TB, st store.Store, plan string, queued map[string]any, evs ...evSpec) *storetest.Fixture {
	t.Helper()
	f := storetest.NewFixture()
	f.Meta.PlanID = plan
	q := f.Event(engine.RunQueued, "", 1)
	q.Payload = json.RawMessage(mustJSON(queued))
	if _, err := st.BootstrapRun(ctx, f.Meta, []engine.RunEventWrite{q}); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	for _, e := range evs {
		appendEvent(t, st, f, e)
	}
	return f
}

func appendEvent(t testing.TB, st store.Store, f *storetest.Fixture, e evSpec) {
	t.Helper()
	w := f.Event(e.typ, e.step, 1)
	if e.payload != "" {
		w.Payload = json.RawMessage(e.payload)
	}
	if _, err := st.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{w}); err != nil {
		t.Fatalf("append %s %s: %v", e.typ, e.step, err)
	}
}

// fixedClock is the console's clock in tests.
var fixedClock = engine.ClockFunc(func() time.Time { return time.Date(2026, 4, 2, 0, 0, 0, 0, time.UTC) })

// graph is the plans' DAG: the steps of both plans.
func graph(_ context.Context, _ string) ([]console.GraphNode, bool, error) {
	return []console.GraphNode{
		{ID: "seed.customers", Kind: "seed"},
		{ID: "model.orders", Kind: "model", DependsOn: []string{"seed.customers"}},
		{ID: "test.positive_amount", Kind: "test", DependsOn: []string{"model.orders"}},
		{ID: "model.report", Kind: "model", DependsOn: []string{"model.orders", "test.positive_amount"}},
	}, true, nil
}

// config is the console over w's store, in the fixtures' scope.
func (w *world) config() console.Config {
	m := w.ok.Meta
	return console.Config{
		History: w.st, Clock: fixedClock, TenantID: m.TenantID, ProjectID: m.ProjectID, EnvironmentID: m.EnvironmentID,
		Projector: w.st, Requests: w.st, Workers: w.st, Deliveries: w.st, Leases: w.st, PlanGraph: graph,
		Poll: 20 * time.Millisecond,
	}
}

func (w *world) server(t testing.TB, mod func(*console.Config)) *console.Server {
	t.Helper()
	cfg := w.config()
	if mod != nil {
		mod(&cfg)
	}
	s, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
