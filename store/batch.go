package store

import (
	"maps"
	"slices"

	"github.com/dvtrun/dvtrun/engine"
)

// Batch is an append batch checked against its run, with repeated
// idempotency keys folded: Events holds the first occurrence of each key,
// in order, so that no backend ever offers one key twice (a Snowflake MERGE
// whose source holds a key twice inserts it twice).
type Batch struct {
	Events  []engine.RunEventWrite
	repeats map[int]int // position in the caller's slice -> position in Events
}

// FoldBatch checks events, already validated with engine.Validate, against
// the run they are appended to — each must carry its run id, tenancy and
// plan (run is the run's dvt_runs row) — and folds repeated keys. The error
// is SCHEMA_VALIDATION_FAILED; nothing has been written.
func FoldBatch(run engine.RunMetadata, events []engine.RunEventWrite) (Batch, error) {
	b := Batch{repeats: map[int]int{}}
	first := make(map[string]int, len(events))
	for i, e := range events {
		if e.RunID != run.RunID {
			return Batch{}, engine.Errorf(engine.CodeSchemaValidationFailed, "%s event %s belongs to run %s, not %s; nothing was written", e.EventType, e.EventID, e.RunID, run.RunID)
		}
		if e.TenantID != run.TenantID || e.ProjectID != run.ProjectID || e.EnvironmentID != run.EnvironmentID || e.PlanID != run.PlanID || e.PlanVersion != run.PlanVersion {
			return Batch{}, engine.Errorf(engine.CodeSchemaValidationFailed,
				"%s event %s carries tenant/project/environment/plan %s/%s/%s/%s@%s but run %s is %s/%s/%s/%s@%s; nothing was written",
				e.EventType, e.EventID, e.TenantID, e.ProjectID, e.EnvironmentID, e.PlanID, e.PlanVersion,
				run.RunID, run.TenantID, run.ProjectID, run.EnvironmentID, run.PlanID, run.PlanVersion)
		}
		if j, dup := first[e.IdempotencyKey]; dup {
			b.repeats[i] = j
			continue
		}
		first[e.IdempotencyKey] = len(b.Events)
		b.Events = append(b.Events, e)
	}
	return b, nil
}

// Repeats returns, in the caller's order, the position in Events of the
// first occurrence of each event that repeated a key earlier in the batch:
// those come back as Deduped with the first occurrence's record.
func (b Batch) Repeats() []int {
	out := make([]int, 0, len(b.repeats))
	for _, i := range slices.Sorted(maps.Keys(b.repeats)) {
		out = append(out, b.repeats[i])
	}
	return out
}
