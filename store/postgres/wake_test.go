package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/queue"
	"github.com/dvtrun/dvtrun/engine/wake"
	"github.com/dvtrun/dvtrun/engine/worker"
	"github.com/dvtrun/dvtrun/store/postgres"
	"github.com/dvtrun/dvtrun/store/postgres/pgtest"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// wakeWithin is how long a test waits for a notification the server sends
// at commit; a local server delivers it in milliseconds.
const wakeWithin = 5 * time.Second

// newRequest is a fresh PENDING request, number i.
func newRequest(i int) queue.Request {
	r := queue.Request{RequestID: uuid.NewString(), TenantID: "acme", ProjectID: "shop", EnvironmentID: "dev",
		PlanID: "shop", PlanVersion: "1", RunRequestID: fmt.Sprint("wake-", i, "-", uuid.NewString()[:8]), PlanPath: "plan.yaml", PlanSHA256: "ab12", State: queue.StatePending}
	r.Key = queue.Key(r.TenantID, r.ProjectID, r.EnvironmentID, r.PlanID, r.PlanVersion, r.RunRequestID)
	return r
}

// listening opens a store, subscribes to topics and waits until its
// LISTEN connection is in place.
func listening(t testing.TB, dsn string, topics ...wake.Topic) (*postgres.Store, []<-chan string) {
	t.Helper()
	s, err := postgres.Open(context.Background(), dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var chans []<-chan string
	for _, tp := range topics {
		ch, cancel := s.Wakeups().Subscribe(tp)
		t.Cleanup(cancel)
		chans = append(chans, ch)
	}
	select {
	case <-s.Listening():
	case <-time.After(wakeWithin):
		t.Fatalf("the wake-up connection did not LISTEN within %s", wakeWithin)
	}
	return s, chans
}

// next returns the next id on ch, failing after wakeWithin.
func next(t *testing.T, ch <-chan string, what string) string {
	t.Helper()
	select {
	case id := <-ch:
		return id
	case <-time.After(wakeWithin):
		t.Fatalf("no wake-up for %s within %s", what, wakeWithin)
		return ""
	}
}

// quiet fails if ch receives anything within d.
func quiet(t *testing.T, ch <-chan string, d time.Duration, what string) {
	t.Helper()
	select {
	case id := <-ch:
		t.Fatalf("%s woke the subscribers (id %q)", what, id)
	case <-time.After(d):
	}
}

// TestWakeups: another process's enqueue wakes queue subscribers with the
// request id, its append wakes event subscribers once per transaction with
// the run id, a claim wakes nobody, and handing the request back wakes the
// queue again.
func TestWakeups(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	_, chans := listening(t, dsn, wake.Queue, wake.Events)
	queueCh, eventsCh := chans[0], chans[1]
	writer, err := postgres.Open(ctx, dsn, postgres.Options{PollOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	if writer.Wakeups() != nil {
		t.Fatal("a poll-only store has a wake-up source")
	}

	r := newRequest(0)
	if _, _, err := writer.EnqueueRequest(ctx, r, nil); err != nil {
		t.Fatal(err)
	}
	if got := next(t, queueCh, "an enqueue"); got != r.RequestID {
		t.Fatalf("enqueue woke with %q, want the request id %s", got, r.RequestID)
	}

	f := storetest.NewFixture()
	f.Bootstrap(t, writer) // two transactions: RunQueued, then RunStarted
	for i := range 2 {
		if got := next(t, eventsCh, fmt.Sprint("append ", i+1)); got != f.Meta.RunID {
			t.Fatalf("append woke with %q, want the run id %s", got, f.Meta.RunID)
		}
	}
	batch := []engine.RunEventWrite{f.Event(engine.StepStarted, "a", 1), f.Event(engine.StepCompleted, "a", 1),
		f.Event(engine.StepStarted, "b", 1), f.Event(engine.StepCompleted, "b", 1)}
	if _, err := writer.AppendAndEnqueue(ctx, f.Meta.RunID, batch); err != nil {
		t.Fatal(err)
	}
	if got := next(t, eventsCh, "a 4-event append"); got != f.Meta.RunID {
		t.Fatalf("append woke with %q", got)
	}
	quiet(t, eventsCh, 200*time.Millisecond, "a second notification of one append transaction")

	if err := writer.Heartbeat(ctx, "w1", time.Minute); err != nil {
		t.Fatal(err)
	}
	got, ok, err := writer.ClaimRequest(ctx, "w1", time.Minute, queue.ClaimLimits{})
	if err != nil || !ok || got.RequestID != r.RequestID {
		t.Fatalf("claim: %+v %v %v", got, ok, err)
	}
	quiet(t, queueCh, 200*time.Millisecond, "a claim")
	if err := writer.ReleaseRequest(ctx, r.RequestID, "w1"); err != nil {
		t.Fatal(err)
	}
	if got := next(t, queueCh, "a request handed back"); got != r.RequestID {
		t.Fatalf("release woke with %q", got)
	}
}

// TestWakeupsPollOnlyDSN: dvtrun_wakeups=poll in the DSN opens no LISTEN
// connection (and is not sent to the server as a setting); another value
// is refused with INVALID_ARGUMENT.
func TestWakeupsPollOnlyDSN(t *testing.T) {
	ctx := context.Background()
	url, kv := pgtest.URL(t), pgtest.DSN(t)
	for _, tc := range []struct {
		name, dsn string
		wantWake  bool
		wantCode  engine.Code
	}{
		{"url", url, true, ""},
		{"url notify", url + "&dvtrun_wakeups=notify", true, ""},
		{"url poll", url + "&dvtrun_wakeups=poll", false, ""},
		{"key=value poll", kv + " dvtrun_wakeups=poll", false, ""},
		{"url sometimes", url + "&dvtrun_wakeups=sometimes", false, engine.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := postgres.Open(ctx, tc.dsn, postgres.Options{})
			if tc.wantCode != "" {
				if engine.CodeOf(err) != tc.wantCode {
					t.Fatalf("Open: %v, want %s", err, tc.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := s.Wakeups() != nil; got != tc.wantWake {
				t.Fatalf("wake-up source: %v, want %v", got, tc.wantWake)
			}
		})
	}
}

// TestWakeupsReconnect: when the server ends the LISTEN connection, the
// store reconnects, wakes every subscriber once (notifications sent
// meanwhile are lost) and delivers the next ones.
func TestWakeupsReconnect(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s, chans := listening(t, dsn, wake.Queue)
	// The listener's last statement is its LISTEN; only it runs one.
	res, err := s.DB().ExecContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN dvt_%' AND pid <> pg_backend_pid()`)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("terminated %d listening sessions, want 1", n)
	}
	if got := next(t, chans[0], "the reconnection"); got != "" {
		t.Fatalf("reconnection woke with %q, want the empty id (anything may have changed)", got)
	}
	r := newRequest(1)
	if _, _, err := s.EnqueueRequest(ctx, r, nil); err != nil {
		t.Fatal(err)
	}
	if got := next(t, chans[0], "an enqueue after the reconnection"); got != r.RequestID {
		t.Fatalf("woke with %q, want %s", got, r.RequestID)
	}
}

// claimRecorder is the worker's executor in the latency benchmark: it
// notes when each request reached a worker and finishes it at once.
type claimRecorder struct {
	mu  sync.Mutex
	at  map[string]time.Time
	got chan string
}

func (c *claimRecorder) Run(_ context.Context, r queue.Request, _ string) (engine.RunStatus, error) {
	c.mu.Lock()
	c.at[r.RequestID] = time.Now()
	c.mu.Unlock()
	c.got <- r.RequestID
	return engine.StatusCompleted, nil
}

// BenchmarkWakeupLatency measures, with two real workers (engine/worker)
// on one database, the time from an enqueue to a worker's claim: woken by
// NOTIFY, and polling every 200ms (the fallback, and the poll-only mode).
// It reports the median and the 95th percentile; the pauses between
// requests are outside the timer only in spirit (ns/op includes them).
func BenchmarkWakeupLatency(b *testing.B) {
	const poll = 200 * time.Millisecond
	for _, mode := range []string{"notify", "poll-200ms"} {
		b.Run(mode, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			dsn := pgtest.DSN(b)
			enq, err := postgres.Open(ctx, dsn, postgres.Options{PollOnly: true})
			if err != nil {
				b.Fatal(err)
			}
			defer enq.Close()
			rec := &claimRecorder{at: map[string]time.Time{}, got: make(chan string, 1)}
			for i := range 2 {
				s, err := postgres.Open(ctx, dsn, postgres.Options{PollOnly: mode != "notify"})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				w := &worker.Worker{Store: s, Exec: rec, ID: fmt.Sprint(mode, "-", i), Poll: poll,
					Wakeups: s.Wakeups(), Clock: engine.ClockFunc(time.Now), IDs: engine.IDFunc(uuid.NewString), Sleep: engine.Sleep}
				if err := w.Start(ctx); err != nil {
					b.Fatal(err)
				}
				defer w.Stop()
				if s.Wakeups() != nil {
					select {
					case <-s.Listening():
					case <-time.After(wakeWithin):
						b.Fatalf("no LISTEN within %s", wakeWithin)
					}
				}
			}
			var lat []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// Enqueue while both workers sit in their pause, at a
				// different phase of the poll each time (a request that
				// arrives while a worker is claiming shows no latency).
				time.Sleep(poll + time.Duration(i*37%200)*time.Millisecond)
				r := newRequest(i)
				enqueued := time.Now() // before: the enqueue's own time counts
				if _, _, err := enq.EnqueueRequest(ctx, r, nil); err != nil {
					b.Fatal(err)
				}
				select {
				case id := <-rec.got:
					rec.mu.Lock()
					lat = append(lat, rec.at[id].Sub(enqueued))
					rec.mu.Unlock()
				case <-time.After(wakeWithin):
					b.Fatalf("request %d not claimed within %s", i, wakeWithin)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "median-ms")
			b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "p95-ms")
		})
	}
}
