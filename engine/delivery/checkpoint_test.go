package delivery_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/audit"
	"github.com/dvtrun/dvtrun/engine/delivery"
	"github.com/dvtrun/dvtrun/engine/lineage"
	"github.com/dvtrun/dvtrun/engine/service/servicetest"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// kindReceiver is a webhook endpoint that tells records apart the way a
// consumer would (the "kind" field), fails the first requests and keeps
// what it answered 2xx.
type kindReceiver struct {
	mu       sync.Mutex
	failures int
	requests int
	events   []engine.RunEventRecord
	cps      []delivery.CheckpointRecord // answered 2xx, in order
	arrived  []string                    // webhook-id of every checkpoint request
	problems []string
}

func (rc *kindReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.requests++
	if err := verifySignature(secretA, r.Header, body, time.Now()); err != nil {
		rc.problems = append(rc.problems, "signature: "+err.Error())
	}
	var probe struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(body, &probe); err != nil {
		rc.problems = append(rc.problems, err.Error())
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if probe.Kind == "checkpoint" {
		rc.arrived = append(rc.arrived, r.Header.Get("webhook-id"))
		if r.Header.Get("dvtrun-record-kind") != "checkpoint" {
			rc.problems = append(rc.problems, "a checkpoint without the dvtrun-record-kind header")
		}
	}
	if rc.requests <= rc.failures {
		http.Error(w, "try again", http.StatusServiceUnavailable)
		return
	}
	if probe.Kind == "checkpoint" {
		var c delivery.CheckpointRecord
		if err := json.Unmarshal(body, &c); err != nil {
			rc.problems = append(rc.problems, err.Error())
		}
		rc.cps = append(rc.cps, c)
		return
	}
	var e engine.RunEventRecord
	if err := json.Unmarshal(body, &e); err != nil || e.EventID == "" {
		rc.problems = append(rc.problems, "a run event without an eventId: "+string(body))
	}
	rc.events = append(rc.events, e)
}

// TestCheckpointsThroughTheSinks: signed checkpoints reach a webhook that
// fails the first requests once each, in tree-size order after retries,
// and a JSONL file beside the run events; an OpenLineage sink skips them.
// The note a sink received is an external checkpoint audit.Verify accepts.
func TestCheckpointsThroughTheSinks(t *testing.T) {
	st := openStore(t)
	seedRuns(t, st, 2, 0)
	first := storetest.Checkpoint(t, st)
	seedRuns(t, st, 1, 0)
	second := storetest.Checkpoint(t, st)
	events := 3 * 2 // three runs of RunQueued and RunStarted

	rc := &kindReceiver{failures: 4}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	dir := t.TempDir()
	jl, err := delivery.OpenJSONL(filepath.Join(dir, "archive.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer jl.Close()
	olPath := filepath.Join(dir, "lineage.jsonl")
	ol, err := delivery.NewOpenLineage(delivery.OpenLineageOptions{Mapper: olMapper(t), Path: olPath})
	if err != nil {
		t.Fatal(err)
	}
	defer ol.Close()
	clock := engine.ClockFunc(time.Now)
	svc := newService(t, st, clock,
		delivery.Target{Name: "hooks", Sink: webhook(t, srv.URL, clock), Policy: fast},
		delivery.Target{Name: "archive", Sink: jl, Policy: fast},
		delivery.Target{Name: "lineage", Sink: ol, Policy: fast})
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	want := events + 2
	servicetest.WaitFor(t, "every event and both checkpoints delivered to all three sinks", func() bool {
		return count(t, st, "hooks", delivery.StateDelivered) == want && count(t, st, "archive", delivery.StateDelivered) == want &&
			count(t, st, "lineage", delivery.StateDelivered) == want
	})
	svc.Stop()

	sizes := func(cps []delivery.CheckpointRecord) []int64 {
		var out []int64
		for _, c := range cps {
			out = append(out, c.TreeSize)
		}
		return out
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.problems) > 0 {
		t.Fatalf("the receiver saw: %v", rc.problems)
	}
	if got := sizes(rc.cps); len(got) != 2 || got[0] != first.Size || got[1] != second.Size || len(rc.events) != events {
		t.Fatalf("webhook got checkpoints of sizes %v and %d events; want [%d %d] once each and %d", got, len(rc.events), first.Size, second.Size, events)
	}
	if rc.requests != want+rc.failures {
		t.Fatalf("%d requests, want %d deliveries and %d failures", rc.requests, want, rc.failures)
	}
	for i, id := range rc.arrived { // retries keep the id, arrivals keep the order
		if i > 0 && id < rc.arrived[i-1] || !strings.HasPrefix(id, "checkpoint-") {
			t.Fatalf("checkpoint arrivals %v: ids out of order", rc.arrived)
		}
	}
	for i, c := range rc.cps {
		if c.Kind != "checkpoint" || c.ID != delivery.CheckpointEventID(c.TreeSize) || c.Origin != "dvtrun.audit" || !strings.HasPrefix(c.Note, "dvtrun.audit\n") {
			t.Fatalf("checkpoint record %d = %+v", i, c)
		}
	}
	if got, err := delivery.ReadJSONLCheckpoints(filepath.Join(dir, "archive.jsonl")); err != nil || len(got) != 2 || got[0] != rc.cps[0] || got[1] != rc.cps[1] {
		t.Fatalf("the file's checkpoints %+v (%v), want the webhook's %+v", got, err, rc.cps)
	}
	if got, err := delivery.ReadJSONL(filepath.Join(dir, "archive.jsonl")); err != nil || len(got) != events {
		t.Fatalf("the file's run events: %d (%v), want %d", len(got), err, events)
	}
	b, err := os.ReadFile(olPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var e lineage.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.EventType == "" || strings.Contains(line, `"kind"`) {
			t.Fatalf("the lineage file holds a line that is no lineage event: %s", line)
		}
	}

	// What the webhook received, written to a file, is the external
	// checkpoint verification is given (audit verify --checkpoint FILE).
	held := filepath.Join(dir, "received.txt")
	if err := os.WriteFile(held, []byte(rc.cps[1].Note), 0o644); err != nil {
		t.Fatal(err)
	}
	ext, err := os.ReadFile(held)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := audit.Verify(ctx, st, audit.VerifyOptions{PublicKey: storetest.TestPublicKey, External: ext})
	if err != nil || rep.Problem != nil || rep.Latest == nil || rep.Latest.Size != second.Size {
		t.Fatalf("verify with the received checkpoint: %+v, %v", rep, err)
	}
	forged := strings.Replace(rc.cps[1].Note, "\n"+rc.cps[1].RootHash+"\n", "\n"+rc.cps[0].RootHash+"\n", 1)
	if rep, err := audit.Verify(ctx, st, audit.VerifyOptions{PublicKey: storetest.TestPublicKey, External: []byte(forged)}); err == nil && rep.Problem == nil {
		t.Fatal("a received checkpoint with its root changed verified")
	}
}

// TestCheckpointDeadLetter: a checkpoint the sink refuses MaxAttempts times
// is dead-lettered with an alert of its own (no run's) and holds back the
// later checkpoints, never the run events; RetryDead replays it and the
// held-back ones follow in tree-size order.
func TestCheckpointDeadLetter(t *testing.T) {
	st := openStore(t)
	seedRuns(t, st, 1, 0)
	first := storetest.Checkpoint(t, st)
	seedRuns(t, st, 1, 0)
	second := storetest.Checkpoint(t, st)

	var mu sync.Mutex
	refuse := true
	var got []int64 // tree sizes answered 2xx
	events := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c delivery.CheckpointRecord
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &c)
		mu.Lock()
		defer mu.Unlock()
		if c.Kind != "checkpoint" {
			events++
			return
		}
		if refuse && c.TreeSize == first.Size {
			http.Error(w, "read-only bucket", http.StatusForbidden)
			return
		}
		got = append(got, c.TreeSize)
	}))
	defer srv.Close()
	clock := engine.ClockFunc(time.Now)
	policy := delivery.Policy{MaxAttempts: 2, Backoff: time.Millisecond, MaxBackoff: time.Millisecond}
	svc := newService(t, st, clock, delivery.Target{Name: "hooks", Sink: webhook(t, srv.URL, clock), Policy: policy})
	var rep delivery.Report
	for range 10 { // each drain makes one attempt; the backoff is a millisecond
		r, err := svc.Drain(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep = r; r.DeadTotal == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	if rep.DeadTotal != 1 || rep.Pending != 1 || len(got) != 0 || events != 4 {
		t.Fatalf("drain %+v; checkpoints delivered %v, events %d; want the first dead, the second held back, all 4 events delivered", rep, got, events)
	}
	refuse = false
	mu.Unlock()
	alerts, err := st.ListAlerts(ctx, "")
	if err != nil || len(alerts) != 1 || alerts[0].RunID != "" || alerts[0].Key != "EVENT_BUS_DELIVERY_FAILED:hooks:"+delivery.CheckpointEventID(first.Size) ||
		!strings.Contains(alerts[0].Message, "audit checkpoint of tree size") || !strings.Contains(alerts[0].Message, "outbox retry "+delivery.CheckpointEventID(first.Size)) {
		t.Fatalf("alerts %+v %v", alerts, err)
	}
	if n, err := st.RetryDead(ctx, "hooks", delivery.CheckpointEventID(first.Size)); err != nil || n != 1 {
		t.Fatalf("RetryDead: %d %v", n, err)
	}
	if r, err := svc.Drain(ctx); err != nil || r.Pending != 0 || r.DeadTotal != 0 {
		t.Fatalf("drain after the retry: %+v %v", r, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0] != first.Size || got[1] != second.Size {
		t.Fatalf("checkpoints delivered %v, want [%d %d]", got, first.Size, second.Size)
	}
}
