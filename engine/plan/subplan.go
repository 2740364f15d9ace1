package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dvtrun/dvtrun/engine"
)

// Subset returns the plan restricted to the steps ids names, in plan
// order. As in dbt, an edge through a step that is not selected is kept as
// an edge between the selected steps on either side of it: if C needs B
// needs A and only A and C are selected, C still waits for A (and is
// skipped if A fails). Dependencies outside the selection are assumed to
// exist already.
func (p *Plan) Subset(ids []string) (*Plan, error) {
	byID := make(map[string]int, len(p.Steps))
	for i, s := range p.Steps {
		byID[s.ID] = i
	}
	want := make(map[string]bool, len(ids))
	var missing []string
	for _, id := range ids {
		if _, ok := byID[id]; !ok {
			missing = append(missing, id)
		}
		want[id] = true
	}
	if len(missing) > 0 {
		return nil, engine.Errorf(engine.CodePlanInvalid, "plan %s has no step %s", engine.OrUnknown(p.PlanID), strings.Join(missing, ", "))
	}
	// nearest[id]: the selected steps id depends on, directly or through
	// steps that are not selected.
	nearest := map[string][]string{}
	var reach func(id string, seen map[string]bool) []string
	reach = func(id string, seen map[string]bool) []string {
		if r, ok := nearest[id]; ok {
			return r
		}
		if seen[id] { // a cycle: Validate reports it
			return nil
		}
		seen[id] = true
		var out []string
		for _, d := range p.Steps[byID[id]].DependsOn {
			if _, ok := byID[d]; !ok {
				continue
			}
			if want[d] {
				out = appendNew(out, d)
				continue
			}
			for _, x := range reach(d, seen) {
				out = appendNew(out, x)
			}
		}
		nearest[id] = out
		return out
	}
	sub := *p
	sub.Steps = make([]Step, 0, len(want))
	for _, s := range p.Steps {
		if !want[s.ID] {
			continue
		}
		s.DependsOn = slices.Clone(reach(s.ID, map[string]bool{}))
		sub.Steps = append(sub.Steps, s)
	}
	return &sub, nil
}

func appendNew(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// Selected returns the part of p the request q runs: p itself when there is
// no selection.
func Selected(p *Plan, q engine.RunQueuedRequest) (*Plan, error) {
	if q.Selection == nil {
		return p, nil
	}
	sub, err := p.Subset(q.Selection.Steps)
	if err != nil {
		return nil, fmt.Errorf("the run's recorded selection does not fit the plan: %w", err)
	}
	return sub, nil
}
