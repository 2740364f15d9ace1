package temporal

import (
	"context"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/dvtrun/dvtrun/engine"
)

// Starter is what StartRun needs of a Temporal client (client.Client).
type Starter interface {
	ExecuteWorkflow(ctx context.Context, options client.StartWorkflowOptions, workflow interface{}, args ...interface{}) (client.WorkflowRun, error)
}

// StartRun starts the workflow of a queued run on taskQueue. Its id is the
// run id, so starting a run twice (a retried request, two schedulers)
// answers the workflow already running and a finished run is never
// started again.
func StartRun(ctx context.Context, c Starter, taskQueue string, in Input) (client.WorkflowRun, error) {
	return start(ctx, c, taskQueue, in, enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE)
}

// ResumeRun is `dvtrun resume` of a run on Temporal: it joins the run's
// workflow while one runs (a PAUSED run's waits for RESUME), and starts a
// new execution of it (same workflow id, the run id) when the last one
// failed, was terminated, cancelled or timed out — the run's log is where
// the new one carries on from (steps shown RUNNING run again, the ledger
// keeps their effects once). A workflow that completed is never started
// again.
func ResumeRun(ctx context.Context, c Starter, taskQueue string, in Input) (client.WorkflowRun, error) {
	return start(ctx, c, taskQueue, in, enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY)
}

func start(ctx context.Context, c Starter, taskQueue string, in Input, reuse enumspb.WorkflowIdReusePolicy) (client.WorkflowRun, error) {
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       in.RunID,
		TaskQueue:                taskQueue,
		WorkflowIDReusePolicy:    reuse,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, WorkflowName, in)
	if err != nil {
		return nil, engine.Errorf(engine.CodeStoreUnavailable, "run %s: Temporal did not start its workflow: %v", in.RunID, err)
	}
	return run, nil
}

// Signaler is what Forward needs of a Temporal client (client.Client).
type Signaler interface {
	SignalWorkflow(ctx context.Context, workflowID string, runID string, signalName string, arg interface{}) error
}

// Forward hands a signal dvtrun stored (engine.Engine.Signal) to the run's
// workflow, which decides it with the same rules and policy as the local
// runner and records the decision in the store.
func Forward(ctx context.Context, c Signaler, sg engine.Signal) error {
	if err := c.SignalWorkflow(ctx, sg.RunID, "", SignalName, sg); err != nil {
		return engine.Errorf(engine.CodeStoreUnavailable, "run %s: the %s signal is stored but Temporal did not take it: %v", sg.RunID, sg.Type, err)
	}
	return nil
}
