package projection_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/projection"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// BenchmarkProjector compares bringing a 1,000-step run's snapshot forward
// by one event on SQLite — what the service does per poll, also after a
// restart: load the stored state, refresh from the watermark, store it —
// with projecting the whole log again.
func BenchmarkProjector(b *testing.B) {
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "state.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	f := storetest.NewFixture()
	f.Bootstrap(b, st)
	run := f.Meta.RunID
	for i := range 1000 {
		id := fmt.Sprintf("model.m%d", i)
		if _, err := st.AppendAndEnqueue(ctx, run, []engine.RunEventWrite{f.Event(engine.StepStarted, id, 1), f.Event(engine.StepCompleted, id, 1)}); err != nil {
			b.Fatal(err)
		}
	}
	svc := &projection.Service{Store: st}
	if _, err := svc.ProjectRun(ctx, run); err != nil {
		b.Fatal(err)
	}
	state, _, _ := st.LoadSnapshot(ctx, run)
	b.Run("stored-watermark", func(b *testing.B) {
		n := 0
		for b.Loop() {
			// One event past the watermark each time: a signal decision.
			n++
			e := f.Event(engine.SignalAccepted, "", n)
			e.Payload = []byte(`{"signalType":"PAUSE","signalId":"s","signalSeq":1}`)
			if _, err := st.AppendAndEnqueue(ctx, run, []engine.RunEventWrite{e}); err != nil {
				b.Fatal(err)
			}
			if _, err := svc.ProjectRun(ctx, run); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(state)), "state-bytes")
	})
	p := &projection.Projector{Events: st}
	b.Run("full-log", func(b *testing.B) {
		for b.Loop() {
			if _, err := p.Load(ctx, run); err != nil {
				b.Fatal(err)
			}
		}
	})
}
