package runner

import (
	"context"
	"slices"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/runresults"
)

// runResults is the close hook that writes the run's run_results.json
// (engine/runresults) from its log so far (in runSeq order) plus the
// closing batch, through
// the Runner's ArtifactWriter. A document that cannot be written is
// reported to the Observer; the run's end is recorded without it.
func (e *Runner) runResults(runID string, runPlan *plan.Plan, logSoFar func(ctx context.Context) ([]engine.RunEventRecord, error)) engine.CloseHook {
	return func(ctx context.Context, pending []engine.RunEventWrite) []engine.ArtifactRef {
		recs, err := logSoFar(ctx)
		if err == nil {
			recs = withPending(recs, pending)
			var data []byte
			data, err = runresults.Build(runID, recs, runPlan).JSON()
			if err == nil {
				var ref engine.ArtifactRef
				ref, err = e.Artifacts.WriteArtifact(ctx, runID, runresults.ArtifactKind, runresults.FileName, data)
				if err == nil {
					e.report(Progress{Phase: PhaseArtifact, RunID: runID, Artifact: &ref})
					return []engine.ArtifactRef{ref}
				}
			}
		}
		e.report(Progress{Phase: PhaseArtifact, RunID: runID, Err: engine.Errorf(engine.CodeArtifactWriteFailed, "run %s: %s was not written: %w", runID, runresults.FileName, err)})
		return nil
	}
}

// withPending appends the batch about to be written to the log (in runSeq
// order), with the sequence numbers the store will give it.
func withPending(recs []engine.RunEventRecord, pending []engine.RunEventWrite) []engine.RunEventRecord {
	recs = slices.Clip(recs)
	seq := int64(0)
	if n := len(recs); n > 0 {
		seq = recs[n-1].RunSeq
	}
	for _, w := range pending {
		seq++
		recs = append(recs, engine.RunEventRecord{RunEventWrite: w, RunSeq: seq})
	}
	return recs
}
