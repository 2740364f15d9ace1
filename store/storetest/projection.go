package storetest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/eventgen"
)

// GenStreams makes n reproducible runs for the projection property tests:
// run ids are "run-<seed>".
func GenStreams(first, n uint64, o eventgen.Options) map[string][]engine.RunEventRecord {
	out := make(map[string][]engine.RunEventRecord, n)
	for seed := first; seed < first+n; seed++ {
		id := fmt.Sprintf("run-%06d", seed)
		out[id] = eventgen.Stream(seed, id, o)
	}
	return out
}

// ReportDiffs fails t with the first ten differences of a comparison of
// snapshots.
func ReportDiffs(t testing.TB, what string, diffs []engine.SnapshotDiff) {
	t.Helper()
	var b strings.Builder
	for i, d := range diffs {
		if i == 10 {
			fmt.Fprintf(&b, "\n  … %d more", len(diffs)-i)
			break
		}
		fmt.Fprintf(&b, "\n  run %s step %q %s: sql=%q go=%q", d.RunID, d.StepID, d.Field, d.SQL, d.Go)
	}
	t.Errorf("%s: %d differences%s", what, len(diffs), b.String())
}
