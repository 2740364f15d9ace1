package sqlite_test

import (
	"context"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine/audit"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// BenchmarkAppendChain appends batches of 10 events with ~230-byte
// payloads to two stores, one with the hash chain and one without,
// alternating batch by batch so that load on the machine falls on both
// alike, and reports each one's time per batch and their ratio (target:
// chained/unchained ≤ 1.10).
func BenchmarkAppendChain(b *testing.B) {
	const batch = 10
	chained, fc := openBench(b)
	plain, fp := openBench(b)
	sqlite.Unchained(plain)
	ec, ep := benchEvents(fc, b.N*batch), benchEvents(fp, b.N*batch)
	ctx := context.Background()
	var tc, tp time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Alternate which goes first: neither always finds the disk busy.
		order := []bool{i%2 == 0, i%2 != 0}
		for _, chain := range order {
			s, f, ev, t := plain, fp, ep, &tp
			if chain {
				s, f, ev, t = chained, fc, ec, &tc
			}
			start := time.Now()
			if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, ev[i*batch:(i+1)*batch]); err != nil {
				b.Fatal(err)
			}
			*t += time.Since(start)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(tc.Microseconds())/float64(b.N), "chained-µs/batch")
	b.ReportMetric(float64(tp.Microseconds())/float64(b.N), "unchained-µs/batch")
	b.ReportMetric(float64(tc)/float64(tp), "chained/unchained")
}

// BenchmarkCheckpoint1M appends 1,000,000 chained events (100 runs of
// 10,000, in batches of 1,000), then times the first checkpoint over them
// all: indexing every event into the global log, reading the log back,
// building the tree and signing. It reports the checkpoint's seconds, the
// Go heap at its end (before a GC), the heap the checkpointer keeps for
// the next round (its tree: ~2 hashes per event) and all it allocated.
func BenchmarkCheckpoint1M(b *testing.B) {
	const runs, perRun, batch = 100, 10_000, 1_000
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "state.db"), sqlite.Options{})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		for range runs {
			f := storetest.NewFixture()
			f.Bootstrap(b, s)
			events := benchEvents(f, perRun-2)
			for j := 0; j < len(events); j += batch {
				if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, events[j:min(j+batch, len(events))]); err != nil {
					b.Fatal(err)
				}
			}
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		b.StartTimer()
		start := time.Now()
		c := &audit.Checkpointer{Log: s, SigningKey: storetest.TestKey, Now: time.Now}
		cp, fresh, err := c.Checkpoint(ctx)
		if err != nil || !fresh || cp.Size != runs*perRun {
			b.Fatalf("checkpoint of %d (fresh %v): %v", cp.Size, fresh, err)
		}
		elapsed := time.Since(start)
		b.StopTimer()
		runtime.ReadMemStats(&after)
		peak := after.HeapAlloc - before.HeapAlloc // no GC since: what the checkpoint made
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(elapsed.Seconds(), "checkpoint-s")
		b.ReportMetric(float64(peak)/(1<<20), "heap-MiB-at-end")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heap-MiB-kept")
		b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/(1<<20), "alloc-MiB")
		runtime.KeepAlive(c)
		s.Close()
	}
}
