package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/queue"
	"github.com/dvtrun/dvtrun/engine/schedule"
)

// QueueStore is the run queue and schedule cursors a backend implements.
type QueueStore interface {
	queue.Store
	schedule.CursorStore
	Close() error
}

var queueCases = []struct {
	name string
	fn   func(*testing.T, Backend)
}{
	{"QueueEnqueueIsIdempotentOnTheKey", testEnqueueIdempotent},
	{"QueueRequestKeepsItsRunShape", testRequestShape},
	{"QueueAdmitRefusalWritesNothing", testAdmitRefuses},
	{"QueueClaimOrderPriorityThenFIFO", testQueueClaimOrder},
	{"QueueNotBeforeByDatabaseClock", testNotBefore},
	{"QueueEightClaimersHundredRequests", testClaimRace},
	{"QueueClaimHonoursLimits", testClaimLimits},
	{"QueueTakeoverAfterHeartbeatExpiry", testTakeover},
	{"QueueWorkersListTheirHeartbeats", testListWorkers},
	{"QueueReleaseAndCancel", testReleaseCancel},
	{"QueueSerialScheduleRequests", testSerial},
	{"ScheduleCursorAdvancesOncePerVersion", testCursor},
}

// queueOpener opens handles on a fresh database for one queue case.
func queueOpener(t *testing.T, b Backend) func() QueueStore {
	t.Helper()
	if b.Fresh == nil {
		t.Fatal("storetest.Backend.Fresh is nil: the run queue cases need a fresh database each")
	}
	open := b.Fresh(t)
	return func() QueueStore {
		s := open(t)
		qs, ok := s.(QueueStore)
		if !ok {
			t.Fatalf("%T does not implement storetest.QueueStore", s)
		}
		t.Cleanup(func() { s.Close() })
		return qs
	}
}

// request returns a valid new request of plan.
func request(plan, runRequestID string, priority int) queue.Request {
	r := queue.Request{
		RequestID: uuid.NewString(), TenantID: "acme", ProjectID: "shop", EnvironmentID: "dev",
		PlanID: plan, PlanVersion: "1", RunRequestID: runRequestID, PlanPath: "plans/" + plan + "/plan.yaml",
		PlanSHA256: "ab12", Priority: priority, State: queue.StatePending,
	}
	r.Key = queue.Key(r.TenantID, r.ProjectID, r.EnvironmentID, r.PlanID, r.PlanVersion, r.RunRequestID)
	return r
}

func enqueue(t *testing.T, s queue.Store, r queue.Request) queue.Request {
	t.Helper()
	got, created, err := s.EnqueueRequest(ctx, r, nil)
	if err != nil || !created {
		t.Fatalf("enqueue %s: created=%v %v", r.RunRequestID, created, err)
	}
	return got
}

func claimRequest(t *testing.T, s queue.Store, owner string, l queue.ClaimLimits) (queue.Request, bool) {
	t.Helper()
	r, ok, err := s.ClaimRequest(ctx, owner, time.Minute, l)
	if err != nil {
		t.Fatalf("claim by %s: %v", owner, err)
	}
	return r, ok
}

func testEnqueueIdempotent(t *testing.T, b Backend) {
	s := queueOpener(t, b)()
	first := enqueue(t, s, request("shop", "nightly-1", 0))
	if first.State != queue.StatePending || first.Version != 1 || first.EnqueuedAt.IsZero() || first.NotBefore.IsZero() {
		t.Fatalf("stored request: %+v", first)
	}
	again := request("shop", "nightly-1", 5) // same key, new request id
	got, created, err := s.EnqueueRequest(ctx, again, nil)
	if err != nil || created || got.RequestID != first.RequestID || got.Priority != 0 {
		t.Fatalf("second enqueue: created=%v %+v %v", created, got, err)
	}
	other := request("shop", "nightly-2", 0)
	if got := enqueue(t, s, other); got.RequestID == first.RequestID || got.Seq <= first.Seq {
		t.Fatalf("a new runRequestId is a new request: %+v", got)
	}
	list, err := s.ListRequests(ctx, false)
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %d %v", len(list), err)
	}
	if _, err := s.GetRequest(ctx, "no-such-request"); !errors.Is(err, &engine.Error{Code: engine.CodeRunNotFound}) {
		t.Fatalf("GetRequest of an unknown id: %v", err)
	}
}

func testAdmitRefuses(t *testing.T, b Backend) {
	s := queueOpener(t, b)()
	enqueue(t, s, request("shop", "a", 0))
	var seen queue.Stats
	refuse := func(r queue.Request, st queue.Stats) (queue.Request, error) {
		seen = st
		return r, engine.Errorf(engine.CodeRunQueueFull, "full")
	}
	_, created, err := s.EnqueueRequest(ctx, request("shop", "b", 0), refuse)
	wantCode(t, err, engine.CodeRunQueueFull)
	if created || seen.Pending != 1 || seen.Active != 0 || seen.Now.IsZero() {
		t.Fatalf("created=%v stats=%+v", created, seen)
	}
	if list, _ := s.ListRequests(ctx, true); len(list) != 1 {
		t.Fatalf("a refused request was written: %d requests", len(list))
	}
	// A duplicate is answered before admission: it is not refused.
	if _, created, err := s.EnqueueRequest(ctx, request("shop", "a", 0), refuse); err != nil || created {
		t.Fatalf("duplicate under a refusing admit: created=%v %v", created, err)
	}
}

func testQueueClaimOrder(t *testing.T, b Backend) {
	s := queueOpener(t, b)()
	for i, p := range []int{0, 5, 0, 9, 5} {
		enqueue(t, s, request("shop", fmt.Sprint("r", i), p))
	}
	var got []string
	for {
		r, ok := claimRequest(t, s, "w1", queue.ClaimLimits{})
		if !ok {
			break
		}
		if r.State != queue.StateClaimed || r.Owner != "w1" || r.Attempts != 1 || r.ClaimedAt.IsZero() {
			t.Fatalf("claimed request: %+v", r)
		}
		got = append(got, r.RunRequestID)
	}
	want := []string{"r3", "r1", "r4", "r0", "r2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claim order %v, want %v (priority, then FIFO)", got, want)
	}
}

func testNotBefore(t *testing.T, b Backend) {
	s := queueOpener(t, b)()
	var dbNow time.Time
	r := request("shop", "later", 0)
	stored, _, err := s.EnqueueRequest(ctx, r, func(r queue.Request, st queue.Stats) (queue.Request, error) {
		dbNow = st.Now
		r.NotBefore = st.Now.Add(1500 * time.Millisecond)
		return r, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := claimRequest(t, s, "w1", queue.ClaimLimits{}); ok {
		t.Fatal("claimed before not_before")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, ok := claimRequest(t, s, "w1", queue.ClaimLimits{})
		if ok {
			if got.ClaimedAt.Before(stored.NotBefore) {
				t.Fatalf("claimed at %s, before not_before %s (db now at enqueue %s)", got.ClaimedAt, stored.NotBefore, dbNow)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("never claimed after not_before")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// testClaimRace: 8 claimers on their own handles race for 100 requests;
// each request is claimed exactly once.
func testClaimRace(t *testing.T, b Backend) {
	opener := queueOpener(t, b)
	s := opener()
	const n, claimers = 100, 8
	for i := range n {
		enqueue(t, s, request("shop", fmt.Sprint("race-", i), i%3))
	}
	var mu sync.Mutex
	claimedBy := map[string][]string{}
	var wg sync.WaitGroup
	errs := make(chan error, claimers)
	handles := make([]QueueStore, claimers)
	for i := range handles {
		handles[i] = opener()
	}
	start := make(chan struct{})
	for i := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			owner := fmt.Sprint("claimer-", i)
			for {
				r, ok, err := handles[i].ClaimRequest(ctx, owner, time.Minute, queue.ClaimLimits{})
				if err != nil {
					errs <- fmt.Errorf("%s: %w", owner, err)
					return
				}
				if !ok {
					return
				}
				mu.Lock()
				claimedBy[r.RequestID] = append(claimedBy[r.RequestID], owner)
				mu.Unlock()
				time.Sleep(time.Millisecond) // let the others in between claims
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(claimedBy) != n {
		t.Fatalf("%d requests claimed, want %d", len(claimedBy), n)
	}
	owners := map[string]int{}
	for id, by := range claimedBy {
		if len(by) != 1 {
			t.Fatalf("request %s claimed %d times: %v", id, len(by), by)
		}
		owners[by[0]]++
	}
	list, _ := s.ListRequests(ctx, true)
	for _, r := range list {
		if r.State != queue.StateClaimed || r.Attempts != 1 || claimedBy[r.RequestID][0] != r.Owner {
			t.Fatalf("stored %+v, claimed by %v", r, claimedBy[r.RequestID])
		}
	}
	t.Logf("claims per claimer: %v", owners)
}

func testClaimLimits(t *testing.T, b Backend) {
	s := queueOpener(t, b)()
	for i := range 3 {
		enqueue(t, s, request("shop", fmt.Sprint("s", i), 0))
	}
	enqueue(t, s, request("bakery", "b0", 0))
	l := queue.ClaimLimits{MaxConcurrentRuns: 3, PerPlan: map[string]int{"shop": 1}}
	first, ok := claimRequest(t, s, "w1", l)
	if !ok || first.PlanID != "shop" {
		t.Fatalf("first claim: %+v %v", first, ok)
	}
	second, ok := claimRequest(t, s, "w1", l)
	if !ok || second.PlanID != "bakery" {
		t.Fatalf("the per-plan limit should pass over shop to bakery: %+v %v", second, ok)
	}
	if r, ok := claimRequest(t, s, "w2", l); ok {
		t.Fatalf("claimed %+v past shop's limit of 1", r)
	}
	if err := s.FinishRequest(ctx, first.RequestID, "w1", "COMPLETED"); err != nil {
		t.Fatal(err)
	}
	if r, ok := claimRequest(t, s, "w2", l); !ok || r.PlanID != "shop" {
		t.Fatalf("after shop's run finished: %+v %v", r, ok)
	}
	l.MaxConcurrentRuns = 2
	if r, ok := claimRequest(t, s, "w2", queue.ClaimLimits{MaxConcurrentRuns: 2}); ok {
		t.Fatalf("claimed %+v with 2 of 2 runs active", r)
	}
	done, _ := s.GetRequest(ctx, first.RequestID)
	if done.State != queue.StateDone || done.Outcome != "COMPLETED" || done.FinishedAt.IsZero() {
		t.Fatalf("finished request: %+v", done)
	}
}

func testTakeover(t *testing.T, b Backend) {
	s := queueOpener(t, b)()
	enqueue(t, s, request("shop", "t", 0))
	r, ok, err := s.ClaimRequest(ctx, "dying", time.Second, queue.ClaimLimits{})
	if err != nil || !ok || r.TakenOver {
		t.Fatalf("claim of a PENDING request: %v %v, taken over %v", ok, err, r.TakenOver)
	}
	if err := s.SetRequestRun(ctx, r.RequestID, "dying", "run-1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := claimRequest(t, s, "heir", queue.ClaimLimits{}); ok {
		t.Fatal("taken over while the owner's heartbeat is live")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, ok := claimRequest(t, s, "heir", queue.ClaimLimits{MaxConcurrentRuns: 1})
		if ok {
			if got.RequestID != r.RequestID || got.Owner != "heir" || got.State != queue.StateRunning || got.RunID != "run-1" || got.Attempts != 2 || !got.TakenOver {
				t.Fatalf("takeover: %+v", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never taken over after the heartbeat expired")
		}
		time.Sleep(200 * time.Millisecond)
	}
	wantCode(t, s.FinishRequest(ctx, r.RequestID, "dying", "COMPLETED"), engine.CodeLeaseHeld)
	if err := s.FinishRequest(ctx, r.RequestID, "heir", "COMPLETED"); err != nil {
		t.Fatal(err)
	}
}

// testListWorkers: each heartbeat is listed, live until it expires by the
// database's clock, and gone once the worker retires.
func testListWorkers(t *testing.T, b Backend) {
	s := queueOpener(t, b)()
	if ws, err := s.ListWorkers(ctx); err != nil || len(ws) != 0 {
		t.Fatalf("no worker yet: %+v %v", ws, err)
	}
	if err := s.Heartbeat(ctx, "w-short", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(ctx, "w-long", time.Hour); err != nil {
		t.Fatal(err)
	}
	ws, err := s.ListWorkers(ctx)
	if err != nil || len(ws) != 2 || ws[0].ID != "w-long" || ws[1].ID != "w-short" {
		t.Fatalf("two workers by id: %+v %v", ws, err)
	}
	for _, w := range ws {
		if !w.Live || w.StartedAt.IsZero() || w.HeartbeatAt.Before(w.StartedAt) || !w.ExpiresAt.After(w.HeartbeatAt) {
			t.Fatalf("a fresh heartbeat: %+v", w)
		}
	}
	if d := ws[0].ExpiresAt.Sub(ws[0].HeartbeatAt); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("w-long expires %v after its heartbeat, want 1h", d)
	}
	// w-short's second passes on the database's clock.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ws, err = s.ListWorkers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) == 2 && !ws[1].Live {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("w-short still live 30s after a 1s heartbeat: %+v", ws)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !ws[0].Live {
		t.Fatalf("w-long expired: %+v", ws[0])
	}
	if err := s.RetireWorker(ctx, "w-short"); err != nil {
		t.Fatal(err)
	}
	if ws, err := s.ListWorkers(ctx); err != nil || len(ws) != 1 || ws[0].ID != "w-long" {
		t.Fatalf("after w-short retired: %+v %v", ws, err)
	}
}

func testReleaseCancel(t *testing.T, b Backend) {
	s := queueOpener(t, b)()
	a := enqueue(t, s, request("shop", "a", 1))
	enqueue(t, s, request("shop", "b", 0))
	got, _ := claimRequest(t, s, "w1", queue.ClaimLimits{})
	if got.RequestID != a.RequestID {
		t.Fatalf("claimed %+v", got)
	}
	if err := s.ReleaseRequest(ctx, a.RequestID, "w1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetRequest(ctx, a.RequestID); got.State != queue.StatePending || got.Owner != "" {
		t.Fatalf("released without a run: %+v", got)
	}
	got, _ = claimRequest(t, s, "w1", queue.ClaimLimits{})
	if err := s.SetRequestRun(ctx, got.RequestID, "w1", "run-a"); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseRequest(ctx, got.RequestID, "w1"); err != nil {
		t.Fatal(err)
	}
	// Released with a run: another worker takes it over at once.
	heir, ok := claimRequest(t, s, "w2", queue.ClaimLimits{})
	if !ok || heir.RequestID != a.RequestID || heir.RunID != "run-a" || heir.State != queue.StateRunning {
		t.Fatalf("after release with a run: %+v %v", heir, ok)
	}
	// Cancel: a PENDING request is cancelled, a running one is not.
	list, _ := s.ListRequests(ctx, false)
	var pending queue.Request
	for _, r := range list {
		if r.State == queue.StatePending {
			pending = r
		}
	}
	c, err := s.CancelRequest(ctx, pending.RequestID)
	if err != nil || c.State != queue.StateCancelled || c.FinishedAt.IsZero() {
		t.Fatalf("cancel pending: %+v %v", c, err)
	}
	if c, err := s.CancelRequest(ctx, a.RequestID); err != nil || c.State != queue.StateRunning {
		t.Fatalf("cancel running: %+v %v", c, err)
	}
	if _, err := s.CancelRequest(ctx, "nope"); !errors.Is(err, &engine.Error{Code: engine.CodeRunNotFound}) {
		t.Fatalf("cancel unknown: %v", err)
	}
	if _, ok := claimRequest(t, s, "w3", queue.ClaimLimits{}); ok {
		t.Fatal("a cancelled request was claimed")
	}
	if list, _ := s.ListRequests(ctx, false); len(list) != 1 {
		t.Fatalf("open requests: %+v", list)
	}
}

func testSerial(t *testing.T, b Backend) {
	s := queueOpener(t, b)()
	mk := func(id string) queue.Request {
		r := request("shop", id, 0)
		r.Schedule, r.Serial = "nightly", true
		return r
	}
	first := enqueue(t, s, mk("tick-1"))
	second := enqueue(t, s, mk("tick-2"))
	free := enqueue(t, s, request("shop", "manual", 0))
	got, _ := claimRequest(t, s, "w1", queue.ClaimLimits{})
	if got.RequestID != first.RequestID {
		t.Fatalf("first claim %+v", got)
	}
	got, _ = claimRequest(t, s, "w1", queue.ClaimLimits{})
	if got.RequestID != free.RequestID {
		t.Fatalf("tick-2 must wait for tick-1; claimed %+v", got)
	}
	if r, ok := claimRequest(t, s, "w1", queue.ClaimLimits{}); ok {
		t.Fatalf("claimed %+v while tick-1 runs", r)
	}
	if err := s.FinishRequest(ctx, first.RequestID, "w1", "COMPLETED"); err != nil {
		t.Fatal(err)
	}
	if got, ok := claimRequest(t, s, "w1", queue.ClaimLimits{}); !ok || got.RequestID != second.RequestID {
		t.Fatalf("after tick-1: %+v %v", got, ok)
	}
}

func testCursor(t *testing.T, b Backend) {
	opener := queueOpener(t, b)
	s := opener()
	t0 := time.Date(2026, 4, 1, 2, 0, 0, 0, time.UTC)
	if err := s.InitCursor(ctx, "nightly", t0); err != nil {
		t.Fatal(err)
	}
	if err := s.InitCursor(ctx, "nightly", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	c, ok, err := s.GetCursor(ctx, "nightly")
	if err != nil || !ok || !c.NextTick.Equal(t0) || c.Version != 1 {
		t.Fatalf("cursor %+v %v %v", c, ok, err)
	}
	if _, ok, _ := s.GetCursor(ctx, "nope"); ok {
		t.Fatal("unknown cursor found")
	}
	// Replicas race to advance version 1; one wins and enqueues.
	const replicas = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	handles := make([]QueueStore, replicas)
	for i := range handles {
		handles[i] = opener()
	}
	for i := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := request("shop", "schedule:nightly:2026-04-01T02:00:00Z", 0)
			r.Schedule = "nightly"
			won, err := handles[i].AdvanceCursor(ctx, schedule.Advance{
				Name: "nightly", Version: 1, NextTick: t0.Add(24 * time.Hour), LastTick: t0,
				Requests: []queue.Request{r}, Fired: 1, Missed: 2,
			})
			if err != nil {
				t.Error(err)
				return
			}
			if won {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d replicas advanced version 1, want 1", wins)
	}
	c, _, _ = s.GetCursor(ctx, "nightly")
	if c.Version != 2 || !c.NextTick.Equal(t0.Add(24*time.Hour)) || !c.LastTick.Equal(t0) || c.Fired != 1 || c.Missed != 2 || c.LastRequestID == "" {
		t.Fatalf("advanced cursor %+v", c)
	}
	list, _ := s.ListRequests(ctx, true)
	if len(list) != 1 || list[0].Schedule != "nightly" {
		t.Fatalf("requests after the race: %+v", list)
	}
	all, err := s.ListCursors(ctx)
	if err != nil || len(all) != 1 {
		t.Fatalf("ListCursors: %+v %v", all, err)
	}
}

// testRequestShape: a request's run shape (target, selection, vars, full
// refresh, data interval) comes back from every read as it was enqueued,
// and a request without one reads back as the zero shape.
func testRequestShape(t *testing.T, b Backend) {
	s := queueOpener(t, b)()
	r := request("shop", "backfill-1", 0)
	r.Shape = queue.Shape{
		Target: "prod", Select: []string{"tag:nightly"}, Exclude: []string{"stg_x"},
		Vars: map[string]any{"region": "eu", "days": float64(7), "nested": map[string]any{"k": []any{"a", true}}}, FullRefresh: true,
		DataInterval: &engine.DataInterval{Start: "2026-03-01T00:00:00Z", End: "2026-03-02T00:00:00Z", Timezone: "Europe/Berlin"},
	}
	plain := enqueue(t, s, request("shop", "plain-1", 0))
	stored := enqueue(t, s, r)
	claimed, ok := claimRequest(t, s, "w1", queue.ClaimLimits{})
	if !ok {
		t.Fatal("nothing to claim")
	}
	got, err := s.GetRequest(ctx, stored.RequestID)
	if err != nil {
		t.Fatal(err)
	}
	list, err := s.ListRequests(ctx, true)
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %d %v", len(list), err)
	}
	for name, g := range map[string]queue.Request{"enqueue": stored, "get": got, "list": list[1]} {
		if !reflect.DeepEqual(g.Shape, r.Shape) {
			t.Errorf("%s: shape = %+v, want %+v", name, g.Shape, r.Shape)
		}
	}
	for name, g := range map[string]queue.Request{"enqueue": plain, "claim": claimed, "list": list[0]} {
		if !g.Shape.IsZero() {
			t.Errorf("%s: a request without a shape reads back %+v", name, g.Shape)
		}
	}
}
