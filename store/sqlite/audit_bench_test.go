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

// BenchmarkVerifyAll times `audit verify --all` (audit.Verify over every
// run, the global log and a checkpoint) on 100k, 250k and 1M chained
// events (runs of 10,000, checkpointed), to show it stays linear. It
// reports the verify's seconds (wall, and the process's CPU time: the
// sampler's share is small), its peak Go heap (HeapAlloc sampled every
// 20 ms while it runs, above the heap before it) and all it allocated.
// Run one size at a time on a shared machine:
//
//	go test ./store/sqlite -run '^$' -bench 'VerifyAll/1M' -benchtime 1x -timeout 30m
func BenchmarkVerifyAll(b *testing.B) {
	const perRun, batch = 10_000, 1_000
	for _, size := range []struct {
		name string
		runs int
	}{{"100k", 10}, {"250k", 25}, {"1M", 100}} {
		b.Run(size.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "state.db"), sqlite.Options{})
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				for range size.runs {
					f := storetest.NewFixture()
					f.Bootstrap(b, s)
					events := benchEvents(f, perRun-2)
					for j := 0; j < len(events); j += batch {
						if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, events[j:min(j+batch, len(events))]); err != nil {
							b.Fatal(err)
						}
					}
				}
				c := &audit.Checkpointer{Log: s, SigningKey: storetest.TestKey, Now: time.Now}
				if _, _, err := c.Checkpoint(ctx); err != nil {
					b.Fatal(err)
				}
				c = nil
				runtime.GC()
				var before runtime.MemStats
				runtime.ReadMemStats(&before)
				peak := before.HeapAlloc
				done := make(chan struct{})
				sampled := make(chan uint64)
				go func() {
					tick := time.NewTicker(20 * time.Millisecond)
					defer tick.Stop()
					top := uint64(0)
					var m runtime.MemStats
					for {
						select {
						case <-done:
							sampled <- top
							return
						case <-tick.C:
							runtime.ReadMemStats(&m)
							top = max(top, m.HeapAlloc)
						}
					}
				}()
				b.StartTimer()
				start, cpu := time.Now(), cpuTime()
				rep, err := audit.Verify(ctx, s, audit.VerifyOptions{PublicKey: storetest.TestPublicKey})
				elapsed, cpu := time.Since(start), cpuTime()-cpu
				b.StopTimer()
				close(done)
				peak = max(peak, <-sampled)
				var after runtime.MemStats
				runtime.ReadMemStats(&after)
				peak = max(peak, after.HeapAlloc)
				if err != nil || rep.Problem != nil || rep.Chained != int64(size.runs*perRun) || rep.LogSize != int64(size.runs*perRun) {
					b.Fatalf("verify: %+v %v", rep, err)
				}
				b.ReportMetric(elapsed.Seconds(), "verify-s")
				b.ReportMetric(cpu.Seconds(), "cpu-s")
				b.ReportMetric(float64(peak-before.HeapAlloc)/(1<<20), "peak-heap-MiB")
				b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/(1<<20), "alloc-MiB")
				b.ReportMetric(float64(elapsed.Nanoseconds())/float64(size.runs*perRun), "ns/event")
				s.Close()
			}
		})
	}
}
