package sqlite_test

import (
	"context"
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

// ceiling writes the same rows into the same tables with plain prepared
// INSERTs in one transaction per batch — the event row, its outbox row and
// the sequence update — without validation, dedup or transition checks: the
// most the database itself allows.
func ceiling(b *testing.B, batch int) {
	s, f := openBench(b)
	events := benchEvents(f, b.N*batch)
	db := s.DB().DB
	ctx := context.Background()
	ins, err := db.Prepare(`INSERT INTO dvt_run_events (run_id, run_seq, tenant_id, project_id, environment_id, event_id, event_type, step_id, plan_id, plan_version, logical_attempt_id, engine_attempt_id, idempotency_key, emitted_at, persisted_at, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		b.Fatal(err)
	}
	out, _ := db.Prepare(`INSERT INTO dvt_outbox (run_id, run_seq) VALUES (?, ?)`)
	seq, _ := db.Prepare(`UPDATE dvt_run_seq SET next_seq = ? WHERE run_id = ?`)
	next := int64(3)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		now := time.Now().UTC().Format(engine.TimeFormat)
		for _, e := range events[i*batch : (i+1)*batch] {
			if _, err := tx.Stmt(ins).Exec(e.RunID, next, e.TenantID, e.ProjectID, e.EnvironmentID, e.EventID, string(e.EventType), e.StepID, e.PlanID, e.PlanVersion, e.LogicalAttemptID, e.EngineAttemptID, e.IdempotencyKey, e.EmittedAt.Format(engine.TimeFormat), now, string(e.Payload)); err != nil {
				b.Fatal(err)
			}
			if _, err := tx.Stmt(out).Exec(e.RunID, next); err != nil {
				b.Fatal(err)
			}
			next++
		}
		if _, err := tx.Stmt(seq).Exec(next, f.Meta.RunID); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkCeilingOne is BenchmarkAppendOne's ceiling.
func BenchmarkCeilingOne(b *testing.B) { ceiling(b, 1) }

// BenchmarkCeilingBatch100 is BenchmarkAppendBatch100's ceiling.
func BenchmarkCeilingBatch100(b *testing.B) { ceiling(b, 100) }
