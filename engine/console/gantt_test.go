package console

import (
	"fmt"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store"
)

func TestBuildDAGLayers(t *testing.T) {
	cases := []struct {
		name  string
		nodes []GraphNode
		// want is each node's (layer, row).
		want map[string][2]int
	}{
		{"chain", []GraphNode{{ID: "a"}, {ID: "b", DependsOn: []string{"a"}}, {ID: "c", DependsOn: []string{"b"}}},
			map[string][2]int{"a": {0, 0}, "b": {1, 0}, "c": {2, 0}}},
		{"longest path decides the layer", []GraphNode{{ID: "a"}, {ID: "b", DependsOn: []string{"a"}}, {ID: "c", DependsOn: []string{"a", "b"}}},
			map[string][2]int{"a": {0, 0}, "b": {1, 0}, "c": {2, 0}}},
		// By id alone x.1 would sit above y.1; beside their parents they
		// cross nothing.
		{"barycentre keeps children beside their parents", []GraphNode{
			{ID: "a"}, {ID: "b"},
			{ID: "y.1", DependsOn: []string{"a"}}, {ID: "x.1", DependsOn: []string{"b"}},
		}, map[string][2]int{"a": {0, 0}, "b": {0, 1}, "y.1": {1, 0}, "x.1": {1, 1}}},
		{"dependency outside the plan is ignored", []GraphNode{{ID: "a", DependsOn: []string{"gone"}}},
			map[string][2]int{"a": {0, 0}}},
		{"a cycle still terminates", []GraphNode{{ID: "a", DependsOn: []string{"b"}}, {ID: "b", DependsOn: []string{"a"}}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := buildDAG(c.nodes, engine.Snapshot{RunID: "r"}, "r")
			if len(d.Nodes) != len(c.nodes) {
				t.Fatalf("%d nodes drawn, want %d", len(d.Nodes), len(c.nodes))
			}
			for _, n := range d.Nodes {
				want, ok := c.want[n.Step]
				if !ok {
					continue
				}
				got := [2]int{(n.X - dagPad) / (dagW + dagGapX), (n.Y - dagPad) / (dagH + dagGapY)}
				if got != want {
					t.Errorf("%s at layer/row %v, want %v", n.Step, got, want)
				}
				if n.Status != "PENDING" || n.Mark != "○" {
					t.Errorf("%s of a run that never started: %s %s", n.Step, n.Mark, n.Status)
				}
			}
		})
	}
}

func TestShownStepsKeepsFailedAndRunning(t *testing.T) {
	var steps []engine.StepSnapshot
	for i := range 700 {
		s := engine.StepSnapshot{StepID: fmt.Sprintf("m%03d", i), Status: engine.StepStatusSuccess}
		switch i {
		case 650:
			s.Status = engine.StepStatusFailed
		case 699:
			s.Status = engine.StepStatusRunning
		}
		steps = append(steps, s)
	}
	got := shownSteps(steps)
	if len(got) != maxRows || got[0].StepID != "m000" || got[maxRows-3].StepID != "m497" {
		t.Fatalf("%d shown, first %s", len(got), got[0].StepID)
	}
	// In the snapshot's order: the first 498 successes, then the two.
	if got[maxRows-2].StepID != "m650" || got[maxRows-1].StepID != "m699" {
		t.Fatalf("the failed and running steps are not shown: last two %s %s", got[maxRows-2].StepID, got[maxRows-1].StepID)
	}
	if n := len(shownSteps(steps[:10])); n != 10 {
		t.Fatalf("a small run shows %d of 10 steps", n)
	}
}

// TestGanttQueueWaitApart: the queue wait is its own bar, ending where
// the run's execution begins, and a step's bar lies within the run's.
func TestGanttQueueWaitApart(t *testing.T) {
	t0 := time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	sum := store.RunSummary{QueuedAt: t0, StartedAt: t0.Add(60 * time.Second)}
	snap := engine.Snapshot{RunID: "r", Status: engine.StatusCompleted, StartedAt: t0.Add(60 * time.Second), CompletedAt: t0.Add(100 * time.Second),
		Steps: []engine.StepSnapshot{
			{StepID: "model.a", Status: engine.StepStatusSuccess, StartedAt: t0.Add(70 * time.Second), CompletedAt: t0.Add(90 * time.Second)},
			{StepID: "model.b", Status: engine.StepStatusSkipped},
		}}
	g := buildGantt(sum, snap)
	if len(g.Rows) != 4 {
		t.Fatalf("rows %+v", g.Rows)
	}
	wait, run, a, b := g.Rows[0], g.Rows[1], g.Rows[2], g.Rows[3]
	if wait.Class != "wait" || wait.Status != "waited 1m0s" || wait.X != ganttLabel || wait.X+wait.W != run.X {
		t.Errorf("queue wait %+v, run %+v", wait, run)
	}
	if run.X+run.W != ganttLabel+ganttPlot || run.Status != "COMPLETED 40.0s" {
		t.Errorf("run bar %+v", run)
	}
	if a.X != ganttLabel+ganttPlot*70/100 || a.W != ganttPlot*20/100 || a.Status != "SUCCESS 20.0s" || a.Href != "/runs/r/steps/model.a" {
		t.Errorf("step bar %+v", a)
	}
	if b.HasBar || b.Status != "SKIPPED" {
		t.Errorf("a skipped step has no bar: %+v", b)
	}
}
