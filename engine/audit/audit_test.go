package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/dvtrun/dvtrun/engine"
)

func record(seq int64, typ engine.EventType, step, payload string) engine.RunEventRecord {
	t := time.Date(2026, 4, 1, 8, 0, 0, int(seq)*1000, time.FixedZone("CEST", 2*3600))
	return engine.RunEventRecord{RunEventWrite: engine.RunEventWrite{
		EventID: "e" + string(rune('0'+seq)), EventType: typ, EmittedAt: t, RunID: "run-1", TenantID: "acme",
		ProjectID: "shop", EnvironmentID: "dev", PlanID: "p", PlanVersion: "1", EngineAttemptID: 1, LogicalAttemptID: 1,
		IdempotencyKey: "k" + string(rune('0'+seq)), StepID: step, Payload: []byte(payload),
	}, RunSeq: seq, PersistedAt: t.Add(time.Millisecond)}
}

// TestEventBytes: the form README documents, and values holding the
// form's own punctuation still split back into the same fields.
func TestEventBytes(t *testing.T) {
	r := record(1, engine.StepStarted, "", "")
	want := "2:e111:StepStarted-4:acme4:shop3:dev1:p1:11:11:12:k1" +
		"30:2026-04-01T06:00:00.000001000Z30:2026-04-01T06:00:00.001001000Z-"
	if got := string(EventBytes(r)); got != want {
		t.Fatalf("EventBytes\n got %s\nwant %s", got, want)
	}
	payload := "{\"a\":\"3:b-\n✓\"}" // a raw newline, a length prefix and a '-' inside
	hostile := record(2, engine.StepCompleted, "12:-x:", payload)
	fields, ok := splitEventBytes(EventBytes(hostile))
	if !ok || *fields[2] != "12:-x:" || *fields[13] != payload {
		t.Fatalf("split %v %v", ok, fields)
	}
	if r.Payload = []byte("null"); !bytes.HasSuffix(EventBytes(r), []byte("Z-")) {
		t.Fatal("a null payload is not NULL")
	}
}

func TestLinkIsSHA256OfTheDocumentedText(t *testing.T) {
	sum := sha256.Sum256([]byte("dvtrun-chain-v1\nrun-1\n7\n2:ab\n" + Genesis))
	if got := Link("run-1", 7, []byte("2:ab"), Genesis); got != hex.EncodeToString(sum[:]) {
		t.Fatalf("Link = %s", got)
	}
}

func TestVerifyRun(t *testing.T) {
	recs := []engine.RunEventRecord{record(1, engine.RunQueued, "", ""), record(2, engine.RunStarted, "", ""),
		record(3, engine.RunCompleted, "", `{"ok":true}`)}
	chain := func(recs []engine.RunEventRecord) map[int64]StoredLink {
		out := map[int64]StoredLink{}
		for i, c := range Chain(Genesis, recs) {
			out[recs[i].RunSeq] = StoredLink{PrevHash: c.PrevHash, Hash: c.Hash, PayloadSHA256: c.PayloadSHA256}
		}
		return out
	}
	// chainV1 links recs in the v1 form, as events appended before v2 are.
	chainV1 := func(recs []engine.RunEventRecord) map[int64]StoredLink {
		out := map[int64]StoredLink{}
		prev := Genesis
		for _, r := range recs {
			h := Link(r.RunID, r.RunSeq, EventBytes(r), prev)
			out[r.RunSeq] = StoredLink{PrevHash: prev, Hash: h}
			prev = h
		}
		return out
	}
	after := append(append([]engine.RunEventRecord(nil), recs...), record(4, engine.StepStarted, "s", ""))
	// Snowflake's VARIANT gives the payload back re-serialised.
	reserialised := append([]engine.RunEventRecord(nil), recs...)
	reserialised[2].Payload = []byte(`{ "ok": true }`)
	pruned := append([]engine.RunEventRecord(nil), recs...)
	pruned[2].Payload = nil
	edited := append([]engine.RunEventRecord(nil), recs...)
	edited[2].Payload = []byte(`{"ok":false}`)
	retyped := append([]engine.RunEventRecord(nil), recs...)
	retyped[2].EventType = engine.RunFailed
	cases := []struct {
		name   string
		rc     RunChain
		seq    int64
		substr string // "" : verifies
	}{
		{"whole", RunChain{RunID: "run-1", Status: engine.StatusCompleted, NextSeq: 4, Records: recs, Links: chain(recs)}, 0, ""},
		{"ended without its terminal event", RunChain{RunID: "run-1", Status: engine.StatusCompleted, NextSeq: 3, Records: recs[:2], Links: chain(recs[:2])}, 0, "no terminal event"},
		{"sequence row ahead", RunChain{RunID: "run-1", Status: engine.StatusRunning, NextSeq: 5, Records: recs, Links: chain(recs)}, 4, "runSeq 4 is missing"},
		{"a link missing", RunChain{RunID: "run-1", Status: engine.StatusCompleted, NextSeq: 4, Records: recs, Links: func() map[int64]StoredLink {
			l := chain(recs)
			delete(l, 2)
			return l
		}()}, 2, "not chained"},
		{"chained before genesis", RunChain{RunID: "run-1", Status: engine.StatusCompleted, NextSeq: 4, FirstSeq: 3, Records: recs, Links: chain(recs)}, 1, "before the run's genesis"},
		{"stored bytes disagree with the row", RunChain{RunID: "run-1", Status: engine.StatusCompleted, NextSeq: 4, Records: recs, Links: func() map[int64]StoredLink {
			l := map[int64]StoredLink{}
			other := append([]engine.RunEventRecord(nil), recs...)
			other[2].Payload = []byte(`{"ok": false}`)
			for i, c := range Chain(Genesis, other) {
				l[other[i].RunSeq] = StoredLink{PrevHash: c.PrevHash, Hash: c.Hash, EventBytes: c.EventBytes, PayloadSHA256: c.PayloadSHA256, PayloadText: string(other[i].Payload)}
			}
			return l
		}()}, 3, "payload differs from its payload_text"},
		{"stored bytes and payload text as appended", RunChain{RunID: "run-1", Status: engine.StatusCompleted, NextSeq: 4, Records: reserialised, Links: func() map[int64]StoredLink {
			l := map[int64]StoredLink{}
			for i, c := range Chain(Genesis, recs) {
				l[recs[i].RunSeq] = StoredLink{PrevHash: c.PrevHash, Hash: c.Hash, EventBytes: c.EventBytes, PayloadSHA256: c.PayloadSHA256, PayloadText: string(recs[i].Payload)}
			}
			return l
		}()}, 0, ""},
		// Retention removed run-1's last payload: the digest and the rest
		// of the row still hash to the link.
		{"payload removed by retention", RunChain{RunID: "run-1", Status: engine.StatusCompleted, NextSeq: 4, Retained: true, Records: pruned, Links: chain(recs)}, 0, ""},
		{"payload removed without retention", RunChain{RunID: "run-1", Status: engine.StatusCompleted, NextSeq: 4, Records: pruned, Links: chain(recs)}, 3, "no retention record"},
		{"retained run with an edited payload", RunChain{RunID: "run-1", Status: engine.StatusCompleted, NextSeq: 4, Retained: true, Records: edited, Links: chain(recs)}, 3, "does not hash to its payload_sha256"},
		{"retained run with an edited event type", RunChain{RunID: "run-1", Status: engine.StatusCompleted, NextSeq: 4, Retained: true, Records: retyped, Links: chain(recs)}, 3, "does not hash to its hash"},
		{"payload removed, event type edited", RunChain{RunID: "run-1", Status: engine.StatusCompleted, NextSeq: 4, Retained: true, Records: func() []engine.RunEventRecord {
			r := append([]engine.RunEventRecord(nil), pruned...)
			r[2].EventType = engine.RunFailed
			return r
		}(), Links: chain(recs)}, 3, "does not hash to its hash"},
		{"v1 events verify", RunChain{RunID: "run-1", Status: engine.StatusCompleted, NextSeq: 4, Records: recs, Links: chainV1(recs)}, 0, ""},
		{"v1 event without its payload", RunChain{RunID: "run-1", Status: engine.StatusCompleted, NextSeq: 4, Retained: true, Records: pruned, Links: chainV1(recs)}, 3, "v1 event whose payload was removed"},
		{"event after the terminal event", RunChain{RunID: "run-1", Status: engine.StatusCompleted, NextSeq: 5, Records: after, Links: chain(after)}, 4, "after the run's terminal event"},
		{"event beyond next_seq", RunChain{RunID: "run-1", Status: engine.StatusRunning, NextSeq: 3, Records: recs, Links: chain(recs)}, 3, "beyond the run's sequence row"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := VerifyRun(c.rc)
			switch {
			case c.substr == "" && p != nil:
				t.Fatalf("problem %v", p)
			case c.substr != "" && (p == nil || p.RunSeq != c.seq || !strings.Contains(p.Error(), c.substr)):
				t.Fatalf("problem %v, want runSeq %d and %q", p, c.seq, c.substr)
			}
		})
	}
}

// TestTreeAndCheckpoints: roots and inclusion proofs of every size up to
// 17 check with tlog, and a signed checkpoint opens only with its key.
func TestTreeAndCheckpoints(t *testing.T) {
	var tree Tree
	var leaves []tlog.Hash
	for i := range 17 {
		h := sha256.Sum256([]byte{byte(i)})
		if err := tree.Add(hex.EncodeToString(h[:])); err != nil {
			t.Fatal(err)
		}
		lh, _ := LeafHash(hex.EncodeToString(h[:]))
		leaves = append(leaves, lh)
		n := tree.Size()
		root, err := tree.Root(n)
		if err != nil {
			t.Fatal(err)
		}
		for j := int64(0); j < n; j++ {
			p, err := tlog.ProveRecord(n, j, &tree)
			if err != nil || tlog.CheckRecord(p, n, root, j, leaves[j]) != nil {
				t.Fatalf("size %d leaf %d: proof %v", n, j, err)
			}
		}
	}
	skey, vkey, err := GenerateKey(bytes.NewReader(bytes.Repeat([]byte{3}, ed25519.SeedSize)), "acme.audit")
	if err != nil {
		t.Fatal(err)
	}
	if pk, err := PublicKey(skey); err != nil || pk != vkey {
		t.Fatalf("PublicKey = %q %v, want %q", pk, err, vkey)
	}
	root, _ := tree.Root(17)
	cp, err := Sign(skey, 17, root)
	if err != nil || !strings.HasPrefix(string(cp.Note), "acme.audit\n17\n") {
		t.Fatalf("Sign: %q %v", cp.Note, err)
	}
	if got, p := VerifyCheckpoint(&tree, cp.Note, vkey, "cp"); p != nil || got.Size != 17 || got.Root != root {
		t.Fatalf("VerifyCheckpoint: %+v %v", got, p)
	}
	_, other, _ := GenerateKey(bytes.NewReader(bytes.Repeat([]byte{4}, ed25519.SeedSize)), "acme.audit")
	if _, p := VerifyCheckpoint(&tree, cp.Note, other, "cp"); p == nil || !strings.Contains(p.What, "not signed by the pinned key") {
		t.Fatalf("another key: %v", p)
	}
	var shorter Tree
	if err := shorter.Add(hex.EncodeToString(make([]byte, 32))); err != nil {
		t.Fatal(err)
	}
	if _, p := VerifyCheckpoint(&shorter, cp.Note, vkey, "cp"); p == nil || !strings.Contains(p.What, "events were removed") {
		t.Fatalf("shorter log: %v", p)
	}
}

func TestSameJSON(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{`{"a":1.0,"b":[1e2,"x"]}`, `{"b":[100,"x"],"a":1}`, true},
		{`{"a":1}`, `{"a":2}`, false},
		{`{"a":"1"}`, `{"a":1}`, false},
		{`null`, ``, true},
		{`{"a":null}`, `{}`, false},
		{`[1,2]`, `[2,1]`, false},
		{`{"n":123456789012345678901234567890}`, `{"n":123456789012345678901234567891}`, false},
	} {
		if got := sameJSON([]byte(c.a), []byte(c.b)); got != c.same {
			t.Errorf("sameJSON(%s, %s) = %v", c.a, c.b, got)
		}
	}
}

// TestCheckIndexed: an event missing from the log is a break when a later
// event of its run is there, or when it is more than IndexGrace older than
// an indexed event; otherwise it is only newer than the last indexing.
func TestCheckIndexed(t *testing.T) {
	base := time.Date(2026, 4, 1, 8, 0, 0, 0, time.UTC).UnixNano()
	run := func(persisted ...time.Duration) *runResult {
		r := &runResult{}
		for _, d := range persisted {
			r.chained = append(r.chained, true)
			r.hashes = append(r.hashes, tlog.Hash{})
			r.persisted = append(r.persisted, base+int64(d))
		}
		return r
	}
	entry := func(i int64, run string, seq int64) LogEntry { return LogEntry{Index: i, RunID: run, RunSeq: seq} }
	cases := []struct {
		name    string
		results map[string]*runResult
		entries []LogEntry
		run     string
		seq     int64
		substr  string
	}{
		{"all indexed", map[string]*runResult{"a": run(0, time.Second)}, []LogEntry{entry(0, "a", 1), entry(1, "a", 2)}, "", 0, ""},
		{"a run's tail not indexed yet", map[string]*runResult{"a": run(0, time.Second)}, []LogEntry{entry(0, "a", 1)}, "", 0, ""},
		{"another run appended since", map[string]*runResult{"a": run(0), "b": run(time.Minute)}, []LogEntry{entry(0, "a", 1)}, "", 0, ""},
		{"a concurrent append committed late", map[string]*runResult{"a": run(time.Minute), "b": run(0)}, []LogEntry{entry(0, "a", 1)}, "", 0, ""},
		{"an entry removed before a later one of its run", map[string]*runResult{"a": run(0, time.Second, 2*time.Second)}, []LogEntry{entry(0, "a", 1), entry(1, "a", 3)}, "a", 2, "later runSeq 3 is (at index 1)"},
		{"an event far older than the log's newest", map[string]*runResult{"a": run(2 * time.Hour), "b": run(0)}, []LogEntry{entry(0, "a", 1)}, "b", 1, "more than 1h0m0s before"},
		{"an event twice in the log", map[string]*runResult{"a": run(0)}, []LogEntry{entry(0, "a", 1), entry(1, "a", 1)}, "a", 1, "twice, at index 0 and 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := checkIndexed(c.entries, c.results)
			switch {
			case c.substr == "" && p != nil:
				t.Fatalf("problem %v", p)
			case c.substr != "" && (p == nil || p.RunID != c.run || p.RunSeq != c.seq || !strings.Contains(p.What, c.substr)):
				t.Fatalf("problem %v, want run %s runSeq %d and %q", p, c.run, c.seq, c.substr)
			}
		})
	}
}
