package store

import (
	"slices"
	"strings"

	"github.com/dvtrun/dvtrun/engine"
)

// PulseRuns checks a Pulse call's arguments, shared by the backends, and
// returns the runs sorted by run id, the order of the signals it answers;
// none when none are asked (no request then, whoever asks). A run asked
// twice would have two fences and two cursors: the caller's mistake,
// refused rather than guessed at.
func PulseRuns(owner string, runs []engine.PulseRun) ([]engine.PulseRun, error) {
	if len(runs) == 0 {
		return nil, nil
	}
	if owner == "" {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "a pulse needs an owner")
	}
	sorted := slices.Clone(runs)
	slices.SortFunc(sorted, func(a, b engine.PulseRun) int { return strings.Compare(a.RunID, b.RunID) })
	for i := 1; i < len(sorted); i++ {
		if sorted[i].RunID == sorted[i-1].RunID {
			return nil, engine.Errorf(engine.CodeInvalidArgument, "run %s is asked twice in one pulse", sorted[i].RunID)
		}
	}
	return sorted, nil
}
