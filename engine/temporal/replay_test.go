package temporal_test

import (
	"testing"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	dvtemporal "github.com/dvtrun/dvtrun/engine/temporal"
)

// TestReplayRecordedHistory replays the history of README's example plan
// run on a real Temporal server (recorded by the e2e module's
// TestShopOnTemporalMatchesLocal -record-history) against the current
// workflow code: a change that breaks determinism fails here, in CI,
// instead of in running workflows. Such a change needs workflow.GetVersion.
func TestReplayRecordedHistory(t *testing.T) {
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(dvtemporal.Run, workflow.RegisterOptions{Name: dvtemporal.WorkflowName})
	if err := r.ReplayWorkflowHistoryFromJSONFile(nil, "testdata/shop.history.json"); err != nil {
		t.Fatalf("replaying the recorded history: %v", err)
	}
}
