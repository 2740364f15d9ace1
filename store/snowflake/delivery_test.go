package snowflake_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/delivery"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// TestDeliveryServiceOnSnowflake drains a Snowflake store's outbox to a
// JSONL file with the delivery service: every event once, in runSeq order
// per run, and nothing left pending.
func TestDeliveryServiceOnSnowflake(t *testing.T) {
	srv := sftest.Start(t)
	st := openStore(t, srv.DSN("dvt", "delivery"), snowflake.Options{})
	defer st.Close()
	runs := map[string][]engine.RunEventRecord{}
	total := 0
	for range 3 {
		recs := storetest.SeedRun(t, st, 3)
		runs[recs[0].RunID] = recs
		total += len(recs)
	}
	path := filepath.Join(t.TempDir(), "events.jsonl")
	j, err := delivery.OpenJSONL(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	svc, err := delivery.New(delivery.Options{
		Store: st, Targets: []delivery.Target{{Name: "archive", Sink: j}}, Clock: engine.ClockFunc(time.Now),
		IDs: engine.IDFunc(uuid.NewString), Rand: func() float64 { return 0.5 }, BatchSize: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := svc.Drain(ctx)
	if err != nil || r.Delivered != total || r.Pending != 0 || r.DeadTotal != 0 {
		t.Fatalf("drain %+v %v, want %d delivered", r, err, total)
	}
	got, err := delivery.ReadJSONL(path)
	if err != nil || len(got) != total {
		t.Fatalf("%d records (%v), want %d", len(got), err, total)
	}
	next := map[string]int{}
	for _, e := range got {
		want := runs[e.RunID][next[e.RunID]]
		if e.EventID != want.EventID || e.RunSeq != want.RunSeq {
			t.Fatalf("run %s: got runSeq %d, want %d", e.RunID, e.RunSeq, want.RunSeq)
		}
		next[e.RunID]++
	}
}

// TestDeliveryClaimIsOneRequest: enqueue and claim are one request each
// (plus, for a claim, one read of each claimed run's events), so no
// transaction holds the 'deliveries' lock between requests: a process
// killed right after its claim request leaves nothing for the next claimer
// to wait for (issue 16).
func TestDeliveryClaimIsOneRequest(t *testing.T) {
	quietDriver(t)
	srv := sftest.Start(t)
	dsn := srv.DSN("dvt", "delivery_trips")
	tr := &sftest.CountingTransport{}
	opts := snowflake.Options{LockTimeout: time.Second}
	st := openStore(t, dsn, snowflake.Options{Transporter: tr, LockTimeout: opts.LockTimeout})
	defer st.Close()
	storetest.SeedRun(t, st, 3)
	storetest.SeedRun(t, st, 2)

	tr.Reset()
	n, err := st.EnqueueDeliveries(ctx, "archive")
	if err != nil || n == 0 {
		t.Fatalf("enqueue: %d, %v", n, err)
	}
	tripsAfterLogin(t, "EnqueueDeliveries", tr, 1)
	if again, err := st.EnqueueDeliveries(ctx, "archive"); err != nil || again != 0 {
		t.Fatalf("second enqueue: %d, %v; want 0", again, err)
	}

	// A process killed right after it sent its claim: the server ran the
	// block to its COMMIT, the answer is lost.
	victim, _ := openKilledAt(t, dsn, opts, "lock_name = 'deliveries'")
	defer victim.Close()
	if _, err := victim.ClaimDeliveries(ctx, "archive", "dead-claim", 1, time.Minute); err == nil {
		t.Fatal("the killed process's claim succeeded")
	}

	lines := &waitLines{}
	tr.Reset()
	live := opts
	live.Transporter, live.OnWait = tr, lines.report
	next := openStore(t, dsn, live)
	defer next.Close()
	tr.Reset()
	ds, err := next.ClaimDeliveries(ctx, "archive", uuid.NewString(), 100, time.Minute)
	if err != nil {
		t.Fatalf("claim after the kill: %v", err)
	}
	if got := lines.get(); len(got) > 0 {
		t.Errorf("the claim after the kill waited for a lock: %q", got)
	}
	runs := map[string]bool{}
	for _, d := range ds {
		runs[d.RunID] = true
		if d.Event.EventID != d.EventID {
			t.Errorf("delivery %s carries event %q", d.EventID, d.Event.EventID)
		}
	}
	// The dead claim holds the first event of one run until it expires,
	// which blocks that run's later events: the other run's are claimed.
	if len(ds) == 0 || len(runs) != 1 {
		t.Errorf("claimed %d deliveries of %d runs, want the events of the one run the dead claim does not block", len(ds), len(runs))
	}
	tripsAfterLogin(t, "ClaimDeliveries", tr, int64(1+len(runs)))
}
