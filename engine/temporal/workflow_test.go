package temporal_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	dvtemporal "github.com/dvtrun/dvtrun/engine/temporal"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

type osFiles struct{}

func (osFiles) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }

type tickClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *tickClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

type seqIDs struct{ n atomic.Int64 }

func (s *seqIDs) NewID() string { return fmt.Sprintf("00000000-0000-4000-8000-%012x", s.n.Add(1)) }

// countingWarehouse counts RunStep calls per step around a real warehouse,
// and can fail chosen steps.
type countingWarehouse struct {
	engine.Warehouse
	mu    sync.Mutex
	calls map[string]int
	fail  map[string]error
}

func (w *countingWarehouse) RunStep(ctx context.Context, req engine.StepRequest) (engine.StepResult, error) {
	w.mu.Lock()
	w.calls[req.StepID]++
	err := w.fail[req.StepID]
	w.mu.Unlock()
	if err != nil {
		return engine.StepResult{}, err
	}
	return w.Warehouse.RunStep(ctx, req)
}

type fixture struct {
	store *sqlite.Store
	wh    *countingWarehouse
	eng   *engine.Engine
	acts  *dvtemporal.Activities
	plan  *plan.Plan
}

func newFixture(t *testing.T, planFile string) *fixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "state.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	wh, err := sqlite.OpenWarehouse(ctx, filepath.Join(dir, "wh.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wh.Close() })
	b, err := plan.LoadBundle(osFiles{}, planFile)
	if err != nil {
		t.Fatal(err)
	}
	clock, ids := &tickClock{t: time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)}, &seqIDs{}
	cfg := engine.Config{TenantID: "acme", ProjectID: "shop", EnvironmentID: "test"}
	f := &fixture{store: st, wh: &countingWarehouse{Warehouse: wh, calls: map[string]int{}, fail: map[string]error{}},
		eng: &engine.Engine{Log: st, Clock: clock, IDs: ids, Config: cfg}, plan: b.Plan}
	f.acts = &dvtemporal.Activities{Log: st, Clock: clock, IDs: ids, Warehouse: f.wh, Namespace: "default", Config: cfg,
		Plans: dvtemporal.PlanFunc(func(context.Context, string) (*plan.Plan, error) { return b.Plan, nil })}
	return f
}

func (f *fixture) events(t *testing.T, runID string) []engine.RunEventRecord {
	t.Helper()
	evs, err := f.store.ListEvents(context.Background(), runID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func runWorkflow(t *testing.T, f *fixture, in dvtemporal.Input, during func(env *testsuite.TestWorkflowEnvironment)) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.SetTestTimeout(2 * time.Minute)
	dvtemporal.Register(env, f.acts)
	if during != nil {
		during(env)
	}
	env.ExecuteWorkflow(dvtemporal.WorkflowName, in)
	if !env.IsWorkflowCompleted() {
		t.Fatal("the workflow did not complete")
	}
	return env
}

func TestWorkflowRunsThePlanWithTheStoreAsTruth(t *testing.T) {
	f := newFixture(t, "../../plans/shop/plan.yaml")
	runID, err := f.eng.StartRun(context.Background(), engine.StartRequest{Plan: f.plan})
	if err != nil {
		t.Fatal(err)
	}
	env := runWorkflow(t, f, dvtemporal.Input{RunID: runID, Threads: 2}, nil)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatalf("workflow: %v", err)
	}
	evs := f.events(t, runID)
	snap := engine.Project(runID, evs)
	if snap.Status != engine.StatusCompleted {
		t.Fatalf("run is %s, want COMPLETED", snap.Status)
	}
	steps := len(f.plan.InlineEphemeral().Steps)
	if len(snap.Steps) != steps {
		t.Fatalf("%d steps in the snapshot, want %d", len(snap.Steps), steps)
	}
	for _, ev := range evs {
		if ev.EventType == engine.RunStarted {
			if got := string(ev.Payload); !strings.Contains(got, `"engineType":"temporal"`) || !strings.Contains(got, `"engineRunRef":"temporal://default/`) {
				t.Fatalf("RunStarted payload %s", got)
			}
		}
	}
	for id, n := range f.wh.calls {
		if n != 1 {
			t.Errorf("step %s ran %d times", id, n)
		}
	}
	// The store's own answer agrees (it is what `dvtrun status` prints).
	if got, err := f.eng.GetRunStatus(context.Background(), runID); err != nil || got.Status != engine.StatusCompleted {
		t.Fatalf("GetRunStatus = %s, %v", got.Status, err)
	}
}

func TestWorkflowFailureSkipsDependents(t *testing.T) {
	f := newFixture(t, "../../plans/shop/plan.yaml")
	first := f.plan.Order()[0].ID
	f.wh.fail[first] = engine.Errorf(engine.CodeStepFailed, "syntax error near SELEKT")
	runID, err := f.eng.StartRun(context.Background(), engine.StartRequest{Plan: f.plan})
	if err != nil {
		t.Fatal(err)
	}
	runWorkflow(t, f, dvtemporal.Input{RunID: runID, Threads: 2, RetryInitial: time.Millisecond}, nil)
	snap := engine.Project(runID, f.events(t, runID))
	if snap.Status != engine.StatusFailed {
		t.Fatalf("run is %s, want FAILED", snap.Status)
	}
	if f.wh.calls[first] != 1 {
		t.Fatalf("a non-transient failure ran %d times, want once (no Temporal retry)", f.wh.calls[first])
	}
	deps := f.plan.Dependents()[first]
	if len(deps) == 0 {
		t.Fatalf("step %s has no dependents; the test needs one", first)
	}
	for _, st := range snap.Steps {
		for _, d := range deps {
			if st.StepID == d && st.Status != engine.StepStatusSkipped {
				t.Errorf("dependent %s is %s, want SKIPPED", d, st.Status)
			}
		}
	}
}
