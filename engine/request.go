package engine

import (
	"bytes"
	"context"
	"encoding/json"
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
		// Numbers in vars stay as written (json.Number): a float64 would
		// round an id beyond 2^53 before it is rendered.
		dec := json.NewDecoder(bytes.NewReader(ev.Payload))
		dec.UseNumber()
		if err := dec.Decode(&q); err != nil {
			return RunQueuedRequest{}, Errorf(CodeStoreCorrupt, "run %s: RunQueued payload does not decode: %v", ev.RunID, err)
		}
		if q.Selection != nil && len(q.Selection.Steps) == 0 {
			return RunQueuedRequest{}, Errorf(CodeStoreCorrupt, "run %s: RunQueued records a selection with no steps", ev.RunID)
		}
		return q, nil
	}
	return RunQueuedRequest{}, nil
}

// RecordedPlanRef returns the PlanRef a run was queued with (RunQueued's
// planRef, with the bundle's files). A run whose RunQueued carries none
// gets its metadata's sha256 alone.
func RecordedPlanRef(ctx context.Context, log EventReader, meta RunMetadata) (PlanRef, error) {
	q, err := RecordedRequest(ctx, log, meta)
	return q.PlanRef, err
}

// RecordedRequest returns what a run was queued with (RunQueued's payload:
// its selection, flags and PlanRef); its PlanRef is RecordedPlanRef's.
func RecordedRequest(ctx context.Context, log EventReader, meta RunMetadata) (RunQueuedRequest, error) {
	evs, err := log.ListEvents(ctx, meta.RunID, 0, 1)
	if err != nil {
		return RunQueuedRequest{}, err
	}
	q, err := QueuedRequest(evs)
	if err != nil {
		return RunQueuedRequest{}, err
	}
	if q.PlanRef.SHA256 == "" {
		q.PlanRef = PlanRef{SHA256: meta.PlanSHA256, PlanID: meta.PlanID, PlanVersion: meta.PlanVersion}
	}
	return q, nil
}
