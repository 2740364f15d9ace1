package snowflake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/audit"
	"github.com/dvtrun/dvtrun/store"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
	"github.com/dvtrun/dvtrun/store/storetest"
)

var ctx = context.Background()

func newClock() *storetest.Clock { return storetest.NewClock() }

func openStore(t testing.TB, dsn string, opts snowflake.Options) *snowflake.Store {
	t.Helper()
	s, err := snowflake.Open(ctx, dsn, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

// TestConformance runs the store suite on the Snowflake-protocol test
// server through gosnowflake. Each Open is a new *sql.DB (its own sessions)
// on the same server database. The concurrency case runs at the suite's
// default size (8 writers × 25 appends on two handles); the test server
// reports the writers' conflicts as 000625 and the store retries them.
func TestConformance(t *testing.T) {
	srv := sftest.Start(t)
	dsn := srv.DSN("dvt", "conformance")
	clock := newClock()
	storetest.Run(t, storetest.Backend{
		Open: func(t *testing.T) store.Store {
			return openStore(t, dsn, snowflake.Options{Now: clock.Now})
		},
		Advance: clock.Advance,
		Fresh: func(t *testing.T) func(t *testing.T) store.Store {
			dsn := srv.DSN("dvt", fmt.Sprintf("queue_%d", freshSchemas.Add(1)))
			return func(t *testing.T) store.Store { return openStore(t, dsn, snowflake.Options{}) }
		},
	})
}

// freshSchemas numbers the schemas of the queue conformance cases.
var freshSchemas atomic.Int64

// TestConformanceOnSnowflake runs the same suite against a real account
// when DVT_SNOWFLAKE_DSN names one (a gosnowflake DSN; use a scratch
// schema: the suite creates the dvt_ tables in it).
func TestConformanceOnSnowflake(t *testing.T) {
	dsn := os.Getenv("DVT_SNOWFLAKE_DSN")
	if dsn == "" {
		t.Skip("DVT_SNOWFLAKE_DSN is not set: no Snowflake account to run the conformance suite against")
	}
	storetest.Run(t, storetest.Backend{
		Open: func(t *testing.T) store.Store {
			return openStore(t, dsn, snowflake.Options{})
		},
	})
}

// TestConcurrentMigrations: two processes opening a fresh schema at the
// same moment apply each migration once.
func TestConcurrentMigrations(t *testing.T) {
	srv := sftest.Start(t)
	dsn := srv.DSN("dvt", "migrate_race")
	const openers = 3
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, openers)
	for range openers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			s, err := snowflake.Open(ctx, dsn, snowflake.Options{RetryBase: 5 * time.Millisecond})
			if err != nil {
				errs <- err
				return
			}
			s.Close()
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent open: %v", err)
	}
	s := openStore(t, dsn, snowflake.Options{})
	defer s.Close()
	rows, err := s.DB().QueryContext(ctx, `SELECT version, COUNT(*) FROM dvt_schema_version GROUP BY version ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	versions := 0
	for rows.Next() {
		var v, n int
		if err := rows.Scan(&v, &n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("migration %d recorded %d times", v, n)
		}
		versions++
	}
	if versions < 3 {
		t.Fatalf("%d migrations recorded, want at least 3", versions)
	}
	for table, want := range map[string]int{"dvt_transitions": len(engine.Transitions), "dvt_locks WHERE lock_name = 'bootstrap'": 1, "dvt_locks WHERE lock_name = 'migrate'": 1} {
		var n int
		if err := s.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Errorf("%s: %d rows, want %d (a migration ran twice)", table, n, want)
		}
	}
}

// hostile holds every character sequence that could end a literal or a
// statement if values were spliced into SQL.
const hostile = "it's a \"quote\" \\ back\\\\slash $$ dollar $$ ; DROP TABLE dvt_runs; -- comment\n/* block */ line2\r\n\ttab ünïcødé ✓ %s ?"

// TestHostilePayloadRoundTrip: values travelling as hex literals in append
// blocks and multi-statement requests come back exactly, new and duplicate.
func TestHostilePayloadRoundTrip(t *testing.T) {
	srv := sftest.Start(t)
	s := openStore(t, srv.DSN("dvt", "hostile"), snowflake.Options{})
	defer s.Close()
	f := storetest.NewFixture()
	f.Meta.PlanSHA256 = hostile
	f.Meta.ProviderRunRef = hostile
	f.Bootstrap(t, s)
	payload, err := json.Marshal(map[string]any{"rowsAffected": 1, "outputs": map[string]any{"note": hostile, "list": []string{hostile, "'", "\\", "$$", ";", "--"}}})
	if err != nil {
		t.Fatal(err)
	}
	start := f.Event(engine.StepStarted, "model.o'brien;--x", 1)
	done := f.Event(engine.StepCompleted, "model.o'brien;--x", 1)
	done.Payload = payload
	first, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{start, done})
	if err != nil {
		t.Fatal(err)
	}
	// The duplicate answer of the append block carries the hostile values
	// back exactly, from this Store and from one without a cache.
	fresh := openStore(t, srv.DSN("dvt", "hostile"), snowflake.Options{})
	defer fresh.Close()
	for _, st := range []*snowflake.Store{s, fresh} {
		again, err := st.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{start, done})
		if err != nil || len(again.Deduped) != 2 {
			t.Fatalf("re-append: %+v %v", again, err)
		}
		for i, r := range again.Deduped {
			if r.StepID != start.StepID || r.RunSeq != first.Appended[i].RunSeq || r.EventID != first.Appended[i].EventID {
				t.Errorf("duplicate %d reads back as %+v", i, r)
			}
		}
		var got, want any
		json.Unmarshal(again.Deduped[1].Payload, &got)
		json.Unmarshal(payload, &want)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("duplicate payload\n got %s\nwant %s", again.Deduped[1].Payload, payload)
		}
	}
	recs, err := s.ListEvents(ctx, f.Meta.RunID, 2, 0)
	if err != nil || len(recs) != 2 {
		t.Fatalf("events %v %v", recs, err)
	}
	if recs[0].StepID != start.StepID {
		t.Errorf("stepId %q, want %q", recs[0].StepID, start.StepID)
	}
	var got, want any
	json.Unmarshal(recs[1].Payload, &got)
	json.Unmarshal(payload, &want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("payload\n got %s\nwant %s", recs[1].Payload, payload)
	}
	meta, err := s.GetRun(ctx, f.Meta.RunID)
	if err != nil || meta.PlanSHA256 != hostile || meta.ProviderRunRef != hostile {
		t.Errorf("run metadata %q %q (%v)", meta.PlanSHA256, meta.ProviderRunRef, err)
	}
	sig, err := s.SendSignal(ctx, engine.Signal{SignalID: uuid.NewString(), RunID: f.Meta.RunID, Type: engine.SignalPause, Reason: hostile, RequestedBy: hostile})
	if err != nil {
		t.Fatal(err)
	}
	list, err := s.ListSignals(ctx, f.Meta.RunID, 0)
	if err != nil || len(list) != 1 || list[0].Reason != hostile || list[0].RequestedBy != hostile || list[0].Seq != sig.Seq {
		t.Fatalf("signals %+v %v", list, err)
	}
	var n int
	if err := s.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM dvt_runs").Scan(&n); err != nil || n != 1 {
		t.Fatalf("dvt_runs has %d rows (%v)", n, err)
	}
}

// lossyTransport delivers requests but loses the answer to the append
// blocks it is armed for: the server has executed (and committed) the
// block, the client sees a broken connection — or, with cancel set, its
// context is cancelled right after the request went out.
type lossyTransport struct {
	sftest.CountingTransport
	armed  atomic.Int32 // answers still to lose
	cancel func()
	mu     sync.Mutex
	lost   string // the requestId whose answers are lost, driver retries included
}

func (l *lossyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil || !strings.HasSuffix(r.URL.Path, "/query-request") {
		return l.CountingTransport.RoundTrip(r)
	}
	reqID := r.URL.Query().Get("requestId")
	l.mu.Lock()
	lose := reqID != "" && reqID == l.lost
	l.mu.Unlock()
	if !lose && l.armed.Load() == 0 {
		return l.CountingTransport.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if !lose && (!bytes.Contains(body, []byte("EXECUTE IMMEDIATE")) || l.armed.Add(-1) < 0) {
		return l.CountingTransport.RoundTrip(r)
	}
	l.mu.Lock()
	l.lost = reqID
	l.mu.Unlock()
	// Executed on a context of its own, so the server finishes the block.
	r2 := r.Clone(context.WithoutCancel(r.Context()))
	r2.Body = io.NopCloser(bytes.NewReader(body))
	resp, err := l.CountingTransport.RoundTrip(r2)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if l.cancel != nil {
		l.cancel()
		return nil, context.Canceled
	}
	return nil, io.ErrUnexpectedEOF
}

// TestLostAnswerStaysExactlyOnce: an append whose block committed but whose
// answer never arrived — the connection broke, or the caller's context was
// cancelled after the request went out — is retried (by the store, or by a
// resumed run in a new process) and every idempotency key is stored once,
// with the seqs of the first commit.
func TestLostAnswerStaysExactlyOnce(t *testing.T) {
	cases := []struct {
		name   string
		cancel bool // the caller gives up; a new Store (a resumed run) appends again
	}{
		{name: "connection broke after the request: the store retries"},
		{name: "context cancelled after the request: a resumed run appends again", cancel: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := sftest.Start(t)
			dsn := srv.DSN("dvt", "lost")
			tr := &lossyTransport{}
			s := openStore(t, dsn, snowflake.Options{Transporter: tr, RetryBase: time.Millisecond})
			defer s.Close()
			f := storetest.NewFixture()
			f.Bootstrap(t, s)
			batch := []engine.RunEventWrite{f.Event(engine.StepStarted, "m1", 1), f.Event(engine.StepCompleted, "m1", 1), f.Event(engine.StepStarted, "m2", 1)}
			actx, cancel := context.WithCancel(ctx)
			defer cancel()
			if c.cancel {
				tr.cancel = cancel
			}
			tr.armed.Store(1)
			res, err := s.AppendAndEnqueue(actx, f.Meta.RunID, batch)
			if c.cancel {
				if err == nil {
					t.Fatal("append succeeded although its context was cancelled")
				}
				resumed := openStore(t, dsn, snowflake.Options{})
				defer resumed.Close()
				if res, err = resumed.AppendAndEnqueue(ctx, f.Meta.RunID, batch); err != nil {
					t.Fatalf("resumed append: %v", err)
				}
			} else if err != nil {
				t.Fatalf("append after a lost answer: %v", err)
			}
			if tr.armed.Load() > 0 {
				t.Fatal("no answer was lost: the test did not exercise the retry")
			}
			if len(res.Deduped) != len(batch) {
				// The first commit's answer never arrived: the events are
				// found stored by the retry.
				t.Errorf("%d of %d events reported as duplicates, want all", len(res.Deduped), len(batch))
			}
			if len(res.Appended)+len(res.Deduped) != len(batch) {
				t.Errorf("result covers %d of %d events", len(res.Appended)+len(res.Deduped), len(batch))
			}
			evs, err := s.ListEvents(ctx, f.Meta.RunID, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			count := map[string]int{}
			for _, e := range evs {
				count[e.IdempotencyKey]++
			}
			for _, e := range batch {
				if count[e.IdempotencyKey] != 1 {
					t.Errorf("key %s stored %d times", e.IdempotencyKey, count[e.IdempotencyKey])
				}
			}
			for i, e := range evs {
				if e.RunSeq != int64(i+1) {
					t.Errorf("runSeq %d at position %d: seqs have a gap or repeat", e.RunSeq, i)
				}
			}
			if n, err := s.CountOutbox(ctx, f.Meta.RunID); err != nil || n != len(evs) {
				t.Errorf("outbox has %d rows for %d events (%v)", n, len(evs), err)
			}
			// And the store goes on appending from the right seq.
			if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{f.Event(engine.StepCompleted, "m2", 1)}); err != nil {
				t.Fatalf("append after the retry: %v", err)
			}
		})
	}
}

// TestRoundTripsPerAppend: a bootstrap and an append are ONE HTTP round
// trip each — for a batch of new events and for an all-duplicate batch —
// counted by the driver's
// transport, not by reading SQL. Planning from a missing or stale cache
// (another process wrote, or this Store never saw the run) costs one more.
func TestRoundTripsPerAppend(t *testing.T) {
	srv := sftest.Start(t)
	dsn := srv.DSN("dvt", "requests")
	tr := &sftest.CountingTransport{}
	s := openStore(t, dsn, snowflake.Options{Transporter: tr})
	defer s.Close()
	other := openStore(t, dsn, snowflake.Options{})
	defer other.Close()
	f := storetest.NewFixture()
	tr.Reset()
	if _, err := s.BootstrapRun(ctx, f.Meta, []engine.RunEventWrite{f.Event(engine.RunQueued, "", 1)}); err != nil {
		t.Fatal(err)
	}
	if n := tr.Count(); n != 1 {
		t.Errorf("bootstrap: %d HTTP round trips, want 1", n)
	}
	if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{f.Event(engine.RunStarted, "", 1)}); err != nil {
		t.Fatal(err)
	}
	tr.Reset()
	if ids, err := s.ReserveEventIDs(ctx, f.Meta.RunID, map[string]string{"k1": "e1", "k2": "e2"}); err != nil || len(ids) != 2 {
		t.Fatalf("ReserveEventIDs: %v %v", ids, err)
	}
	if n := tr.Count(); n != 1 {
		t.Errorf("ReserveEventIDs: %d HTTP round trips, want 1", n)
	}
	var ten []engine.RunEventWrite
	for i := range 5 {
		ten = append(ten, f.Event(engine.StepStarted, fmt.Sprintf("m%d", i), 1), f.Event(engine.StepCompleted, fmt.Sprintf("m%d", i), 1))
	}
	one := []engine.RunEventWrite{f.Event(engine.StepStarted, "solo", 1)}
	cases := []struct {
		name     string
		before   func(t *testing.T) // runs before counting
		store    *snowflake.Store
		events   []engine.RunEventWrite
		wantCode engine.Code
		trips    int64
		appended int
	}{
		{name: "one new event", store: s, events: one, trips: 1, appended: 1},
		{name: "ten new events over five steps", store: s, events: ten, trips: 1, appended: 10},
		{name: "all duplicates", store: s, events: ten, trips: 1},
		{name: "refused by Layer 2 (confirmed on the stored state)", store: s,
			events: []engine.RunEventWrite{f.Event(engine.StepCompleted, "never-started", 1)}, wantCode: engine.CodeInvalidTransition, trips: 1},
		{name: "another writer appended: stale cache costs one more", store: s,
			before: func(t *testing.T) {
				if _, err := other.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{f.Event(engine.StepStarted, "by-other", 1)}); err != nil {
					t.Fatal(err)
				}
			},
			events: []engine.RunEventWrite{f.Event(engine.StepCompleted, "by-other", 1)}, trips: 2, appended: 1},
		{name: "new events, no cache yet (a new process)", store: openStore(t, dsn, snowflake.Options{Transporter: tr}),
			events: []engine.RunEventWrite{f.Event(engine.StepStarted, "fresh", 1)}, trips: 2, appended: 1},
		{name: "all duplicates, no cache yet", store: openStore(t, dsn, snowflake.Options{Transporter: tr}), events: ten, trips: 1},
	}
	for _, c := range cases {
		if c.store != s {
			defer c.store.Close()
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.before != nil {
				c.before(t)
			}
			tr.Reset()
			res, err := c.store.AppendAndEnqueue(ctx, f.Meta.RunID, c.events)
			if engine.CodeOf(err) != c.wantCode {
				t.Fatalf("error %v, want code %q", err, c.wantCode)
			}
			if n := tr.Count(); n != c.trips {
				t.Errorf("%d HTTP round trips (%d query, %d result, %d other), want %d", n,
					tr.Count(sftest.TripQuery), tr.Count(sftest.TripResult), tr.Count(sftest.TripOther), c.trips)
			}
			if err == nil && (len(res.Appended) != c.appended || len(res.Appended)+len(res.Deduped) != len(c.events)) {
				t.Errorf("%d appended, %d deduped; want %d appended of %d", len(res.Appended), len(res.Deduped), c.appended, len(c.events))
			}
		})
	}
	// Every path above (own cache, STALE answers, a new process, another
	// writer) extended the one hash chain of the run (issue 19).
	rep, err := audit.Verify(ctx, s, audit.VerifyOptions{RunID: f.Meta.RunID})
	if err != nil || rep.Problem != nil || rep.Chained != rep.Events || rep.Events < 15 {
		t.Fatalf("chain after the appends: %+v, %v", rep, err)
	}
}

// BenchmarkAppend measures appends on the test server: query requests and
// HTTP requests per batch, and the median latency of one append.
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{1, 10} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			srv := sftest.Start(b)
			tr := &sftest.CountingTransport{}
			s := openStore(b, srv.DSN("dvt", "bench"), snowflake.Options{Transporter: tr})
			defer s.Close()
			f := storetest.NewFixture()
			f.Bootstrap(b, s)
			events := make([]engine.RunEventWrite, b.N*size)
			for i := range events {
				typ := engine.StepStarted
				if i%2 == 1 {
					typ = engine.StepCompleted
				}
				events[i] = f.Event(typ, fmt.Sprintf("model.m%07d", i/2), 1)
			}
			lat := make([]time.Duration, 0, b.N)
			srv.ResetCounters()
			tr.Reset()
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, events[i*size:(i+1)*size]); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			b.ReportMetric(float64(srv.QueryRequests())/float64(b.N), "queries/op")
			b.ReportMetric(float64(tr.Count())/float64(b.N), "http/op")
			b.ReportMetric(float64(median(lat).Microseconds())/1000, "ms-median")
		})
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestOpenErrorsHideThePassword: a login the server refuses fails with a
// coded error whose text names the DSN without its password.
func TestOpenErrorsHideThePassword(t *testing.T) {
	const right, wrong = "Right-Pa55word-42", "Wr0ng-Pa55word-xyz"
	srv, err := sftest.New(sftest.Options{User: "alice", Password: right})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	good := srv.DSN("dvt", "auth")
	if !strings.Contains(good, right) {
		t.Fatalf("test server DSN %q does not carry the password", good)
	}
	_, err = snowflake.Open(ctx, strings.Replace(good, right, wrong, 1), snowflake.Options{})
	if engine.CodeOf(err) != engine.CodeStoreUnavailable {
		t.Fatalf("open with a wrong password: %v, want STORE_UNAVAILABLE", err)
	}
	if strings.Contains(err.Error(), wrong) || !strings.Contains(err.Error(), "alice:***@") {
		t.Fatalf("error shows the password or not the redacted DSN: %v", err)
	}
	s := openStore(t, good, snowflake.Options{})
	defer s.Close()
	_, err = s.GetRun(ctx, "no-such-run")
	if engine.CodeOf(err) != engine.CodeRunNotFound || strings.Contains(err.Error(), right) {
		t.Fatalf("GetRun of an unknown run: %v", err)
	}
}

// TestTransitionChecksOption: Layer 2 refuses an invalid batch by default;
// with DisableTransitionChecks the event is stored (left to the projector,
// Policy A) and later valid events still follow the run's real state.
func TestTransitionChecksOption(t *testing.T) {
	srv := sftest.Start(t)
	dsn := srv.DSN("dvt", "layer2")
	for _, c := range []struct {
		name    string
		disable bool
		want    engine.Code
		stored  int
	}{
		{"checks on", false, engine.CodeInvalidTransition, 2},
		{"checks off", true, "", 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openStore(t, dsn, snowflake.Options{DisableTransitionChecks: c.disable})
			defer s.Close()
			f := storetest.NewFixture()
			f.Bootstrap(t, s)
			_, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{f.Event(engine.StepCompleted, "never-started", 1)})
			if engine.CodeOf(err) != c.want {
				t.Fatalf("error %v, want code %q", err, c.want)
			}
			recs, err := s.ListEvents(ctx, f.Meta.RunID, 0, 0)
			if err != nil || len(recs) != c.stored {
				t.Fatalf("%d events stored (%v), want %d", len(recs), err, c.stored)
			}
			// The step is still PENDING either way, so starting it is valid.
			if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{f.Event(engine.StepStarted, "never-started", 1)}); err != nil {
				t.Fatalf("a valid StepStarted after the refused event: %v", err)
			}
		})
	}
}

// TestConcurrentBootstrap: several processes bootstrapping one run id at
// the same moment leave one run (Snowflake would not refuse a second
// dvt_runs row by itself): one succeeds, the others get RUN_ALREADY_EXISTS.
func TestConcurrentBootstrap(t *testing.T) {
	srv := sftest.Start(t)
	dsn := srv.DSN("dvt", "bootstrap_race")
	const procs = 8
	stores := make([]*snowflake.Store, procs)
	for i := range stores {
		stores[i] = openStore(t, dsn, snowflake.Options{})
		defer stores[i].Close()
	}
	f := storetest.NewFixture()
	first := []engine.RunEventWrite{f.Event(engine.RunQueued, "", 1)}
	var wg sync.WaitGroup
	codes := make(chan engine.Code, procs)
	start := make(chan struct{})
	for _, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := s.BootstrapRun(ctx, f.Meta, first)
			if err != nil && engine.CodeOf(err) != engine.CodeRunAlreadyExists {
				t.Errorf("bootstrap: %v", err)
			}
			codes <- engine.CodeOf(err)
		}()
	}
	close(start)
	wg.Wait()
	close(codes)
	ok := 0
	for c := range codes {
		if c == "" {
			ok++
		}
	}
	if ok != 1 {
		t.Fatalf("%d bootstraps succeeded, want 1", ok)
	}
	for table, want := range map[string]int{"dvt_runs": 1, "dvt_run_seq": 1, "dvt_run_events": 1, "dvt_outbox": 1} {
		var n int
		if err := stores[0].DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table+" WHERE run_id = ?", f.Meta.RunID).Scan(&n); err != nil || n != want {
			t.Errorf("%s: %d rows (%v), want %d", table, n, err, want)
		}
	}
}

// TestTamperEvidence runs the tamper-evidence suite on the test server.
// Snowflake has no triggers: nothing stops the tables' owner, so the
// guards case skips (dvtrun audit doctor checks the grants instead).
func TestTamperEvidence(t *testing.T) {
	srv := sftest.Start(t)
	storetest.RunAudit(t, storetest.AuditBackend{
		Fresh: func(t *testing.T) storetest.AuditStore {
			s := openStore(t, srv.DSN("dvt", fmt.Sprintf("audit_%d", freshSchemas.Add(1))), snowflake.Options{})
			t.Cleanup(func() { s.Close() })
			return s
		},
		Tamper: func(t *testing.T, s storetest.AuditStore, stmts ...string) {
			for _, q := range stmts {
				if _, err := s.(*snowflake.Store).DB().ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
		},
		JSON: func(quoted string) string { return "PARSE_JSON(" + quoted + ")" },
		// The payload is in the VARIANT and in payload_text (the v2 event
		// bytes hold its digest, not the payload).
		NullPayloads: func(run string) string {
			return "UPDATE dvt_run_events SET payload = NULL, payload_text = NULL WHERE run_id = " + run
		},
		Rows: func(t *testing.T, s storetest.AuditStore, q string) []string {
			rows, err := s.(*snowflake.Store).DB().QueryContext(ctx, q)
			if err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			defer rows.Close()
			var out []string
			for rows.Next() {
				var v string
				if err := rows.Scan(&v); err != nil {
					t.Fatal(err)
				}
				out = append(out, v)
			}
			return out
		},
	})
}
