package sqlite_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/eventgen"
)

// benchStreams makes runs of exactly 20 events: generated streams (retries,
// pauses, failures, noise) cut or padded to length, so every run weighs the
// same and the figures scale with the run count alone.
func benchStreams(runs int) map[string][]engine.RunEventRecord {
	out := make(map[string][]engine.RunEventRecord, runs)
	opts := eventgen.Options{MaxSteps: 8, MaxEvents: 24, AllowGaps: true, Duplicates: true}
	for i := range runs {
		id := fmt.Sprintf("bench-%06d", i)
		events := eventgen.Stream(uint64(i+1), id, opts)
		for seq := events[len(events)-1].RunSeq; len(events) < 20; {
			seq++
			pad := events[len(events)-1]
			pad.EventType, pad.StepID, pad.Payload, pad.RunSeq = "RunHeartbeat", "", nil, seq
			pad.EventID = fmt.Sprintf("%s-pad-%d", id, seq)
			pad.IdempotencyKey = pad.EventID
			events = append(events, pad)
		}
		out[id] = events[:20]
	}
	return out
}

// BenchmarkProjection projects 1,000 and 10,000 runs of 20 events each with
// the SQL projection (one statement) and with the Go reducer reading the
// same events from the same store (one ordered query), in the same run.
// Compare the sql/go pair at each size for the ratio, and each across
// sizes for how it scales.
func BenchmarkProjection(b *testing.B) {
	ctx := context.Background()
	for _, runs := range []int{1000, 10000} {
		s := openProjectionStore(b)
		insertRaw(b, s, benchStreams(runs))
		b.Run(fmt.Sprintf("runs=%d/sql", runs), func(b *testing.B) {
			for b.Loop() {
				snaps, err := s.ProjectAllSQL(ctx)
				if err != nil || len(snaps) != runs {
					b.Fatalf("ProjectAllSQL: %d runs, %v", len(snaps), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(runs*20), "ns/event")
		})
		b.Run(fmt.Sprintf("runs=%d/go", runs), func(b *testing.B) {
			for b.Loop() {
				snaps, err := s.ProjectAllGo(ctx)
				if err != nil || len(snaps) != runs {
					b.Fatalf("ProjectAllGo: %d runs, %v", len(snaps), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(runs*20), "ns/event")
		})
	}
}
