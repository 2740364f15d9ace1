package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/eventgen"
	"github.com/dvtrun/dvtrun/engine/queue"
	"github.com/dvtrun/dvtrun/store/postgres"
	"github.com/dvtrun/dvtrun/store/postgres/pgtest"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// payload230 is a StepCompleted payload of about 230 bytes, as in the
// SQLite benchmarks.
var payload230 = json.RawMessage(`{"rowsAffected":1200,"rowCount":1200,"durationMs":153,"queryIds":["01b2c3d4-0000-1111-0000-000000000001"],"outputs":{"relation":"main.orders","materialized":"table","warnings":0,"note":"built from stg_orders"}}`)

// benchEvents makes n distinct valid events of one run: StepStarted and
// StepCompleted of n/2 steps, so the append does its transition
// bookkeeping.
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

// BenchmarkAppend measures AppendAndEnqueue of 1 and 100 events per
// transaction beside its ceiling, measured in the same run on the same
// server: a transaction that only INSERTs the same rows (one statement of
// arrays) into a copy of dvt_run_events with its indexes. What the append
// adds over it is its authority: the run's row lock, the dedup read, the
// Layer 2 state, the outbox rows.
func BenchmarkAppend(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("append/events=%d", batch), func(b *testing.B) { benchAppend(b, batch) })
		b.Run(fmt.Sprintf("notify-cost/events=%d", batch), func(b *testing.B) { benchNotifyCost(b, batch) })
		b.Run(fmt.Sprintf("ceiling-insert/events=%d", batch), func(b *testing.B) {
			ctx := context.Background()
			s, err := postgres.Open(ctx, pgtest.DSN(b), postgres.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			insert := ceilingInsert(b, s, batch)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				insert(i)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "events/s")
		})
		b.Run(fmt.Sprintf("ratio/events=%d", batch), func(b *testing.B) { benchRatio(b, batch) })
	}
}

// ceilingInsert prepares the ceiling: a copy of dvt_run_events with its
// indexes, and what INSERTs the i-th batch of the same rows into it in a
// transaction of its own.
func ceilingInsert(b *testing.B, s *postgres.Store, batch int) func(i int) {
	ctx := context.Background()
	db := s.DB()
	if _, err := db.ExecContext(ctx, `CREATE TABLE plain_events (LIKE dvt_run_events INCLUDING ALL)`); err != nil {
		b.Fatal(err)
	}
	f := storetest.NewFixture()
	events := benchEvents(f, b.N*batch)
	return func(i int) {
		var seq []int64
		var id, typ, step, key, at []string
		for j, e := range events[i*batch : (i+1)*batch] {
			seq = append(seq, int64(i*batch+j+1))
			id, typ, step, key = append(id, e.EventID), append(typ, string(e.EventType)), append(step, e.StepID), append(key, e.IdempotencyKey)
			at = append(at, e.EmittedAt.UTC().Format(engine.TimeFormat))
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO plain_events (run_id, run_seq, tenant_id, project_id, environment_id, event_id, event_type, step_id,
			plan_id, plan_version, logical_attempt_id, engine_attempt_id, idempotency_key, emitted_at, persisted_at, payload)
			SELECT 'r', e.seq, 't', 'p', 'e', e.id, e.typ, e.step, 'plan', '1', 1, 1, e.key, e.at, e.at, $7::json
			FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) AS e (seq, id, typ, step, key, at)`,
			seq, id, typ, step, key, at, string(payload230)); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
}

// benchRun opens a store on the test server, closed when b ends, with one
// bootstrapped run to append to.
func benchRun(b *testing.B) (*postgres.Store, *storetest.Fixture) {
	s, err := postgres.Open(context.Background(), pgtest.DSN(b), postgres.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	f := storetest.NewFixture()
	f.Bootstrap(b, s)
	return s, f
}

// benchRatio measures the append against its ceiling in turns, one append
// then one ceiling insert of the same batch size on the same server, so
// that the machine's load weighs on both alike, and reports the median of
// each and their ratio (ceiling/append: 1 is the ceiling).
func benchRatio(b *testing.B, batch int) {
	ctx := context.Background()
	s, f := benchRun(b)
	events := benchEvents(f, b.N*batch)
	insert := ceilingInsert(b, s, batch)
	var ta, tc []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, events[i*batch:(i+1)*batch]); err != nil {
			b.Fatal(err)
		}
		ta = append(ta, time.Since(start))
		start = time.Now()
		insert(i)
		tc = append(tc, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(ta)
	slices.Sort(tc)
	a, c := ta[len(ta)/2], tc[len(tc)/2]
	b.ReportMetric(float64(a.Microseconds()), "append-us")
	b.ReportMetric(float64(c.Microseconds()), "ceiling-us")
	b.ReportMetric(float64(c)/float64(a), "x-ceiling")
}

func benchAppend(b *testing.B, batch int) {
	ctx := context.Background()
	s, f := benchRun(b)
	events := benchEvents(f, b.N*batch)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, events[i*batch:(i+1)*batch]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "events/s")
}

// benchNotifyCost measures what the wake-up NOTIFY costs an append:
// appends to two databases in turn (so that the machine's load weighs on
// both alike), one as shipped and one whose sessions resolve pg_notify to
// a no-op function first (search_path public, pg_catalog). It reports the
// median append of each.
func benchNotifyCost(b *testing.B, batch int) {
	ctx := context.Background()
	open := func(shadow bool) (*postgres.Store, *storetest.Fixture) {
		dsn := pgtest.DSN(b)
		s, err := postgres.Open(ctx, dsn, postgres.Options{PollOnly: true})
		if err != nil {
			b.Fatal(err)
		}
		if shadow {
			for _, stmt := range []string{
				`CREATE FUNCTION public.pg_notify(text, text) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$`,
				`DO $$BEGIN EXECUTE format('ALTER DATABASE %I SET search_path = public, pg_catalog', current_database()); END$$`,
			} {
				if _, err := s.DB().ExecContext(ctx, stmt); err != nil {
					b.Fatal(err)
				}
			}
			s.Close() // the pool's sessions take the database's search_path when they start
			if s, err = postgres.Open(ctx, dsn, postgres.Options{PollOnly: true}); err != nil {
				b.Fatal(err)
			}
			var fn string
			if err := s.DB().QueryRowContext(ctx, `SELECT pronamespace::regnamespace::text FROM pg_proc WHERE oid = 'pg_notify(text, text)'::regprocedure`).Scan(&fn); err != nil || fn != "public" {
				b.Fatalf("pg_notify resolves to schema %q (%v), want the no-op in public", fn, err)
			}
		}
		b.Cleanup(func() { s.Close() })
		f := storetest.NewFixture()
		f.Bootstrap(b, s)
		return s, f
	}
	with, fw := open(false)
	without, fo := open(true)
	ew, eo := benchEvents(fw, b.N*batch), benchEvents(fo, b.N*batch)
	var tw, to []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, c := range []struct {
			s   *postgres.Store
			f   *storetest.Fixture
			e   []engine.RunEventWrite
			out *[]time.Duration
		}{{with, fw, ew, &tw}, {without, fo, eo, &to}} {
			start := time.Now()
			if _, err := c.s.AppendAndEnqueue(ctx, c.f.Meta.RunID, c.e[i*batch:(i+1)*batch]); err != nil {
				b.Fatal(err)
			}
			*c.out = append(*c.out, time.Since(start))
		}
	}
	b.StopTimer()
	slices.Sort(tw)
	slices.Sort(to)
	b.ReportMetric(float64(tw[len(tw)/2].Microseconds()), "notify-us/append")
	b.ReportMetric(float64(to[len(to)/2].Microseconds()), "no-notify-us/append")
}

// BenchmarkProjectOneRun decides how one run's projection reads the log
// (issue 18, one projection text): the scoped statement ProjectSQL runs
// (the shared CTEs with the run's predicate inside) against the audit view
// read with the run's predicate outside, over 1,000 generated runs. The
// planner does not push a predicate into a recursive CTE, so the view
// projects every run to answer for one.
func BenchmarkProjectOneRun(b *testing.B) {
	ctx := context.Background()
	s := openProjectionStore(b, false)
	streams := storetest.GenStreams(1, 1000, eventgen.Options{Duplicates: true, AllowGaps: true, Noise: 0.2})
	insertRaw(b, s, streams)
	if _, err := s.DB().ExecContext(ctx, "ANALYZE"); err != nil {
		b.Fatal(err)
	}
	b.Run("scoped-query", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := s.ProjectSQL(ctx, fmt.Sprintf("run-%06d", 1+i%1000)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("view-with-predicate", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			var status string
			if err := s.DB().QueryRowContext(ctx, `SELECT status FROM dvt_run_snapshots WHERE run_id = $1`, fmt.Sprintf("run-%06d", 1+i%1000)).Scan(&status); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkClaims measures run-queue claims per second with 2 workers (two
// store handles, as two processes have): b.N requests are enqueued, then
// both claim until none is left.
//
//   - conditional-update: the store's claim, the conditional UPDATE the
//     SQLite and Snowflake stores share, with its limits, serial schedules
//     and takeovers, under the queue's transaction lock (the workers take
//     turns);
//   - skip-locked: the bare skeleton of the alternative, one UPDATE of the
//     first PENDING row FOR UPDATE SKIP LOCKED, none of those rules: an
//     upper bound of what it could give.
func BenchmarkClaims(b *testing.B) {
	claimers := map[string]func(ctx context.Context, s *postgres.Store, owner string) (bool, error){
		"conditional-update": func(ctx context.Context, s *postgres.Store, owner string) (bool, error) {
			_, ok, err := s.ClaimRequest(ctx, owner, time.Minute, queue.ClaimLimits{})
			return ok, err
		},
		"skip-locked": func(ctx context.Context, s *postgres.Store, owner string) (bool, error) {
			res, err := s.DB().ExecContext(ctx, `UPDATE dvt_run_requests SET state = 'CLAIMED', owner = $1, version = version + 1,
				attempts = attempts + 1, claimed_at = dvt_now()
				WHERE request_id = (SELECT request_id FROM dvt_run_requests WHERE state = 'PENDING' AND not_before <= dvt_now()
				                    ORDER BY priority DESC, enqueue_seq LIMIT 1 FOR UPDATE SKIP LOCKED)`, owner)
			if err != nil {
				return false, err
			}
			n, _ := res.RowsAffected()
			return n == 1, nil
		},
	}
	for _, name := range []string{"conditional-update", "skip-locked"} {
		b.Run(name, func(b *testing.B) { benchClaims(b, claimers[name]) })
	}
}

func benchClaims(b *testing.B, claim func(ctx context.Context, s *postgres.Store, owner string) (bool, error)) {
	ctx := context.Background()
	dsn := pgtest.DSN(b)
	var workers []*postgres.Store
	for range 2 {
		s, err := postgres.Open(ctx, dsn, postgres.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		workers = append(workers, s)
	}
	for i := 0; i < b.N; i++ {
		if _, _, err := workers[0].EnqueueRequest(ctx, newRequest(i), nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	var claimed atomic.Int64
	for i, s := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprint("worker-", i)
			if err := s.Heartbeat(ctx, owner, time.Minute); err != nil {
				b.Error(err)
				return
			}
			for {
				ok, err := claim(ctx, s, owner)
				if err != nil {
					b.Error(err)
					return
				}
				if !ok {
					return
				}
				claimed.Add(1)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if int(claimed.Load()) != b.N {
		b.Fatalf("%d claims of %d requests", claimed.Load(), b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
}

// BenchmarkAppendChain appends batches of 10 events to two stores, one
// with the hash chain and one without, alternating batch by batch so that
// load falls on both alike, and reports each one's time per batch and
// their ratio (target: chained/unchained ≤ 1.10).
func BenchmarkAppendChain(b *testing.B) {
	const batch = 10
	ctx := context.Background()
	open := func() (*postgres.Store, *storetest.Fixture) {
		s, err := postgres.Open(ctx, pgtest.DSN(b), postgres.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		f := storetest.NewFixture()
		f.Bootstrap(b, s)
		return s, f
	}
	chained, fc := open()
	plain, fp := open()
	postgres.Unchained(plain)
	ec, ep := benchEvents(fc, b.N*batch), benchEvents(fp, b.N*batch)
	var tc, tp time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, chain := range []bool{i%2 == 0, i%2 != 0} {
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
