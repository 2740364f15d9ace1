package engine_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// millionEventRun is one run of 1,000,000 events: queued, started, then
// steps started and completed (every tenth fails and is retried), completed.
func millionEventRun(tb testing.TB) []engine.RunEventRecord {
	tb.Helper()
	const total = 1_000_000
	recs := make([]engine.RunEventRecord, 0, total)
	add := func(t engine.EventType, step string, attempt int, payload string) {
		seq := int64(len(recs) + 1)
		e := engine.RunEventWrite{
			EventID: "00000000-0000-4000-8000-000000000000", EventType: t,
			EmittedAt: t0.Add(time.Duration(seq) * time.Millisecond), RunID: "bench-run",
			TenantID: "t", ProjectID: "p", EnvironmentID: "e", PlanID: "plan", PlanVersion: "1",
			EngineAttemptID: 1, LogicalAttemptID: attempt, StepID: step,
		}
		if payload != "" {
			e.Payload = []byte(payload)
		}
		k, err := engine.KeyOf(e).IdempotencyKey()
		if err != nil {
			tb.Fatal(err)
		}
		e.IdempotencyKey = k
		recs = append(recs, engine.RunEventRecord{RunEventWrite: e, RunSeq: seq, PersistedAt: e.EmittedAt})
	}
	add(engine.RunQueued, "", 1, "")
	add(engine.RunStarted, "", 1, "")
	for i := 0; len(recs) < total-4; i++ {
		id := fmt.Sprintf("model.m%07d", i)
		add(engine.StepStarted, id, 1, "")
		if i%10 == 9 {
			add(engine.StepFailed, id, 1, `{"error":{"code":"STEP_FAILED","message":"transient"}}`)
			add(engine.StepStarted, id, 2, "")
			add(engine.StepCompleted, id, 2, `{"rowsAffected":1}`)
			continue
		}
		add(engine.StepCompleted, id, 1, `{"rowsAffected":1}`)
	}
	add(engine.RunCompleted, "", 1, "")
	for i := 0; len(recs) < total; i++ { // top up to exactly one million
		add("Heartbeat", "", i+1, "")
	}
	return recs
}

// BenchmarkProjectMillionEvents reports events/s for Project over one run of
// a million events and the heap the resulting snapshot holds.
func BenchmarkProjectMillionEvents(b *testing.B) {
	recs := millionEventRun(b)
	b.ResetTimer()
	b.ReportAllocs()
	var snap engine.Snapshot
	for b.Loop() {
		snap = engine.Project("bench-run", recs)
	}
	b.StopTimer()
	if snap.Inconsistent || snap.Status != engine.StatusCompleted {
		b.Fatalf("unexpected snapshot: %s inconsistent=%v %v", snap.Status, snap.Inconsistent, snap.Violations)
	}
	b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "events/s")

	snap = engine.Snapshot{}
	b.ReportMetric(retainedMiB(func() any { return engine.Project("bench-run", recs) }), "snapshot-MiB")
	runtime.KeepAlive(recs) // the input must not be freed between the two readings
}

// retainedMiB is the live heap that the value f returns keeps reachable.
func retainedMiB(f func() any) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := f()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(v)
	return (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / (1 << 20)
}
