package delivery_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/delivery"
	"github.com/dvtrun/dvtrun/engine/service"
	"github.com/dvtrun/dvtrun/engine/service/servicetest"
	"github.com/dvtrun/dvtrun/engine/wake"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/storetest"
)

var (
	ctx     = context.Background()
	timeNow = time.Now
)

func openStore(t testing.TB) *sqlite.Store {
	t.Helper()
	return servicetest.OpenSQLite(t, filepath.Join(t.TempDir(), "state.db"))
}

// seedRuns writes runs runs of 2+2*steps events each and returns their logs.
func seedRuns(t testing.TB, s *sqlite.Store, runs, steps int) map[string][]engine.RunEventRecord {
	t.Helper()
	out := map[string][]engine.RunEventRecord{}
	for range runs {
		recs := storetest.SeedRun(t, s, steps)
		out[recs[0].RunID] = recs
	}
	return out
}

// receiver is a webhook endpoint that records every request, verifies its
// signature independently, and answers with fail(request number, event).
type receiver struct {
	t      testing.TB
	secret string
	mu     sync.Mutex
	fail   func(n int, e engine.RunEventRecord) bool
	all    []engine.RunEventRecord // every request, in arrival order
	ok     []engine.RunEventRecord // the requests answered 2xx
	badSig []string
	ids    map[string]map[string]bool // eventId → webhook-ids seen
}

func newReceiver(t testing.TB, secret string, fail func(int, engine.RunEventRecord) bool) (*receiver, *httptest.Server) {
	r := &receiver{t: t, secret: secret, fail: fail, ids: map[string]map[string]bool{}}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var e engine.RunEventRecord
	if err := json.Unmarshal(body, &e); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if err := verifySignature(rc.secret, r.Header, body, time.Now()); err != nil {
		rc.badSig = append(rc.badSig, e.EventID+": "+err.Error())
	}
	if rc.ids[e.EventID] == nil {
		rc.ids[e.EventID] = map[string]bool{}
	}
	rc.ids[e.EventID][r.Header.Get("webhook-id")] = true
	rc.all = append(rc.all, e)
	if rc.fail != nil && rc.fail(len(rc.all), e) {
		http.Error(w, "try again", http.StatusServiceUnavailable)
		return
	}
	rc.ok = append(rc.ok, e)
}

func (rc *receiver) snapshot() (all, ok []engine.RunEventRecord) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]engine.RunEventRecord(nil), rc.all...), append([]engine.RunEventRecord(nil), rc.ok...)
}

func newService(t testing.TB, st delivery.Store, clock engine.Clock, targets ...delivery.Target) *delivery.Service {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	svc, err := delivery.New(delivery.Options{
		Store: st, Targets: targets, Clock: clock, IDs: engine.IDFunc(uuid.NewString), Rand: rng.Float64,
		BatchSize: 10, PollInterval: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func webhook(t testing.TB, url string, clock engine.Clock) delivery.Sink {
	t.Helper()
	wh, err := delivery.NewWebhook(delivery.WebhookOptions{URL: url, Secrets: secretA + " " + secretB, Clock: clock, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return wh
}

var fast = delivery.Policy{MaxAttempts: 20, Backoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}

func count(t testing.TB, st delivery.Store, sink string, state delivery.State) int {
	t.Helper()
	ds, err := st.ListDeliveries(ctx, delivery.Filter{Sink: sink, State: state, Limit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return len(ds)
}

// checkOrder: per run, the first arrival of each event and the successful
// deliveries are in runSeq order, and every event was delivered exactly once.
func checkOrder(t *testing.T, runs map[string][]engine.RunEventRecord, all, ok []engine.RunEventRecord) {
	t.Helper()
	first := map[string][]int64{}
	seen := map[string]bool{}
	for _, e := range all {
		if !seen[e.EventID] {
			seen[e.EventID] = true
			first[e.RunID] = append(first[e.RunID], e.RunSeq)
		}
	}
	delivered := map[string][]int64{}
	for _, e := range ok {
		delivered[e.RunID] = append(delivered[e.RunID], e.RunSeq)
	}
	for runID, recs := range runs {
		for name, got := range map[string][]int64{"first arrivals": first[runID], "deliveries": delivered[runID]} {
			if len(got) != len(recs) {
				t.Fatalf("run %s: %s %v, want %d events", runID, name, got, len(recs))
			}
			for i, seq := range got {
				if seq != recs[i].RunSeq {
					t.Fatalf("run %s: %s in order %v, want runSeq 1..%d", runID, name, got, len(recs))
				}
			}
		}
	}
}

// A receiver failing the first K requests: everything arrives, first
// deliveries in runSeq order per run, every signature verifies, the
// webhook-id is the eventId on every attempt.
func TestWebhookDeliveryWithFailingReceiver(t *testing.T) {
	const k = 7
	st := openStore(t)
	runs := seedRuns(t, st, 4, 3) // 4 runs × 8 events
	rc, srv := newReceiver(t, secretA, func(n int, _ engine.RunEventRecord) bool { return n <= k })
	clock := engine.ClockFunc(time.Now)
	svc := newService(t, st, clock, delivery.Target{Name: "hooks", Sink: webhook(t, srv.URL, clock), Policy: fast})
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(ctx); !errors.Is(err, service.ErrStarted) {
		t.Fatalf("second Start: %v", err)
	}
	servicetest.WaitFor(t, "32 deliveries", func() bool { return count(t, st, "hooks", delivery.StateDelivered) == 32 })
	svc.Stop()
	svc.Stop() // a double stop is harmless
	if tot := svc.Totals(); tot.Delivered != 32 || tot.Failed != k || tot.Dead != 0 {
		t.Fatalf("totals %+v, want 32 delivered, %d failed, none dead", tot, k)
	}
	all, ok := rc.snapshot()
	if len(all) != 32+k || len(ok) != 32 {
		t.Fatalf("%d requests, %d answered 2xx; want %d and 32", len(all), len(ok), 32+k)
	}
	checkOrder(t, runs, all, ok)
	if len(rc.badSig) > 0 {
		t.Fatalf("signatures that do not verify: %v", rc.badSig)
	}
	for id, whIDs := range rc.ids {
		if len(whIDs) != 1 || !whIDs[id] {
			t.Fatalf("event %s arrived with webhook-ids %v", id, whIDs)
		}
	}
	failed, err := st.ListDeliveries(ctx, delivery.Filter{Sink: "hooks", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	retried := 0
	for _, d := range failed {
		if d.Attempts > 1 {
			retried++
		}
	}
	if retried == 0 {
		t.Fatal("no delivery records a retry")
	}
}

// Beyond MaxAttempts failures an event is dead-lettered with one
// EVENT_BUS_DELIVERY_FAILED alert and holds back its run (only its run);
// RetryDead replays it and the run's later events follow in order.
func TestDeadLetterAlertAndRetry(t *testing.T) {
	st := openStore(t)
	runs := seedRuns(t, st, 3, 2) // 3 runs × 6 events
	var poison engine.RunEventRecord
	for _, recs := range runs {
		poison = recs[2]
		break
	}
	var mu sync.Mutex
	broken := true
	rc, srv := newReceiver(t, secretA, func(_ int, e engine.RunEventRecord) bool {
		mu.Lock()
		defer mu.Unlock()
		return broken && e.EventID == poison.EventID
	})
	clock := engine.ClockFunc(time.Now)
	policy := fast
	policy.MaxAttempts = 3
	svc := newService(t, st, clock, delivery.Target{Name: "hooks", Sink: webhook(t, srv.URL, clock), Policy: policy})
	servicetest.WaitFor(t, "the dead letter", func() bool {
		if _, err := svc.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		return count(t, st, "hooks", delivery.StateDead) == 1
	})
	r, err := svc.Drain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.DeadTotal != 1 || r.Pending != 3 || r.Delivered != 0 {
		t.Fatalf("drain report %+v, want 1 dead and the poisoned run's 3 later events pending", r)
	}
	dead, err := st.ListDeliveries(ctx, delivery.Filter{State: delivery.StateDead})
	if err != nil || len(dead) != 1 || dead[0].EventID != poison.EventID || dead[0].Attempts != 3 || dead[0].LastError == "" {
		t.Fatalf("dead letters %+v %v", dead, err)
	}
	alerts, err := st.ListAlerts(ctx, poison.RunID)
	if err != nil || len(alerts) != 1 || alerts[0].Code != engine.CodeEventBusDeliveryFailed || alerts[0].Severity != engine.SeverityP1 ||
		alerts[0].Key != "EVENT_BUS_DELIVERY_FAILED:hooks:"+poison.EventID {
		t.Fatalf("alerts %+v %v", alerts, err)
	}
	all, ok := rc.snapshot()
	for _, e := range ok {
		if e.RunID == poison.RunID && e.RunSeq > poison.RunSeq {
			t.Fatalf("runSeq %d delivered past the dead letter at %d", e.RunSeq, poison.RunSeq)
		}
	}
	tries := 0
	for _, e := range all {
		if e.EventID == poison.EventID {
			tries++
		}
	}
	if tries != 3 {
		t.Fatalf("the poisoned event was sent %d times before the dead letter, want MaxAttempts = 3", tries)
	}
	if len(ok) != 18-4 {
		t.Fatalf("%d delivered before the retry, want 14 (every other run in full)", len(ok))
	}
	mu.Lock()
	broken = false
	mu.Unlock()
	if n, err := st.RetryDead(ctx, "hooks", poison.EventID); n != 1 || err != nil {
		t.Fatalf("RetryDead = %d, %v", n, err)
	}
	r, err = svc.Drain(ctx)
	if err != nil || r.Delivered != 4 || r.Pending != 0 || r.DeadTotal != 0 {
		t.Fatalf("drain after retry: %+v %v", r, err)
	}
	all, ok = rc.snapshot()
	checkOrder(t, runs, all, ok)
	if n := count(t, st, "hooks", delivery.StateDelivered); n != 18 {
		t.Fatalf("%d of 18 delivered", n)
	}
	if alerts, _ := st.ListAlerts(ctx, poison.RunID); len(alerts) != 1 {
		t.Fatalf("%d alerts, want the one", len(alerts))
	}
}

// An event older than MaxAge is dead-lettered at its first failure.
func TestMaxAgeDeadLetters(t *testing.T) {
	st := openStore(t)
	runs := seedRuns(t, st, 1, 0)
	_, srv := newReceiver(t, secretA, func(int, engine.RunEventRecord) bool { return true })
	later := engine.ClockFunc(func() time.Time { return time.Now().Add(48 * time.Hour) })
	svc := newService(t, st, later, delivery.Target{Name: "hooks", Sink: webhook(t, srv.URL, engine.ClockFunc(time.Now)), Policy: delivery.Policy{MaxAge: time.Hour}})
	r, err := svc.Drain(ctx)
	if err != nil || r.Dead != 1 || r.Failed != 1 {
		t.Fatalf("drain %+v %v, want one failure, dead", r, err)
	}
	for runID := range runs {
		alerts, _ := st.ListAlerts(ctx, runID)
		if len(alerts) != 1 || !contains(alerts[0].Message, "old (max age 1h0m0s)") {
			t.Fatalf("alerts %+v", alerts)
		}
	}
}

// Two sinks are independent: a failing webhook does not hold back the file.
func TestSinksAreIndependent(t *testing.T) {
	st := openStore(t)
	seedRuns(t, st, 2, 1)
	_, srv := newReceiver(t, secretA, func(int, engine.RunEventRecord) bool { return true })
	j, err := delivery.OpenJSONL(filepath.Join(t.TempDir(), "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	clock := engine.ClockFunc(time.Now)
	svc := newService(t, st, clock,
		delivery.Target{Name: "hooks", Sink: webhook(t, srv.URL, clock), Policy: delivery.Policy{Backoff: time.Hour}},
		delivery.Target{Name: "archive", Sink: j})
	r, err := svc.Drain(ctx)
	if err != nil || r.Delivered != 8 || r.Failed != 2 || r.Pending != 8 {
		t.Fatalf("drain %+v %v: want the file's 8 delivered, the webhook's 2 heads failed and 8 pending", r, err)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestDeliveryWokenBeforeItsPoll: with wake-ups new events are delivered
// when a run's log grows, long before the poll interval (an hour here).
func TestDeliveryWokenBeforeItsPoll(t *testing.T) {
	st := openStore(t)
	_, srv := newReceiver(t, secretA, nil)
	clock := engine.ClockFunc(time.Now)
	hub := &wake.Hub{}
	svc, err := delivery.New(delivery.Options{
		Store: st, Targets: []delivery.Target{{Name: "hooks", Sink: webhook(t, srv.URL, clock), Policy: fast}},
		Clock: clock, IDs: engine.IDFunc(uuid.NewString), Rand: rand.New(rand.NewPCG(1, 2)).Float64,
		PollInterval: time.Hour, Wakeups: hub,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	time.Sleep(50 * time.Millisecond) // its first pass finds nothing and waits
	runs := seedRuns(t, st, 1, 1)     // 1 run × 4 events
	var runID string
	for id := range runs {
		runID = id
	}
	servicetest.WaitFor(t, "4 deliveries after a wake-up", func() bool {
		hub.Publish(wake.Events, runID) // the store's NOTIFY, until the loop subscribed
		return count(t, st, "hooks", delivery.StateDelivered) == 4
	})
}
