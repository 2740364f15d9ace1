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

// BenchmarkProjectOneRun decides how one run's projection reads the log
// (issue 18, one projection text): the scoped statement ProjectSQL runs
// (the shared CTEs with the run's predicate inside) against the audit view
// read with the run's predicate outside, over 1,000 runs of 20 events.
// SQLite does not push a predicate into a recursive CTE either, so the
// view projects every run to answer for one: the migrations include the
// query's CTEs rather than the query reading the view.
func BenchmarkProjectOneRun(b *testing.B) {
	ctx := context.Background()
	s := openProjectionStore(b)
	insertRaw(b, s, benchStreams(1000))
	b.Run("scoped-query", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := s.ProjectSQL(ctx, fmt.Sprintf("bench-%06d", i%1000)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("view-with-predicate", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			var status string
			if err := s.DB().QueryRowContext(ctx, `SELECT status FROM dvt_run_snapshots WHERE run_id = ?`, fmt.Sprintf("bench-%06d", i%1000)).Scan(&status); err != nil {
				b.Fatal(err)
			}
		}
	})
}
