package audit

import (
	"bytes"
	"crypto/ed25519"
	"strings"
	"testing"
	"time"
)

// TestRetentionRecordNotes: a record round-trips through its signed note,
// only with the pinned key, and a record and a checkpoint never pass for
// each other.
func TestRetentionRecordNotes(t *testing.T) {
	skey, vkey, err := GenerateKey(bytes.NewReader(bytes.Repeat([]byte{5}, ed25519.SeedSize)), "acme.audit")
	if err != nil {
		t.Fatal(err)
	}
	_, other, _ := GenerateKey(bytes.NewReader(bytes.Repeat([]byte{6}, ed25519.SeedSize)), "acme.audit")
	r := Retention{Seq: 3, RunID: "run-1", OlderThan: "720h0m0s", Cutoff: "2026-03-02T00:00:00.000000000Z", RemovedAt: "2026-04-01T00:00:00.000000000Z", Covered: 42}
	note, err := SignRetention(skey, r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(note), "dvtrun-retention-v1\n3\nrun-1\n720h0m0s\n2026-03-02T00:00:00.000000000Z\n2026-04-01T00:00:00.000000000Z\n42\n\n— acme.audit ") {
		t.Fatalf("note text:\n%s", note)
	}
	got, err := OpenRetention(note, vkey)
	if err != nil || got.Seq != 3 || got.RunID != "run-1" || got.Covered != 42 || got.OlderThan != r.OlderThan || got.Cutoff != r.Cutoff || got.RemovedAt != r.RemovedAt {
		t.Fatalf("open: %+v %v", got, err)
	}
	if _, err := OpenRetention(note, other); err == nil || !strings.Contains(err.Error(), "not signed by the pinned key") {
		t.Fatalf("another key: %v", err)
	}
	if _, err := Open(note, vkey); err == nil {
		t.Fatal("a retention record opens as a checkpoint")
	}
	cp, err := Sign(skey, 10, [32]byte{1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenRetention(cp.Note, vkey); err == nil || !strings.Contains(err.Error(), "not a dvtrun-retention-v1 record") {
		t.Fatalf("a checkpoint opens as a retention record: %v", err)
	}
	if _, err := SignRetention(skey, Retention{RunID: "run\n1"}); err == nil {
		t.Fatal("a run id with a line feed signs")
	}
	if RetentionLeaf(note) == RetentionLeaf(cp.Note) || len(RetentionLeaf(note)) != 64 {
		t.Fatal("leaf hashes")
	}
}

// TestRetainedCovered: the evidence a retention row needs, case by case,
// on a log of run-1's three events and run-2's one (indexes 0-3), a
// checkpoint of 4, the record at index 4 and a checkpoint of 5 over it.
func TestRetainedCovered(t *testing.T) {
	skey, vkey, err := GenerateKey(bytes.NewReader(bytes.Repeat([]byte{5}, ed25519.SeedSize)), "acme.audit")
	if err != nil {
		t.Fatal(err)
	}
	_, other, _ := GenerateKey(bytes.NewReader(bytes.Repeat([]byte{6}, ed25519.SeedSize)), "acme.audit")
	ended := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	base := Retention{Seq: 1, RunID: "run-1", OlderThan: "720h0m0s", Cutoff: "2026-03-02T00:00:00.000000000Z", RemovedAt: "2026-04-01T00:00:00.000000000Z", Covered: 4}
	signed := func(r Retention) Retention {
		n, err := SignRetention(skey, r)
		if err != nil {
			t.Fatal(err)
		}
		r.Note = n
		return r
	}
	entries := func(recordAt int64) []LogEntry {
		es := []LogEntry{{0, "run-1", 1, ""}, {1, "run-2", 1, ""}, {2, "run-1", 2, ""}, {3, "run-1", 3, ""}}
		if recordAt >= 0 {
			es = append(es[:recordAt], append([]LogEntry{{recordAt, RetentionRunID, 1, ""}}, es[recordAt:]...)...)
			for i := range es {
				es[i].Index = int64(i)
			}
		}
		return es
	}
	run := retainedRun{chained: 3, removed: 3, ended: ended}
	cases := []struct {
		name    string
		run     retainedRun
		rows    []Retention
		entries []LogEntry
		latest  int64
		vkey    string
		want    string // "" accepted
		pending bool
	}{
		{"signed, logged, covered", run, []Retention{signed(base)}, entries(4), 5, vkey, "", false},
		{"no record", run, []Retention{{RunID: "run-1", RemovedAt: base.RemovedAt, Cutoff: base.Cutoff}}, entries(4), 5, vkey, "has no signed record", false},
		{"two rows", run, []Retention{signed(base), signed(base)}, entries(4), 5, vkey, "2 rows", false},
		{"another key", run, []Retention{signed(base)}, entries(4), 5, other, "not signed by the pinned key", false},
		{"no key pinned", run, []Retention{signed(base)}, entries(4), 5, "", "no public key", false},
		{"row edited", run, []Retention{func() Retention { r := signed(base); r.Cutoff = "2027-01-01T00:00:00.000000000Z"; return r }()}, entries(4), 5, vkey, "differs from its signed record", false},
		{"record of another run", run, []Retention{func() Retention {
			r := signed(base)
			r.RunID = "run-1"
			n, _ := SignRetention(skey, Retention{Seq: 1, RunID: "run-2", OlderThan: base.OlderThan, Cutoff: base.Cutoff, RemovedAt: base.RemovedAt, Covered: 3})
			r.Note = n
			return r
		}()}, entries(4), 5, vkey, "names run run-2", false},
		{"in the log twice", run, []Retention{signed(base)}, append(entries(4), LogEntry{5, RetentionRunID, 1, ""}), 6, vkey, "in the global log twice", false},
		{"not in the log", run, []Retention{signed(base)}, entries(-1), 4, vkey, "not in the global log", false},
		{"events after the covered checkpoint", run, []Retention{signed(func() Retention { r := base; r.Covered = 3; return r }())}, entries(4), 5, vkey, "were not all in the checkpoint of 3 events", false},
		{"an event missing from the log", retainedRun{chained: 4, removed: 3, ended: ended}, []Retention{signed(base)}, entries(4), 5, vkey, "3 of 4 chained events", false},
		{"claims a checkpoint after it", run, []Retention{signed(func() Retention { r := base; r.Covered = 5; return r }())}, entries(4), 6, vkey, "claims a checkpoint of 5 events", false},
		{"cutoff not the policy", run, []Retention{signed(func() Retention { r := base; r.OlderThan = "1h0m0s"; return r }())}, entries(4), 5, vkey, "is not 1h0m0s before", false},
		{"run ended after the cutoff", retainedRun{chained: 3, removed: 3, ended: ended.Add(48 * time.Hour)}, []Retention{signed(base)}, entries(4), 5, vkey, "had not ended before", false},
		{"policy does not parse", run, []Retention{signed(func() Retention { r := base; r.OlderThan = "a month"; return r }())}, entries(4), 5, vkey, "does not parse", false},
		{"record unsigned, payloads gone", run, []Retention{signed(base)}, entries(4), 4, vkey, "3 payloads removed, but its record at log index 4 is in no verified checkpoint", false},
		{"record unsigned, payloads kept: pending", retainedRun{chained: 3, ended: ended}, []Retention{signed(base)}, entries(4), 4, vkey, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, pending := retainedCovered(c.entries, map[string]retainedRun{"run-1": c.run}, c.rows, &Checkpoint{Size: c.latest}, c.vkey)
			switch {
			case c.want == "" && p != nil:
				t.Fatalf("refused: %v", p)
			case c.want != "" && (p == nil || p.RunID != "run-1" || !strings.Contains(p.What, c.want)):
				t.Fatalf("got %v, want run-1 named and %q", p, c.want)
			case c.want == "" && pending["run-1"] != c.pending:
				t.Fatalf("pending %v, want %v", pending, c.pending)
			}
		})
	}
}

// TestGenesisChecked: a genesis row is refused when the log holds an event
// it would un-chain, or when it starts beyond the run's events.
func TestGenesisChecked(t *testing.T) {
	log := []LogEntry{{0, "run-1", 3, ""}, {1, "run-2", 1, ""}, {2, "run-2", 2, ""}}
	cases := []struct {
		name  string
		heads []RunHead
		want  string
	}{
		{"no genesis", []RunHead{{RunID: "run-2", NextSeq: 3, FirstSeq: 1}}, ""},
		{"a run from before the chain", []RunHead{{RunID: "run-1", NextSeq: 4, FirstSeq: 3}}, ""},
		{"a genesis un-chaining logged events", []RunHead{{RunID: "run-2", NextSeq: 3, FirstSeq: 3}}, "genesis row says runSeq below 3 are unchained, but the global log holds this one at index 1"},
		{"a genesis beyond the run", []RunHead{{RunID: "run-1", NextSeq: 4, FirstSeq: 9}}, "beyond the run's 3 events"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := genesisChecked(c.heads, log)
			if (c.want == "") != (p == nil) || p != nil && !strings.Contains(p.What, c.want) {
				t.Fatalf("got %v, want %q", p, c.want)
			}
		})
	}
}

// TestPayloadRemovable: only a chained v2 event (a digest kept in the row)
// may lose its payload; a v1 hash covers the payload itself.
func TestPayloadRemovable(t *testing.T) {
	for _, c := range []struct {
		name string
		l    StoredLink
		want bool
	}{
		{"v2 with a digest", StoredLink{Hash: "h", PayloadSHA256: "d"}, true},
		{"v1 (no digest)", StoredLink{Hash: "h"}, false},
		{"unchained", StoredLink{PayloadSHA256: "d"}, false},
	} {
		if got := PayloadRemovable(c.l); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
