package selection_test

import (
	"slices"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/selection"
)

// FuzzSelect: any select/exclude text is INVALID_ARGUMENT or a selection
// of distinct steps of the plan, in dependency order, that is a subset of
// the same selection without the exclusion.
func FuzzSelect(f *testing.F) {
	f.Add("+mart+1", "stg_b")
	f.Add("@tag:nightly,config.materialized:table", "")
	f.Add("path:models/*/stg_[!b]*.sql 2+report", "resource_type:test")
	f.Fuzz(func(t *testing.T, sel, exc string) {
		p := loadDAG(t)
		res, err := selection.Select(p, selection.Spec{Select: []string{sel}, Exclude: []string{exc}})
		if err != nil {
			if engine.CodeOf(err) != engine.CodeInvalidArgument {
				t.Fatalf("error without INVALID_ARGUMENT: %v", err)
			}
			return
		}
		pos := map[string]int{}
		for i, id := range res.Steps {
			if _, dup := pos[id]; dup {
				t.Fatalf("%s selected twice", id)
			}
			pos[id] = i
		}
		for i, id := range res.Steps {
			st, ok := p.Step(id)
			if !ok {
				t.Fatalf("selected %s is not in the plan", id)
			}
			for _, d := range st.DependsOn {
				if j, ok := pos[d]; ok && j > i {
					t.Fatalf("%s before its dependency %s", id, d)
				}
			}
		}
		all, err := selection.Select(p, selection.Spec{Select: []string{sel}})
		if err != nil {
			t.Fatalf("the selection parsed with an exclusion but not without: %v", err)
		}
		for _, id := range res.Steps {
			if !slices.Contains(all.Steps, id) {
				t.Fatalf("excluding added %s", id)
			}
		}
	})
}
