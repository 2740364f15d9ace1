package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// BenchmarkListRuns reads a 20-run page of the history from a store of
// 2,000 runs of 12 events each and, newest, a run of 50,000 events (the
// page's times and first failure are read for its runs only).
func BenchmarkListRuns(b *testing.B) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "state.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for i := range 2000 {
		f := storetest.NewFixture()
		if i%2 == 0 {
			f.Meta.PlanID = "even"
		}
		f.Bootstrap(b, s)
		evs := benchEvents(f, 8)
		evs = append(evs, f.Event(engine.StepStarted, "test.t", 1), f.Event(engine.StepFailed, "test.t", 1), f.Event(engine.RunFailed, "", 1))
		if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, evs); err != nil {
			b.Fatal(err)
		}
	}
	big := storetest.NewFixture()
	big.Bootstrap(b, s)
	all := benchEvents(big, 50000)
	for i := 0; i < len(all); i += 1000 {
		if _, err := s.AppendAndEnqueue(ctx, big.Meta.RunID, all[i:i+1000]); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		f    store.RunFilter
	}{
		{"newest page", store.RunFilter{TenantID: "acme", Limit: 20}},
		{"failed of a plan", store.RunFilter{TenantID: "acme", Status: engine.StatusFailed, PlanID: "even", Limit: 20}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				runs, err := s.ListRuns(ctx, c.f)
				if err != nil || len(runs) != 20 {
					b.Fatalf("%d runs, %v", len(runs), err)
				}
			}
		})
	}
}
