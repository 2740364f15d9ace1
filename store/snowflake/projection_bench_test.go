package snowflake_test

import (
	"fmt"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/eventgen"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
)

// benchStreams makes runs of exactly 20 events, as store/sqlite's
// projection benchmark does.
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
// the SQL projection and with the Go reducer reading the same log, on the
// DuckDB-backed test server: it measures the statement's shape and the
// driver path, not Snowflake's warehouse.
func BenchmarkProjection(b *testing.B) {
	srv := sftest.Start(b)
	for _, runs := range []int{1000, 10000} {
		s := openStore(b, srv.DSN("dvt", fmt.Sprintf("bench%d", runs)), snowflake.Options{})
		b.Cleanup(func() { s.Close() })
		loadRaw(b, s, benchStreams(runs))
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
