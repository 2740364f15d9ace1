package engine

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Selection is the part of a plan a run executes — dbt's --select and
// --exclude, or the failed and skipped steps `dvtrun retry` runs again. It
// is recorded in the run's RunQueued payload, and the runner executes only
// Steps, reading them back from the log (so a resumed run keeps its
// selection whatever flags the resuming process was given).
type Selection struct {
	Select            []string `json:"select,omitempty"`
	Exclude           []string `json:"exclude,omitempty"`
	IndirectSelection string   `json:"indirectSelection,omitempty"`
	// Steps are the selected step ids, in execution order.
	Steps []string `json:"steps"`
}

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
		return nil, Errorf(CodePlanInvalid, "plan %s has no step %s", orUnknown(p.PlanID), strings.Join(missing, ", "))
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
	sub.Steps = make([]PlanStep, 0, len(want))
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

// RunQueuedRequest is what a run's RunQueued payload says about what it
// runs: the plan, its selection (nil: the whole plan), for `dvtrun retry`
// the run it retries, whether incremental models are rebuilt in full
// (--full-refresh), and who triggered it.
type RunQueuedRequest struct {
	PlanRef     PlanRef    `json:"planRef"`
	Selection   *Selection `json:"selection,omitempty"`
	ParentRunID string     `json:"parentRunId,omitempty"`
	FullRefresh bool       `json:"fullRefresh,omitempty"`
	// StartRun writes both trigger fields, empty or not.
	TriggeredBy   string `json:"triggeredBy"`
	TriggerSource string `json:"triggerSource"`
	// Target names the config target the run was started on ("" when the
	// config has no targets); resume and retry reuse it.
	Target string `json:"target,omitempty"`
	// Vars are the run's variables ({{ var('k') }}), after --vars and the
	// schedule's vars were merged; resume reuses them, retry may override.
	Vars map[string]any `json:"vars,omitempty"`
	// DataInterval is the slice of time a scheduled or backfilled run
	// covers; nil for a run started by hand without one.
	DataInterval *DataInterval `json:"dataInterval,omitempty"`
}

// DataInterval is the half-open interval [Start, End) a run covers, as
// Airflow's data intervals: the run fired at tick T covers [previous tick,
// T), and its logical date is Start. Start and End are RFC 3339 in UTC
// (engine.TimeFormat); Timezone is the schedule's IANA zone, in which the
// renderer also shows them.
type DataInterval struct {
	Start    string `json:"start"`
	End      string `json:"end"`
	Timezone string `json:"timezone,omitempty"`
}

// QueuedRequest reads the RunQueued payload of a run's log. A log without
// RunQueued, or a RunQueued without a selection, means the whole plan; a
// selection that does not decode is an error (the log is the authority on
// what the run executes, and guessing would run steps it never selected).
func QueuedRequest(events []RunEventRecord) (RunQueuedRequest, error) {
	for _, ev := range events {
		if ev.EventType != RunQueued {
			continue
		}
		var q RunQueuedRequest
		if len(ev.Payload) == 0 {
			return q, nil
		}
		if err := json.Unmarshal(ev.Payload, &q); err != nil {
			return RunQueuedRequest{}, Errorf(CodeStoreCorrupt, "run %s: RunQueued payload does not decode: %v", ev.RunID, err)
		}
		if q.Selection != nil && len(q.Selection.Steps) == 0 {
			return RunQueuedRequest{}, Errorf(CodeStoreCorrupt, "run %s: RunQueued records a selection with no steps", ev.RunID)
		}
		return q, nil
	}
	return RunQueuedRequest{}, nil
}

// Selected returns the part of p the request runs: p itself when there is
// no selection.
func (q RunQueuedRequest) Selected(p *Plan) (*Plan, error) {
	if q.Selection == nil {
		return p, nil
	}
	sub, err := p.Subset(q.Selection.Steps)
	if err != nil {
		return nil, fmt.Errorf("the run's recorded selection does not fit the plan: %w", err)
	}
	return sub, nil
}
