package storetest

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/audit"
	"github.com/dvtrun/dvtrun/engine/delivery"
	"github.com/dvtrun/dvtrun/store"
)

// deliveryCases are the outbox-delivery cases of the suite (issue 10). The
// database is shared with the other cases, so each case uses a sink of its
// own: a new sink gets a delivery for every outbox event of every run.
var deliveryCases = []struct {
	name string
	fn   func(*testing.T, Backend)
}{
	{"DeliveriesEnqueuedOncePerSink", testEnqueueDeliveries},
	{"DeliveryClaimsExactlyOnceUnderConcurrency", testClaimConcurrency},
	{"DeliveryClaimsKeepRunOrder", testClaimOrder},
	{"DeliveryRetryAndDeadLetter", testDeadLetter},
	{"DeliveryClaimExpires", testClaimExpiry},
	// Last: it leaves checkpoints, which every later new sink is given.
	{"CheckpointsDeliveredAsAStream", testCheckpointDeliveries},
}

func deliveryStore(t *testing.T, b Backend) (store.Store, delivery.Store) {
	t.Helper()
	s := open(t, b)
	ds, ok := s.(delivery.Store)
	if !ok {
		t.Fatalf("%T does not implement delivery.Store", s)
	}
	return s, ds
}

// SeedRun bootstraps a run with RunQueued, RunStarted and a started and
// completed step per steps, and returns its events (2+2*steps): outbox
// content for delivery tests.
func SeedRun(t testing.TB, s store.Store, steps int) []engine.RunEventRecord {
	t.Helper()
	f := NewFixture()
	f.Bootstrap(t, s)
	var batch []engine.RunEventWrite
	for i := range steps {
		id := fmt.Sprintf("model.d%03d", i)
		batch = append(batch, f.Event(engine.StepStarted, id, 1), f.Event(engine.StepCompleted, id, 1))
	}
	if len(batch) > 0 {
		if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, batch); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := s.ListEvents(ctx, f.Meta.RunID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func newSink() string { return "sink-" + uuid.NewString()[:8] }

func list(t *testing.T, ds delivery.Store, f delivery.Filter) []delivery.Delivery {
	t.Helper()
	f.Limit = 100000
	out, err := ds.ListDeliveries(ctx, f)
	if err != nil {
		t.Fatalf("ListDeliveries: %v", err)
	}
	return out
}

func ofRun(ds []delivery.Delivery, runID string) []delivery.Delivery {
	var out []delivery.Delivery
	for _, d := range ds {
		if d.RunID == runID {
			out = append(out, d)
		}
	}
	return out
}

func claim(t *testing.T, ds delivery.Store, sink string, limit int, ttl time.Duration) (string, []delivery.Delivery) {
	t.Helper()
	id := uuid.NewString()
	got, err := ds.ClaimDeliveries(ctx, sink, id, limit, ttl)
	if err != nil {
		t.Fatalf("ClaimDeliveries: %v", err)
	}
	return id, got
}

func testEnqueueDeliveries(t *testing.T, b Backend) {
	s, ds := deliveryStore(t, b)
	recs := SeedRun(t, s, 2)
	a, c := newSink(), newSink()
	n, err := ds.EnqueueDeliveries(ctx, a)
	if err != nil || n < len(recs) {
		t.Fatalf("first enqueue: %d, %v; want at least the run's %d events", n, err, len(recs))
	}
	if n, err := ds.EnqueueDeliveries(ctx, a); err != nil || n != 0 {
		t.Fatalf("second enqueue created %d (%v), want 0", n, err)
	}
	if n2, err := ds.EnqueueDeliveries(ctx, c); err != nil || n2 != n {
		t.Fatalf("another sink: %d (%v), want %d", n2, err, n)
	}
	mine := ofRun(list(t, ds, delivery.Filter{Sink: a}), recs[0].RunID)
	if len(mine) != len(recs) {
		t.Fatalf("sink %s has %d deliveries of the run, want %d", a, len(mine), len(recs))
	}
	for i, d := range mine {
		r := recs[i]
		if d.EventID != r.EventID || d.RunSeq != r.RunSeq || d.EventType != r.EventType || d.State != delivery.StatePending || d.Attempts != 0 || d.CreatedAt.IsZero() {
			t.Fatalf("delivery %d = %+v, want PENDING of event %s runSeq %d %s", i, d, r.EventID, r.RunSeq, r.EventType)
		}
	}
	// A new event reaches both sinks on the next enqueue.
	more := SeedRun(t, s, 0)
	for _, sink := range []string{a, c} {
		if n, err := ds.EnqueueDeliveries(ctx, sink); err != nil || n != len(more) {
			t.Fatalf("enqueue after a new run: %d (%v), want %d", n, err, len(more))
		}
	}
	// Events appended later to a run the sinks already have follow it.
	f := NewFixture()
	f.Bootstrap(t, s)
	for range 2 {
		if _, err := ds.EnqueueDeliveries(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	later := []engine.RunEventWrite{f.Event(engine.StepStarted, "model.late", 1), f.Event(engine.StepCompleted, "model.late", 1)}
	if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, later); err != nil {
		t.Fatal(err)
	}
	if n, err := ds.EnqueueDeliveries(ctx, a); err != nil || n != 2 {
		t.Fatalf("enqueue after an append to a known run: %d (%v), want 2", n, err)
	}
	if got := ofRun(list(t, ds, delivery.Filter{Sink: a}), f.Meta.RunID); len(got) != 4 || got[2].RunSeq != 3 || got[3].RunSeq != 4 {
		t.Fatalf("deliveries of the grown run: %+v", got)
	}
	if got := list(t, ds, delivery.Filter{Sink: a, EventID: more[0].EventID}); len(got) != 1 {
		t.Fatalf("filter by event id: %+v", got)
	}
}

// testClaimConcurrency runs 8 claimers, each on its own handle, until
// nothing is left: every delivery is claimed exactly once, and each run's
// events are handed out in runSeq order.
func testClaimConcurrency(t *testing.T, b Backend) {
	s, _ := deliveryStore(t, b)
	var runs [][]engine.RunEventRecord
	for range 6 {
		runs = append(runs, SeedRun(t, s, 3))
	}
	sink := newSink()
	if _, err := s.(delivery.Store).EnqueueDeliveries(ctx, sink); err != nil {
		t.Fatal(err)
	}
	total := len(list(t, s.(delivery.Store), delivery.Filter{Sink: sink}))
	const claimers = 8
	var mu sync.Mutex
	claimed := map[string]int{}
	order := map[string][]int64{} // run → runSeqs in the order they were "delivered"
	var wg sync.WaitGroup
	errs := make(chan error, claimers)
	for w := range claimers {
		_, ds := deliveryStore(t, b)
		wg.Add(1)
		go func() {
			defer wg.Done()
			idle := 0
			for idle < 3 {
				id := fmt.Sprintf("claimer-%d-%s", w, uuid.NewString()[:8])
				got, err := ds.ClaimDeliveries(ctx, sink, id, 3, time.Minute)
				if err != nil {
					errs <- fmt.Errorf("claimer %d: %w", w, err)
					return
				}
				if len(got) == 0 {
					idle++
					time.Sleep(20 * time.Millisecond)
					continue
				}
				idle = 0
				var ids []string
				mu.Lock()
				for _, d := range got {
					claimed[d.EventID]++
					order[d.RunID] = append(order[d.RunID], d.RunSeq)
					ids = append(ids, d.EventID)
					if d.RunID == delivery.CheckpointRunID {
						if d.Checkpoint == nil || d.Checkpoint.ID != d.EventID {
							errs <- fmt.Errorf("claimed checkpoint delivery %s carries %+v", d.EventID, d.Checkpoint)
						}
					} else if d.Event.EventID != d.EventID || d.Event.RunSeq != d.RunSeq {
						errs <- fmt.Errorf("claimed delivery %s carries event %s runSeq %d", d.EventID, d.Event.EventID, d.Event.RunSeq)
					}
				}
				mu.Unlock()
				if err := ds.MarkDelivered(ctx, sink, id, ids); err != nil {
					errs <- fmt.Errorf("claimer %d: mark: %w", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(claimed) != total {
		t.Fatalf("%d of %d deliveries claimed", len(claimed), total)
	}
	for id, n := range claimed {
		if n != 1 {
			t.Fatalf("delivery of %s claimed %d times", id, n)
		}
	}
	for _, recs := range runs {
		got := order[recs[0].RunID]
		if len(got) != len(recs) || !sort.SliceIsSorted(got, func(i, j int) bool { return got[i] < got[j] }) {
			t.Fatalf("run %s handed out as %v, want runSeq 1..%d in order", recs[0].RunID, got, len(recs))
		}
	}
	if left := list(t, s.(delivery.Store), delivery.Filter{Sink: sink, State: delivery.StatePending}); len(left) != 0 {
		t.Fatalf("%d deliveries still pending", len(left))
	}
}

// testClaimOrder: a claim is a prefix of each run; a failing delivery holds
// back its run's later events and nobody else's.
func testClaimOrder(t *testing.T, b Backend) {
	s, ds := deliveryStore(t, b)
	r1, r2 := SeedRun(t, s, 1), SeedRun(t, s, 1) // 4 events each
	sink := newSink()
	if _, err := ds.EnqueueDeliveries(ctx, sink); err != nil {
		t.Fatal(err)
	}
	// Settle everything of other runs so the claims below see r1 and r2 only.
	settleOthers(t, ds, sink, r1[0].RunID, r2[0].RunID)
	id, got := claim(t, ds, sink, 100, time.Minute)
	if a, c := ofRun(got, r1[0].RunID), ofRun(got, r2[0].RunID); len(a) != 4 || len(c) != 4 {
		t.Fatalf("claimed %d of run 1 and %d of run 2, want 4 and 4", len(a), len(c))
	}
	// Nothing is claimable while everything is claimed.
	if _, again := claim(t, ds, sink, 100, time.Minute); len(again) != 0 {
		t.Fatalf("claimed %d deliveries that another claim holds", len(again))
	}
	// Run 1: runSeq 1 delivered, 2 fails (retry in an hour), 3 and 4 given back.
	if err := ds.MarkDelivered(ctx, sink, id, []string{r1[0].EventID}); err != nil {
		t.Fatal(err)
	}
	if err := ds.MarkFailed(ctx, sink, id, delivery.Failure{EventID: r1[1].EventID, Error: "HTTP 503", RetryAfter: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := ds.ReleaseClaim(ctx, sink, id); err != nil {
		t.Fatal(err)
	}
	_, got = claim(t, ds, sink, 100, time.Minute)
	if len(ofRun(got, r1[0].RunID)) != 0 {
		t.Fatalf("run 1 events claimed behind a backing-off delivery: %+v", ofRun(got, r1[0].RunID))
	}
	if c := ofRun(got, r2[0].RunID); len(c) != 4 || c[0].RunSeq != 1 || c[3].RunSeq != 4 {
		t.Fatalf("run 2 not claimable in full after run 1 failed: %+v", c)
	}
	d := ofRun(list(t, ds, delivery.Filter{Sink: sink}), r1[0].RunID)
	if d[0].State != delivery.StateDelivered || d[0].Attempts != 1 || d[0].DeliveredAt == nil ||
		d[1].State != delivery.StatePending || d[1].Attempts != 1 || d[1].LastError != "HTTP 503" || !d[1].NextAttemptAt.After(d[1].CreatedAt.Add(30*time.Minute)) ||
		d[2].Attempts != 0 || d[2].State != delivery.StatePending {
		t.Fatalf("run 1 deliveries after the failure: %+v", d)
	}
}

// settleOthers marks every delivery of sink outside keep delivered.
func settleOthers(t *testing.T, ds delivery.Store, sink string, keep ...string) {
	t.Helper()
	skip := map[string]bool{}
	for _, r := range keep {
		skip[r] = true
	}
	for {
		id, got := claim(t, ds, sink, 1000, time.Minute)
		if len(got) == 0 {
			return
		}
		var ids []string
		for _, d := range got {
			if !skip[d.RunID] {
				ids = append(ids, d.EventID)
			}
		}
		if err := ds.MarkDelivered(ctx, sink, id, ids); err != nil {
			t.Fatal(err)
		}
		if err := ds.ReleaseClaim(ctx, sink, id); err != nil {
			t.Fatal(err)
		}
		if len(ids) == 0 {
			return
		}
	}
}

func testDeadLetter(t *testing.T, b Backend) {
	s, ds := deliveryStore(t, b)
	r := SeedRun(t, s, 1)
	sink := newSink()
	if _, err := ds.EnqueueDeliveries(ctx, sink); err != nil {
		t.Fatal(err)
	}
	settleOthers(t, ds, sink, r[0].RunID)
	id, got := claim(t, ds, sink, 100, time.Minute)
	if len(got) != len(r) {
		t.Fatalf("claimed %d, want %d", len(got), len(r))
	}
	if err := ds.MarkFailed(ctx, sink, id, delivery.Failure{EventID: r[0].EventID, Error: "HTTP 500: boom", Dead: true}); err != nil {
		t.Fatal(err)
	}
	if err := ds.ReleaseClaim(ctx, sink, id); err != nil {
		t.Fatal(err)
	}
	dead := list(t, ds, delivery.Filter{Sink: sink, State: delivery.StateDead})
	if len(dead) != 1 || dead[0].EventID != r[0].EventID || dead[0].Attempts != 1 || dead[0].LastError != "HTTP 500: boom" {
		t.Fatalf("dead letters %+v", dead)
	}
	// A dead letter holds back its run.
	if _, got := claim(t, ds, sink, 100, time.Minute); len(got) != 0 {
		t.Fatalf("claimed %d behind a dead letter", len(got))
	}
	// Retrying another sink or another event moves nothing.
	if n, err := ds.RetryDead(ctx, newSink(), ""); err != nil || n != 0 {
		t.Fatalf("retry of another sink: %d %v", n, err)
	}
	if n, err := ds.RetryDead(ctx, sink, r[1].EventID); err != nil || n != 0 {
		t.Fatalf("retry of a live event: %d %v", n, err)
	}
	if n, err := ds.RetryDead(ctx, sink, r[0].EventID); err != nil || n != 1 {
		t.Fatalf("retry: %d %v, want 1", n, err)
	}
	id, got = claim(t, ds, sink, 100, time.Minute)
	if len(got) != len(r) || got[0].EventID != r[0].EventID || got[0].Attempts != 0 {
		t.Fatalf("after retry claimed %+v", got)
	}
	var ids []string
	for _, d := range got {
		ids = append(ids, d.EventID)
	}
	if err := ds.MarkDelivered(ctx, sink, id, ids); err != nil {
		t.Fatal(err)
	}
	for _, d := range ofRun(list(t, ds, delivery.Filter{Sink: sink}), r[0].RunID) {
		if d.State != delivery.StateDelivered {
			t.Fatalf("delivery %+v not delivered", d)
		}
	}
}

// testClaimExpiry: a claim whose holder vanished is taken over once it
// expires by the database's clock, and the old holder can no longer settle.
func testClaimExpiry(t *testing.T, b Backend) {
	s, ds := deliveryStore(t, b)
	r := SeedRun(t, s, 0)
	sink := newSink()
	if _, err := ds.EnqueueDeliveries(ctx, sink); err != nil {
		t.Fatal(err)
	}
	settleOthers(t, ds, sink, r[0].RunID)
	old, got := claim(t, ds, sink, 100, time.Second)
	if len(got) != len(r) {
		t.Fatalf("claimed %d, want %d", len(got), len(r))
	}
	if _, again := claim(t, ds, sink, 100, time.Minute); len(again) != 0 {
		t.Fatalf("claimed %d under a live claim", len(again))
	}
	var taken []delivery.Delivery
	var id string
	for deadline := time.Now().Add(30 * time.Second); len(taken) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the expired claim was never taken over")
		}
		time.Sleep(200 * time.Millisecond)
		id, taken = claim(t, ds, sink, 100, time.Minute)
	}
	if len(taken) != len(r) {
		t.Fatalf("took over %d, want %d", len(taken), len(r))
	}
	if err := ds.MarkDelivered(ctx, sink, old, []string{r[0].EventID}); err != nil {
		t.Fatal(err)
	}
	if d := ofRun(list(t, ds, delivery.Filter{Sink: sink}), r[0].RunID); d[0].State != delivery.StatePending {
		t.Fatalf("a lost claim settled a delivery: %+v", d[0])
	}
	if err := ds.ReleaseClaim(ctx, sink, id); err != nil {
		t.Fatal(err)
	}
}

// testCheckpointDeliveries: the stored audit checkpoints reach a sink as a
// stream of their own (run id delivery.CheckpointRunID, runSeq = tree
// size): each once per sink, claimed in size order with the signed note as
// stored, a failing one holding back the later ones like a run's event.
func testCheckpointDeliveries(t *testing.T, b Backend) {
	s, ds := deliveryStore(t, b)
	as, ok := s.(AuditStore)
	if !ok {
		t.Fatalf("%T does not keep the audit log", s)
	}
	SeedRun(t, s, 1)
	first := Checkpoint(t, as)
	SeedRun(t, s, 0)
	second := Checkpoint(t, as)
	if second.Size <= first.Size {
		t.Fatalf("checkpoint sizes %d then %d, want growth", first.Size, second.Size)
	}
	stored, err := as.Checkpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sink := newSink()
	if _, err := ds.EnqueueDeliveries(ctx, sink); err != nil {
		t.Fatal(err)
	}
	if n, err := ds.EnqueueDeliveries(ctx, sink); err != nil || n != 0 {
		t.Fatalf("second enqueue created %d (%v), want 0", n, err)
	}
	got := ofRun(list(t, ds, delivery.Filter{Sink: sink}), delivery.CheckpointRunID)
	if len(got) != len(stored) {
		t.Fatalf("sink has %d checkpoint deliveries, the store %d checkpoints", len(got), len(stored))
	}
	for i, d := range got {
		c := stored[i]
		if d.EventID != delivery.CheckpointEventID(c.Size) || d.RunSeq != c.Size || d.EventType != delivery.CheckpointEventType || d.State != delivery.StatePending {
			t.Fatalf("checkpoint delivery %d = %+v, want PENDING %s at runSeq %d", i, d, delivery.CheckpointEventID(c.Size), c.Size)
		}
	}
	settleOthers(t, ds, sink, delivery.CheckpointRunID)

	// The claim carries each checkpoint as stored, in size order; the
	// first one failing holds back the rest.
	id, claimed := claim(t, ds, sink, 1000, time.Minute)
	if len(claimed) != len(stored) {
		t.Fatalf("claimed %d checkpoint deliveries, want %d", len(claimed), len(stored))
	}
	for i, d := range claimed {
		c := d.Checkpoint
		if c == nil || c.Kind != "checkpoint" || c.TreeSize != stored[i].Size || c.RootHash != stored[i].Root || c.Note != string(stored[i].Note) || c.Origin != "dvtrun.audit" {
			t.Fatalf("claimed checkpoint %d = %+v, want the stored one of size %d", i, c, stored[i].Size)
		}
	}
	if opened, err := audit.Open([]byte(claimed[len(claimed)-1].Checkpoint.Note), TestPublicKey); err != nil || opened.Size != second.Size || opened.Root != second.Root {
		t.Fatalf("the delivered note does not open as the newest checkpoint: %+v, %v", opened, err)
	}
	if err := ds.MarkFailed(ctx, sink, id, delivery.Failure{EventID: claimed[0].EventID, Error: "HTTP 503", RetryAfter: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := ds.ReleaseClaim(ctx, sink, id); err != nil {
		t.Fatal(err)
	}
	if _, again := claim(t, ds, sink, 1000, time.Minute); len(ofRun(again, delivery.CheckpointRunID)) != 0 {
		t.Fatalf("checkpoints claimed behind a backing-off one: %+v", again)
	}

	// A later checkpoint is one more delivery, after the ones the sink has.
	recs := SeedRun(t, s, 0)
	third := Checkpoint(t, as)
	if n, err := ds.EnqueueDeliveries(ctx, sink); err != nil || n != len(recs)+1 {
		t.Fatalf("enqueue after a new run and checkpoint: %d (%v), want its %d events and 1 checkpoint", n, err, len(recs))
	}
	got = ofRun(list(t, ds, delivery.Filter{Sink: sink}), delivery.CheckpointRunID)
	if last := got[len(got)-1]; len(got) != len(stored)+1 || last.RunSeq != third.Size || last.EventID != delivery.CheckpointEventID(third.Size) {
		t.Fatalf("checkpoint deliveries after a third checkpoint: %+v", got)
	}
}
