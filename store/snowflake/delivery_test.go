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
