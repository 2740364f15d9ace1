package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// payload230 is a StepCompleted payload of about 230 bytes.
var payload230 = json.RawMessage(`{"rowsAffected":1200,"rowCount":1200,"durationMs":153,"queryIds":["01b2c3d4-0000-1111-0000-000000000001"],"outputs":{"relation":"main.orders","materialized":"table","warnings":0,"note":"built from stg_orders"}}`)

// benchEvents makes n distinct valid events of one run: StepStarted and
// StepCompleted of n/2 steps, each with a ~230-byte payload, so the append
// path does its real transition bookkeeping.
func benchEvents(f *storetest.Fixture, n int) []engine.RunEventWrite {
	out := make([]engine.RunEventWrite, n)
	for i := range out {
		typ := engine.StepStarted
		if i%2 == 1 {
			typ = engine.StepCompleted
		}
		e := f.Event(typ, fmt.Sprintf("model.m%07d", i/2), 1)
		e.Payload = payload230
		out[i] = e
	}
	return out
}

func openBench(b *testing.B) (*sqlite.Store, *storetest.Fixture) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "state.db")
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	f := storetest.NewFixture()
	f.Bootstrap(b, s)
	return s, f
}

func benchAppend(b *testing.B, batch int) {
	s, f := openBench(b)
	events := benchEvents(f, b.N*batch)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, events[i*batch:(i+1)*batch]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "events/s")
}

// reportBytes reports the database's bytes on disk per stored event, after
// a checkpoint folds the WAL into the main file.
func reportBytes(b *testing.B, s *sqlite.Store, n int) {
	if _, err := s.DB().Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		b.Fatal(err)
	}
	size := int64(0)
	for _, suffix := range []string{"", "-wal"} {
		if fi, err := os.Stat(s.Path() + suffix); err == nil {
			size += fi.Size()
		}
	}
	b.ReportMetric(float64(size)/float64(n), "disk-B/event")
}

// BenchmarkDiskPerEvent appends 20,000 events with ~230-byte payloads in
// batches of 100 and reports the state store's bytes on disk per event
// (event row, its indexes, the outbox row and the registry). The size is
// what matters here, not the time.
func BenchmarkDiskPerEvent(b *testing.B) {
	const n, batch = 20000, 100
	for b.Loop() {
		b.StopTimer()
		s, f := openBench(b)
		events := benchEvents(f, n)
		b.StartTimer()
		for i := 0; i < n; i += batch {
			if _, err := s.AppendAndEnqueue(context.Background(), f.Meta.RunID, events[i:i+batch]); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		reportBytes(b, s, n)
		b.StartTimer()
	}
}

// BenchmarkAppendOne: one event per AppendAndEnqueue transaction.
func BenchmarkAppendOne(b *testing.B) { benchAppend(b, 1) }

// BenchmarkAppendBatch100: batches of 100 events.
func BenchmarkAppendBatch100(b *testing.B) { benchAppend(b, 100) }

// ceilingWriter writes the same rows into the same tables with plain
// prepared INSERTs in one transaction per batch — the event row, its outbox
// row and the sequence update — without validation, dedup or transition
// checks: the most the database itself allows.
type ceilingWriter struct {
	db            *sql.DB
	ins, out, seq *sql.Stmt
	runID         string
	next          int64
}

func newCeiling(b *testing.B, s *sqlite.Store, runID string) *ceilingWriter {
	db := s.DB().DB
	ins, err := db.Prepare(`INSERT INTO dvt_run_events (run_id, run_seq, tenant_id, project_id, environment_id, event_id, event_type, step_id, plan_id, plan_version, logical_attempt_id, engine_attempt_id, idempotency_key, emitted_at, persisted_at, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		b.Fatal(err)
	}
	out, _ := db.Prepare(`INSERT INTO dvt_outbox (run_id, run_seq) VALUES (?, ?)`)
	seq, _ := db.Prepare(`UPDATE dvt_run_seq SET next_seq = ? WHERE run_id = ?`)
	return &ceilingWriter{db: db, ins: ins, out: out, seq: seq, runID: runID, next: 3}
}

func (c *ceilingWriter) write(b *testing.B, events []engine.RunEventWrite) {
	tx, err := c.db.BeginTx(context.Background(), nil)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC().Format(engine.TimeFormat)
	for _, e := range events {
		if _, err := tx.Stmt(c.ins).Exec(e.RunID, c.next, e.TenantID, e.ProjectID, e.EnvironmentID, e.EventID, string(e.EventType), e.StepID, e.PlanID, e.PlanVersion, e.LogicalAttemptID, e.EngineAttemptID, e.IdempotencyKey, e.EmittedAt.Format(engine.TimeFormat), now, string(e.Payload)); err != nil {
			b.Fatal(err)
		}
		if _, err := tx.Stmt(c.out).Exec(e.RunID, c.next); err != nil {
			b.Fatal(err)
		}
		c.next++
	}
	if _, err := tx.Stmt(c.seq).Exec(c.next, c.runID); err != nil {
		b.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
}

func ceiling(b *testing.B, batch int) {
	s, f := openBench(b)
	events := benchEvents(f, b.N*batch)
	c := newCeiling(b, s, f.Meta.RunID)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.write(b, events[i*batch:(i+1)*batch])
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkCeilingOne is BenchmarkAppendOne's ceiling.
func BenchmarkCeilingOne(b *testing.B) { ceiling(b, 1) }

// BenchmarkCeilingBatch100 is BenchmarkAppendBatch100's ceiling.
func BenchmarkCeilingBatch100(b *testing.B) { ceiling(b, 100) }

// BenchmarkAppendVsCeiling runs AppendAndEnqueue and the ceiling's plain
// INSERTs on two stores batch by batch, alternating which goes first, so
// that the load on a shared machine falls on both alike; it reports each
// one's time per batch and ceiling/append, the fraction of the ceiling's
// throughput the append reaches (target ≥ 0.85), in wall time and in CPU
// time.
func BenchmarkAppendVsCeiling(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			sa, fa := openBench(b)
			sc, fc := openBench(b)
			ea, ec := benchEvents(fa, b.N*batch), benchEvents(fc, b.N*batch)
			c := newCeiling(b, sc, fc.Meta.RunID)
			ctx := context.Background()
			var ta, tc, ca, cc time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, app := range []bool{i%2 == 0, i%2 != 0} {
					start, cpu := time.Now(), cpuTime()
					if app {
						if _, err := sa.AppendAndEnqueue(ctx, fa.Meta.RunID, ea[i*batch:(i+1)*batch]); err != nil {
							b.Fatal(err)
						}
						ta, ca = ta+time.Since(start), ca+cpuTime()-cpu
					} else {
						c.write(b, ec[i*batch:(i+1)*batch])
						tc, cc = tc+time.Since(start), cc+cpuTime()-cpu
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(ta.Microseconds())/float64(b.N), "append-µs/batch")
			b.ReportMetric(float64(tc.Microseconds())/float64(b.N), "ceiling-µs/batch")
			b.ReportMetric(float64(tc)/float64(ta), "ceiling/append")
			// CPU time (the process's, both sides single-threaded but for
			// the runtime): what the append costs whatever the neighbours do.
			if ca > 0 {
				b.ReportMetric(float64(ca.Microseconds())/float64(b.N), "append-cpu-µs/batch")
				b.ReportMetric(float64(cc.Microseconds())/float64(b.N), "ceiling-cpu-µs/batch")
				b.ReportMetric(float64(cc)/float64(ca), "ceiling/append-cpu")
			}
		})
	}
}
