package lineagetest_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/lineage"
	"github.com/dvtrun/dvtrun/engine/lineage/lineagetest"
	"github.com/dvtrun/dvtrun/engine/plan"
)

type noPlans struct{}

func (noPlans) RunBundle(context.Context, string) (*plan.Bundle, string, bool, error) {
	return nil, "", false, nil
}

// events maps plan-run events of two runs, and a step run whose parent is
// run a's plan run (hand-built: it needs no plan).
func events(t *testing.T) map[string][]byte {
	t.Helper()
	m, err := lineage.NewMapper(lineage.Options{Naming: lineage.SQLiteNaming("/w.db"), Plans: noPlans{}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, run := range []string{"a", "b"} {
		for _, typ := range []engine.EventType{engine.RunStarted, engine.RunCompleted} {
			ev, err := m.Map(context.Background(), engine.RunEventRecord{RunEventWrite: engine.RunEventWrite{
				EventType: typ, EmittedAt: time.Unix(1e9, 0), RunID: run, PlanID: "plan-" + run}})
			if err != nil || ev == nil {
				t.Fatal(ev, err)
			}
			b, _ := json.Marshal(ev)
			out[run+" "+string(typ)] = b
		}
	}
	step := func(typ, parentRun, parentJob string) []byte {
		return []byte(`{"eventType":"` + typ + `","eventTime":"2001-09-09T01:46:40Z","producer":"https://x.test","schemaURL":"https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
"run":{"runId":"` + lineage.StepRunID("a", "model.m", 1) + `","facets":{"parent":{"_producer":"https://x.test","_schemaURL":"https://openlineage.io/spec/facets/1-1-0/ParentRunFacet.json#/$defs/ParentRunFacet",
"run":{"runId":"` + parentRun + `"},"job":{"namespace":"dvtrun","name":"` + parentJob + `"},"root":{"run":{"runId":"` + parentRun + `"},"job":{"namespace":"dvtrun","name":"` + parentJob + `"}}}}},
"job":{"namespace":"dvtrun","name":"w.main.m"}}`)
	}
	out["step START"] = step("START", lineage.PlanRunID("a"), "plan-a")
	out["step COMPLETE"] = step("COMPLETE", lineage.PlanRunID("a"), "plan-a")
	out["step START, wrong parent job"] = step("START", lineage.PlanRunID("a"), "plan-b")
	out["step START, unknown parent"] = step("START", lineage.PlanRunID("c"), "plan-c")
	return out
}

func TestCheck(t *testing.T) {
	ev := events(t)
	for _, tc := range []struct {
		name  string
		order []string
		want  string // "": passes
	}{
		{"two runs and a step", []string{"a RunStarted", "b RunStarted", "step START", "step COMPLETE", "b RunCompleted", "a RunCompleted"}, ""},
		{"complete before start", []string{"a RunCompleted", "a RunStarted"}, "before its START"},
		{"event after the end", []string{"a RunStarted", "a RunCompleted", "a RunCompleted"}, "ended with COMPLETE"},
		{"started twice", []string{"a RunStarted", "a RunStarted"}, "started twice"},
		{"parent not among the events", []string{"b RunStarted", "step START, unknown parent"}, "is no plan run"},
		{"parent names another job", []string{"a RunStarted", "step START, wrong parent job"}, "is no plan run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var raw [][]byte
			for _, k := range tc.order {
				raw = append(raw, ev[k])
			}
			_, err := lineagetest.Check(raw)
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}
