package selection_test

import (
	"fmt"
	"testing"

	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/selection"
)

// widePlan is n models in layers of 10 (each model reads two of the layer
// above) with two tests each, every tenth model tagged nightly.
func widePlan(n int) *plan.Plan {
	p := &plan.Plan{PlanID: "wide", PlanVersion: "1"}
	for i := 0; i < n; i++ {
		st := plan.Step{ID: fmt.Sprintf("model.m%d", i), Kind: plan.KindModel, SQL: "select 1", Path: fmt.Sprintf("models/layer%d/m%d.sql", i/10, i)}
		if i >= 10 {
			st.DependsOn = []string{fmt.Sprintf("model.m%d", i-10), fmt.Sprintf("model.m%d", i-10+(i+1)%10-i%10)}
		}
		if i%10 == 0 {
			st.Tags = []string{"nightly"}
		}
		p.Steps = append(p.Steps, st)
	}
	for i := 0; i < n; i++ {
		for _, kind := range []string{"unique", "not_null"} {
			p.Steps = append(p.Steps, plan.Step{ID: fmt.Sprintf("test.%s_m%d", kind, i), Kind: plan.KindTest, SQL: "select 1", DependsOn: []string{fmt.Sprintf("model.m%d", i)}})
		}
	}
	return p
}

// BenchmarkSelect: a 3000-step plan (1000 models, 2000 tests), a union of
// graph-operator and method selectors with an exclusion.
func BenchmarkSelect(b *testing.B) {
	p := widePlan(1000)
	if err := p.Validate(); err != nil {
		b.Fatal(err)
	}
	spec := selection.Spec{Select: []string{"+m995 m500+ tag:nightly,path:models/layer5"}, Exclude: []string{"m42+"}}
	b.ReportAllocs()
	for b.Loop() {
		res, err := selection.Select(p, spec)
		if err != nil || len(res.Steps) == 0 {
			b.Fatal(err, len(res.Steps))
		}
	}
}
