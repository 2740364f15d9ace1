package temporal_test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	dvtemporal "github.com/dvtrun/dvtrun/engine/temporal"
)

// TestReplayRecordedHistories replays every workflow history kept in
// testdata/ — README's example plan run on a real Temporal server by each
// release whose workflow code differs — against the current workflow
// code: a change that breaks determinism for a workflow in flight fails
// here, in CI, instead of in production. Such a change needs
// workflow.GetVersion (the change IDs in workflow.go) and a history
// recorded by the release before it:
//
//	make record-temporal-history HISTORY=shop-vN.history.json
//
// (the e2e module's TestShopOnTemporalMatchesLocal -record-history).
// shop-unversioned.history.json was recorded before the GetVersion call
// sites existed; shop-v1.history.json by the code that added them.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob("testdata/*.history.json")
	if err != nil || len(files) < 2 {
		t.Fatalf("histories in testdata: %v, %v; want the unversioned one and v1 at least", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(dvtemporal.Run, workflow.RegisterOptions{Name: dvtemporal.WorkflowName})
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
				t.Fatalf("replaying %s: %v", f, err)
			}
		})
	}
}

// TestVersionedHistoryHasEveryChangeID: the newest history was recorded
// by code with every change ID (a version marker each), so it pins the
// versions this release writes.
func TestVersionedHistoryHasEveryChangeID(t *testing.T) {
	data, err := os.ReadFile("testdata/shop-v1.history.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{dvtemporal.ChangeStepDispatch, dvtemporal.ChangeActivityOptions, dvtemporal.ChangeSignals} {
		if !strings.Contains(string(data), base64.StdEncoding.EncodeToString([]byte(`"`+id+`"`))) {
			t.Errorf("testdata/shop-v1.history.json has no version marker for %s", id)
		}
	}
}

// TestReplayCatchesDroppedVersion attacks the check: workflow code that
// no longer supports version 1 of the step dispatch (a change that
// removed the old branch too early) fails to replay the v1 history.
func TestReplayCatchesDroppedVersion(t *testing.T) {
	dropped := func(ctx workflow.Context, in dvtemporal.Input) error {
		workflow.GetVersion(ctx, dvtemporal.ChangeStepDispatch, 2, 2)
		return dvtemporal.Run(ctx, in)
	}
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(dropped, workflow.RegisterOptions{Name: dvtemporal.WorkflowName})
	if err := r.ReplayWorkflowHistoryFromJSONFile(nil, "testdata/shop-v1.history.json"); err == nil {
		t.Fatal("code without version 1 replayed a v1 history")
	}
}
