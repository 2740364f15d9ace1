package store_test

import (
	"slices"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store"
)

func TestPulseRuns(t *testing.T) {
	cases := []struct {
		name     string
		owner    string
		runs     []engine.PulseRun
		wantCode engine.Code
		wantIDs  []string
	}{
		{name: "no runs need no owner", owner: "", runs: nil},
		{name: "sorted by run id", owner: "p", runs: []engine.PulseRun{{RunID: "c"}, {RunID: "a"}, {RunID: "b"}}, wantIDs: []string{"a", "b", "c"}},
		{name: "an owner is required", owner: "", runs: []engine.PulseRun{{RunID: "a"}}, wantCode: engine.CodeInvalidArgument},
		{name: "a run asked twice", owner: "p", runs: []engine.PulseRun{{RunID: "b"}, {RunID: "a"}, {RunID: "b", Fence: 3}}, wantCode: engine.CodeInvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := slices.Clone(c.runs)
			got, err := store.PulseRuns(c.owner, c.runs)
			if engine.CodeOf(err) != c.wantCode {
				t.Fatalf("error %v, want code %q", err, c.wantCode)
			}
			var ids []string
			for _, r := range got {
				ids = append(ids, r.RunID)
			}
			if !slices.Equal(ids, c.wantIDs) {
				t.Fatalf("runs %v, want %v", ids, c.wantIDs)
			}
			if !slices.Equal(c.runs, before) {
				t.Fatalf("the caller's slice was reordered: %v", c.runs)
			}
		})
	}
}
