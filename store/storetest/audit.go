package storetest

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/audit"
	"github.com/dvtrun/dvtrun/store"
)

// AuditStore is a state store with the tamper-evident log.
type AuditStore interface {
	store.Store
	audit.Store
	// RetentionLog records retention and removes payloads
	// (store.AuditSQL; audit.Retainer orders the two).
	audit.RetentionLog
}

// AuditBackend is one database under the tamper-evidence suite.
type AuditBackend struct {
	// Fresh opens a handle on a new, empty database.
	Fresh func(t *testing.T) AuditStore
	// Tamper runs statements on the store's database as its owner would:
	// past the append-only guards (triggers), as one script.
	Tamper func(t *testing.T, s AuditStore, stmts ...string)
	// Guarded runs one statement with the guards in place; nil when the
	// dialect has none to enforce (Snowflake: grants, see audit doctor).
	Guarded func(s AuditStore, stmt string) error
	// JSON is the SQL expression of a JSON payload literal (already quoted
	// text, e.g. '{"a":1}'): PARSE_JSON on Snowflake.
	JSON func(quoted string) string
	// NullPayloads is the statement that removes a run's payloads (the run
	// id quoted); nil: UPDATE dvt_run_events SET payload = NULL.
	NullPayloads func(quotedRunID string) string
	// Rows runs a query and returns its first column as text; nil when the
	// dialect has no dvt_audit_chain view (no SHA-256 in SQL: SQLite).
	Rows func(t *testing.T, s AuditStore, query string) []string
}

// TestKey is a fixed signing key for tests (a seed of 32 bytes 0x07) and
// OtherKey a second one, for a checkpoint signed by someone else.
var TestKey, TestPublicKey = fixedKey(0x07, "dvtrun.audit")
var OtherKey, OtherPublicKey = fixedKey(0x09, "dvtrun.audit")

func fixedKey(b byte, name string) (string, string) {
	skey, vkey, err := audit.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{b}, ed25519.SeedSize)), name)
	if err != nil {
		panic(err)
	}
	return skey, vkey
}

// AuditFixture is the content every mutation starts from: run A (five
// events, completed), run B (five events, failed), a checkpoint, and run C
// appended after it (two events, not yet checkpointed).
type AuditFixture struct {
	A, B, C    string
	Checkpoint audit.Checkpoint
	c          *Fixture // C's, to append to it
}

// SeedAudit writes the fixture and checkpoints A and B.
func SeedAudit(t testing.TB, s AuditStore) AuditFixture {
	t.Helper()
	a, b, c := NewFixture(), NewFixture(), NewFixture()
	a.Bootstrap(t, s)
	appendAll(t, s, a, a.Event(engine.StepStarted, "model.x", 1), a.Event(engine.StepCompleted, "model.x", 1))
	appendAll(t, s, a, a.Event(engine.RunCompleted, "", 1))
	b.Bootstrap(t, s)
	appendAll(t, s, b, b.Event(engine.StepStarted, "model.y", 1))
	appendAll(t, s, b, b.Event(engine.StepFailed, "model.y", 1), b.Event(engine.RunFailed, "", 1))
	cp := Checkpoint(t, s)
	c.Bootstrap(t, s)
	return AuditFixture{A: a.Meta.RunID, B: b.Meta.RunID, C: c.Meta.RunID, Checkpoint: cp, c: c}
}

func appendAll(t testing.TB, s store.Store, f *Fixture, evs ...engine.RunEventWrite) {
	t.Helper()
	if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, evs); err != nil {
		t.Fatalf("append: %v", err)
	}
}

// Checkpoint runs a checkpointer over s with TestKey.
func Checkpoint(t testing.TB, s AuditStore) audit.Checkpoint {
	t.Helper()
	c := &audit.Checkpointer{Log: s, SigningKey: TestKey, Now: func() time.Time { return time.Date(2026, 4, 1, 12, 0, 0, 0, time.UTC) }}
	cp, _, err := c.Checkpoint(ctx)
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	return cp
}

// Retain runs retention over s with TestKey at now: runs that ended more
// than olderThan before now.
func Retain(t testing.TB, s AuditStore, now time.Time, olderThan time.Duration) audit.Retained {
	t.Helper()
	r := &audit.Retainer{Log: s, Checkpointer: &audit.Checkpointer{Log: s, SigningKey: TestKey, Now: func() time.Time { return now }}}
	got, err := r.Retain(ctx, olderThan)
	if err != nil {
		t.Fatalf("retain: %v", err)
	}
	return got
}

// RunAudit runs the tamper-evidence suite: an untouched store verifies,
// each mutation an owner of the tables can make is found and named, and
// the guards refuse UPDATE and DELETE where the dialect enforces them.
func RunAudit(t *testing.T, b AuditBackend) {
	t.Run("ChainLinksEveryEvent", func(t *testing.T) {
		s := b.Fresh(t)
		f := SeedAudit(t, s)
		links, err := s.Links(ctx, f.A)
		if err != nil {
			t.Fatal(err)
		}
		recs := events(t, s, f.A)
		prev := audit.Genesis
		for _, r := range recs {
			l := links[r.RunSeq]
			b := l.EventBytes // Snowflake stores them; elsewhere they are the row's columns
			if len(b) == 0 {
				b = audit.EventBytesV2(r, l.PayloadSHA256)
			}
			if l.PrevHash != prev || l.Hash != audit.LinkV2(f.A, r.RunSeq, b, prev) {
				t.Fatalf("runSeq %d: link %+v does not chain after %s in the v2 form", r.RunSeq, l, prev)
			}
			text := r.Payload
			if len(l.EventBytes) > 0 {
				text = []byte(l.PayloadText) // the VARIANT re-serialises
			}
			if l.PayloadSHA256 != audit.PayloadDigest(text) {
				t.Fatalf("runSeq %d: payload_sha256 %q, want the digest of %s", r.RunSeq, l.PayloadSHA256, text)
			}
			prev = l.Hash
		}
		if len(recs) != 5 || f.Checkpoint.Size != 10 {
			t.Fatalf("%d events in A, checkpoint of %d; want 5 and 10", len(recs), f.Checkpoint.Size)
		}
		// A duplicate append adds no link and leaves the head alone.
		if _, err := s.AppendAndEnqueue(ctx, f.A, []engine.RunEventWrite{recs[4].RunEventWrite}); err != nil {
			t.Fatal(err)
		}
		rep := verify(t, s, audit.VerifyOptions{PublicKey: TestPublicKey, External: f.Checkpoint.Note})
		if rep.Problem != nil {
			t.Fatalf("untouched store: %v", rep.Problem)
		}
		if rep.Runs != 3 || rep.Chained != 12 || rep.LogSize != 10 || rep.Checkpoints != 1 {
			t.Fatalf("report %+v, want 3 runs, 12 chained events, a log of 10 and 1 checkpoint", rep)
		}
		// The next checkpoint covers C and is consistent with the first.
		cp := Checkpoint(t, s)
		if cp.Size != 12 {
			t.Fatalf("second checkpoint of %d events, want 12", cp.Size)
		}
		if rep := verify(t, s, audit.VerifyOptions{PublicKey: TestPublicKey, External: f.Checkpoint.Note}); rep.Problem != nil || rep.Checkpoints != 2 {
			t.Fatalf("after the second checkpoint: %+v", rep)
		}
	})

	t.Run("VerifyLive", func(t *testing.T) { testVerifyLive(t, b, true) })
	t.Run("VerifyLiveNoSnapshot", func(t *testing.T) { testVerifyLive(t, b, false) })
	t.Run("VerifyPasses", func(t *testing.T) { testVerifyPasses(t, b) })

	q := func(s string) string { return "'" + s + "'" }
	other, err := audit.Sign(OtherKey, 10, [32]byte{1})
	if err != nil {
		t.Fatal(err)
	}
	mutations := []struct {
		name     string
		stmts    func(f AuditFixture) []string
		external bool
		run      func(f AuditFixture) string // the run named ("" for none)
		seq      int64
		want     string
		// prepare, when set, makes the statements instead of stmts, from
		// the seeded store (a re-chained run's hashes).
		prepare func(t *testing.T, s AuditStore, f AuditFixture) []string
	}{
		{"UpdatePayload", func(f AuditFixture) []string {
			return []string{fmt.Sprintf(`UPDATE dvt_run_events SET payload = %s WHERE run_id = %s AND run_seq = 4`, b.JSON(`'{"rowsAffected":0}'`), q(f.A))}
		}, false, func(f AuditFixture) string { return f.A }, 4, "payload differs from its payload_text|does not hash to its payload_sha256", nil},
		{"UpdateEventType", func(f AuditFixture) []string {
			return []string{fmt.Sprintf(`UPDATE dvt_run_events SET event_type = 'StepCompleted' WHERE run_id = %s AND run_seq = 4`, q(f.B))}
		}, false, func(f AuditFixture) string { return f.B }, 4, "eventType differs|does not hash to its hash", nil},
		{"UpdateHash", func(f AuditFixture) []string {
			return []string{fmt.Sprintf(`UPDATE dvt_run_events SET hash = %s WHERE run_id = %s AND run_seq = 4`, q(strings.Repeat("a", 64)), q(f.A))}
		}, false, func(f AuditFixture) string { return f.A }, 4, "does not match the stored event bytes|does not hash to its hash", nil},
		{"DeleteEvent", func(f AuditFixture) []string {
			return []string{fmt.Sprintf(`DELETE FROM dvt_run_events WHERE run_id = %s AND run_seq = 3`, q(f.A))}
		}, false, func(f AuditFixture) string { return f.A }, 3, "runSeq 3 is missing", nil},
		{"SwapRunSeqs", func(f AuditFixture) []string {
			w := fmt.Sprintf(" WHERE run_id = %s AND run_seq = ", q(f.A))
			return []string{
				"UPDATE dvt_run_events SET run_seq = 100" + w + "2",
				"UPDATE dvt_run_events SET run_seq = 2" + w + "3",
				"UPDATE dvt_run_events SET run_seq = 3" + w + "100",
			}
		}, false, func(f AuditFixture) string { return f.A }, 2, "does not link to the previous event's hash", nil},
		{"TruncateTail", func(f AuditFixture) []string {
			return []string{fmt.Sprintf(`DELETE FROM dvt_run_events WHERE run_id = %s AND run_seq >= 4`, q(f.B))}
		}, false, func(f AuditFixture) string { return f.B }, 4, "runSeq 4 is missing", nil},
		{"TruncateTailAndItsSequenceRow", func(f AuditFixture) []string {
			return []string{
				fmt.Sprintf(`DELETE FROM dvt_run_events WHERE run_id = %s AND run_seq >= 4`, q(f.B)),
				fmt.Sprintf(`UPDATE dvt_run_seq SET next_seq = 4, status = 'RUNNING' WHERE run_id = %s`, q(f.B)),
			}
		}, false, func(f AuditFixture) string { return f.B }, 4, "in the log at index", nil},
		{"DeleteRun", func(f AuditFixture) []string {
			return []string{
				fmt.Sprintf(`DELETE FROM dvt_run_events WHERE run_id = %s`, q(f.A)),
				fmt.Sprintf(`DELETE FROM dvt_run_seq WHERE run_id = %s`, q(f.A)),
				fmt.Sprintf(`DELETE FROM dvt_runs WHERE run_id = %s`, q(f.A)),
			}
		}, false, func(f AuditFixture) string { return f.A }, 1, "in the log at index", nil},
		{"DeleteRunWithItsLogAndCheckpoints", func(f AuditFixture) []string {
			// B's events are the log's last four: without them the stored
			// log is whole again, and only a checkpoint held outside shows
			// what was there.
			return []string{
				fmt.Sprintf(`DELETE FROM dvt_run_events WHERE run_id = %s`, q(f.B)),
				fmt.Sprintf(`DELETE FROM dvt_run_seq WHERE run_id = %s`, q(f.B)),
				fmt.Sprintf(`DELETE FROM dvt_runs WHERE run_id = %s`, q(f.B)),
				fmt.Sprintf(`DELETE FROM dvt_audit_log WHERE run_id = %s`, q(f.B)),
				`DELETE FROM dvt_audit_checkpoints`,
			}
		}, true, func(AuditFixture) string { return "" }, 0, "covers 10 events but the log holds 5", nil},
		{"ReplaceCheckpoint", func(f AuditFixture) []string {
			return []string{fmt.Sprintf(`UPDATE dvt_audit_checkpoints SET note = %s WHERE tree_size = 10`, q(strings.ReplaceAll(string(other.Note), "'", "''")))}
		}, false, func(AuditFixture) string { return "" }, 0, "not signed by the pinned key", nil},
		{"DeleteSequenceRow", func(f AuditFixture) []string {
			return []string{fmt.Sprintf(`DELETE FROM dvt_run_seq WHERE run_id = %s`, q(f.A))}
		}, false, func(f AuditFixture) string { return f.A }, 1, "no sequence row", nil},
		{"DeleteSequenceRowAndEditPayload", func(f AuditFixture) []string {
			return []string{
				fmt.Sprintf(`DELETE FROM dvt_run_seq WHERE run_id = %s`, q(f.B)),
				fmt.Sprintf(`UPDATE dvt_run_events SET payload = %s WHERE run_id = %s AND run_seq = 4`, b.JSON(`'{"rowsAffected":0}'`), q(f.B)),
			}
		}, false, func(f AuditFixture) string { return f.B }, 1, "no sequence row", nil},
		{"SequenceRowHeadReplaced", func(f AuditFixture) []string {
			return []string{fmt.Sprintf(`UPDATE dvt_run_seq SET last_hash = %s WHERE run_id = %s`, q(strings.Repeat("a", 64)), q(f.A))}
		}, false, func(f AuditFixture) string { return f.A }, 5, "the sequence row's last_hash aaaaaaaaaaaa… is not the chain's head", nil},
		{"DeleteRunsRow", func(f AuditFixture) []string {
			return []string{fmt.Sprintf(`DELETE FROM dvt_runs WHERE run_id = %s`, q(f.A))}
		}, false, func(f AuditFixture) string { return f.A }, 1, "no dvt_runs row", nil},
		{"ChainedEventAfterTheTerminalEvent", nil, false, func(f AuditFixture) string { return f.A }, 6, "after the run's terminal event",
			func(t *testing.T, s AuditStore, f AuditFixture) []string {
				return append(forgeEvent(t, s, f.A), fmt.Sprintf(`UPDATE dvt_run_seq SET next_seq = 7 WHERE run_id = %s`, q(f.A)))
			}},
		{"ChainedEventBeyondNextSeq", nil, false, func(f AuditFixture) string { return f.C }, 3, "beyond the run's sequence row",
			func(t *testing.T, s AuditStore, f AuditFixture) []string { return forgeEvent(t, s, f.C) }},
		{"EventMissingFromTheLog", func(f AuditFixture) []string {
			return []string{fmt.Sprintf(`DELETE FROM dvt_audit_log WHERE run_id = %s AND run_seq = 4`, q(f.A))}
		}, false, func(f AuditFixture) string { return f.A }, 4, "not in the global log, though the run's later runSeq 5 is", nil},
		{"ReChainedRun", nil, false, func(f AuditFixture) string { return f.B }, 4, "the log's hash at index 8 is .*, the event's row hashes to",
			func(t *testing.T, s AuditStore, f AuditFixture) []string {
				stmts, _ := rechain(t, s, f.B, 4, engine.StepCompleted)
				return stmts
			}},
		{"ReChainedRunAndLog", nil, false, func(f AuditFixture) string { return f.A }, 1, "stored checkpoint of size 10: .*departs from the signed tree at log indexes 0 to 9",
			func(t *testing.T, s AuditStore, f AuditFixture) []string {
				stmts, log := rechain(t, s, f.B, 4, engine.StepCompleted)
				return append(stmts, log...)
			}},
		{"ExternalCheckpointOlderThanTheStoresNewest", nil, true, func(f AuditFixture) string { return f.C }, 2, "stored checkpoint of size 12: .*departs from the signed tree at log index 11: ",
			func(t *testing.T, s AuditStore, f AuditFixture) []string {
				// C's two events are indexed and signed at 12, and a
				// checkpoint of 11 was taken between them; the auditor's
				// outside copy is the older one of 10. C's runSeq 2
				// re-chained with its log entry: the external checkpoint
				// and the one of 11 still match, the stored 12 does not.
				Checkpoint(t, s)
				signPrefix(t, s, 11)
				stmts, log := rechain(t, s, f.C, 2, engine.RunCancelled)
				return append(stmts, log...)
			}},
		{"PayloadAndItsDigestEdited", nil, false, func(f AuditFixture) string { return f.A }, 4, "does not hash to its hash|payload_sha256 differs from the hashed event bytes",
			func(t *testing.T, s AuditStore, f AuditFixture) []string {
				text := `{"rowsAffected":0}`
				set := fmt.Sprintf(`payload = %s, payload_sha256 = %s`, b.JSON(q(text)), q(audit.PayloadDigest([]byte(text))))
				if storesBytes(t, s, f.A) {
					set += ", payload_text = " + q(text)
				}
				return []string{fmt.Sprintf(`UPDATE dvt_run_events SET %s WHERE run_id = %s AND run_seq = 4`, set, q(f.A))}
			}},
		{"EventTypeEditedAfterThePayloadWasRemoved", nil, false, func(f AuditFixture) string { return f.B }, 4, "does not hash to its hash|eventType differs from the hashed event bytes",
			func(t *testing.T, s AuditStore, f AuditFixture) []string {
				// The forged retention's core: with the payload gone, the
				// event type is still covered by the hash.
				set := `payload = NULL, event_type = 'StepCompleted'`
				if storesBytes(t, s, f.B) {
					set += ", payload_text = NULL"
				}
				return []string{fmt.Sprintf(`UPDATE dvt_run_events SET %s WHERE run_id = %s AND run_seq = 4`, set, q(f.B))}
			}},
	}
	for _, m := range mutations {
		t.Run("Mutation"+m.name, func(t *testing.T) {
			s := b.Fresh(t)
			f := SeedAudit(t, s)
			if m.prepare != nil {
				b.Tamper(t, s, m.prepare(t, s, f)...)
			} else {
				b.Tamper(t, s, m.stmts(f)...)
			}
			o := audit.VerifyOptions{PublicKey: TestPublicKey}
			// A rewrite with the stored log and checkpoints: only the
			// checkpoint held outside shows it.
			if m.external && m.name == "DeleteRunWithItsLogAndCheckpoints" {
				if rep := verify(t, s, o); rep.Problem != nil {
					t.Fatalf("without the external checkpoint the rewritten store verifies (the test's premise): %v", rep.Problem)
				}
			}
			if m.external {
				o.External = f.Checkpoint.Note
			}
			rep := verify(t, s, o)
			p := rep.Problem
			if p == nil {
				t.Fatal("verify found nothing")
			}
			if p.RunID != m.run(f) || p.RunSeq != m.seq || !regexp.MustCompile(m.want).MatchString(p.Error()) {
				t.Fatalf("verify: %v\nwant run %q runSeq %d and %q", p, m.run(f), m.seq, m.want)
			}
		})
	}

	t.Run("ChainViewRecomputesEveryLink", func(t *testing.T) {
		if b.Rows == nil {
			t.Skip("this dialect has no SHA-256 in SQL: audit verify is the check")
		}
		s := b.Fresh(t)
		f := SeedAudit(t, s)
		const broken = `SELECT run_id || ':' || CAST(run_seq AS VARCHAR) FROM dvt_audit_chain WHERE NOT ok ORDER BY run_id, run_seq`
		if ok := b.Rows(t, s, `SELECT CAST(COUNT(*) AS VARCHAR) FROM dvt_audit_chain WHERE ok`); len(ok) != 1 || ok[0] != "12" {
			t.Fatalf("links ok: %v, want all 12", ok)
		}
		if got := b.Rows(t, s, broken); len(got) != 0 {
			t.Fatalf("untouched chain: broken at %v", got)
		}
		// A hash replaced breaks its own row and the next one's link.
		b.Tamper(t, s, fmt.Sprintf(`UPDATE dvt_run_events SET hash = %s WHERE run_id = %s AND run_seq = 4`, q(strings.Repeat("a", 64)), q(f.A)))
		if got := b.Rows(t, s, broken); len(got) != 2 || got[0] != f.A+":4" || got[1] != f.A+":5" {
			t.Fatalf("replaced hash: broken at %v, want [%s:4 %s:5]", got, f.A, f.A)
		}
		if got := b.Rows(t, s, `SELECT CAST(COUNT(*) AS VARCHAR) FROM dvt_audit_chain WHERE chain_form = 'v2'`); len(got) != 1 || got[0] != "11" {
			t.Fatalf("v2 links: %v, want the 11 whose hash was not replaced", got)
		}
		// A payload edited: the v2 hash still recomputes (it covers the
		// digest), the digest no longer does. On Snowflake the digest is
		// over payload_text (that the VARIANT says the same is verify's).
		col, val := "payload", b.JSON(`'{"rowsAffected":0}'`)
		if storesBytes(t, s, f.B) {
			col, val = "payload_text", `'{"rowsAffected":0}'`
		}
		b.Tamper(t, s, fmt.Sprintf(`UPDATE dvt_run_events SET %s = %s WHERE run_id = %s AND run_seq = 4`, col, val, q(f.B)))
		if got := b.Rows(t, s, broken); len(got) != 3 || !slices.Contains(got, f.B+":4") {
			t.Fatalf("edited payload: broken at %v, want %s:4 with A's two", got, f.B)
		}
	})

	t.Run("V1EventsStillVerify", func(t *testing.T) {
		// Events chained before v2 keep their v1 links: C's two events
		// rewritten as the v1 append wrote them verify, and are counted;
		// without its payload a v1 event proves nothing and is a break.
		s := b.Fresh(t)
		f := SeedAudit(t, s)
		recs, links := chainedRecords(t, s, f.C)
		bytes := storesBytes(t, s, f.C)
		recs[1].Payload = []byte(`{"rowsAffected":1}`) // v1 hashes a payload itself
		if len(links) != 2 {
			t.Fatalf("C: %d links, want 2", len(links))
		}
		stmts, _ := asV1(b, f.C, recs, bytes)
		b.Tamper(t, s, stmts...)
		rep := verify(t, s, audit.VerifyOptions{PublicKey: TestPublicKey, External: f.Checkpoint.Note})
		if rep.Problem != nil || rep.V1 != 2 || rep.Chained != 12 {
			t.Fatalf("v1 events: %+v, want verified with 2 of 12 in v1", rep)
		}
		set := "payload = NULL"
		if bytes {
			set += ", event_bytes = NULL"
		}
		b.Tamper(t, s,
			fmt.Sprintf(`INSERT INTO dvt_audit_retention (run_id, removed_at, cutoff) VALUES (%s, '2026-05-01T00:00:00.000000000Z', 'x')`, q(f.C)),
			fmt.Sprintf(`UPDATE dvt_run_events SET %s WHERE run_id = %s AND run_seq = 2`, set, q(f.C)))
		p := verify(t, s, audit.VerifyOptions{PublicKey: TestPublicKey}).Problem
		if p == nil || p.RunID != f.C || p.RunSeq != 2 || !regexp.MustCompile("v1 event whose payload was removed|in either form").MatchString(p.What) {
			t.Fatalf("a v1 payload removed: %v, want run %s runSeq 2 named", p, f.C)
		}
	})

	t.Run("UntouchedWithCheckpointsOfEverySize", func(t *testing.T) {
		s := b.Fresh(t)
		f := SeedAudit(t, s)
		Checkpoint(t, s)
		signPrefix(t, s, 11)
		rep := verify(t, s, audit.VerifyOptions{PublicKey: TestPublicKey, External: f.Checkpoint.Note})
		if rep.Problem != nil || rep.Checkpoints != 3 || rep.External == nil || rep.External.Size != 10 || rep.Latest.Size != 12 || rep.Unindexed != 0 {
			t.Fatalf("untouched store with checkpoints of 10, 11 and 12: %+v", rep)
		}
	})

	t.Run("RetentionKeepsTheProof", func(t *testing.T) { testRetention(t, b) })
	t.Run("RetentionSkipsV1Runs", func(t *testing.T) { testRetentionSkipsV1(t, b) })
	t.Run("ForgedRetention", func(t *testing.T) { testForgedRetention(t, b) })
	t.Run("RetentionInterruptedIsFinished", func(t *testing.T) { testRetentionCrash(t, b) })
	t.Run("GenesisForAChainedRun", func(t *testing.T) { testGenesisForChainedRun(t, b) })
	t.Run("GuardsOnSequenceRunsRetentionGenesis", func(t *testing.T) { testNewGuards(t, b) })

	t.Run("GuardsRefuseUpdateAndDelete", func(t *testing.T) {
		if b.Guarded == nil {
			t.Skip("this dialect enforces append-only by grants (dvtrun audit doctor), not in the store")
		}
		s := b.Fresh(t)
		f := SeedAudit(t, s)
		for _, stmt := range []string{
			fmt.Sprintf(`UPDATE dvt_run_events SET payload = NULL WHERE run_id = %s`, q(f.A)),
			fmt.Sprintf(`DELETE FROM dvt_run_events WHERE run_id = %s AND run_seq = 5`, q(f.A)),
			fmt.Sprintf(`UPDATE dvt_audit_log SET hash = 'x' WHERE run_id = %s`, q(f.A)),
			fmt.Sprintf(`DELETE FROM dvt_audit_log WHERE run_id = %s`, q(f.A)),
			`UPDATE dvt_audit_checkpoints SET note = 'x'`,
			`DELETE FROM dvt_audit_checkpoints`,
		} {
			err := b.Guarded(s, stmt)
			if err == nil || !strings.Contains(err.Error(), "append-only") {
				t.Errorf("%s: %v, want refused as append-only", stmt, err)
			}
		}
		if rep := verify(t, s, audit.VerifyOptions{PublicKey: TestPublicKey}); rep.Problem != nil {
			t.Fatalf("after the refused statements: %v", rep.Problem)
		}
	})
}

// testRetention: retention removes the payloads of the ended,
// checkpointed runs and nothing else; verify still proves the log and names
// those runs; the guards let exactly that change through; and a run marked
// retained without a checkpoint covering it, or a retained run's hash
// changed, still shows.
func testRetention(t *testing.T, b AuditBackend) {
	q := func(s string) string { return "'" + s + "'" }
	s := b.Fresh(t)
	f := SeedAudit(t, s)
	before := map[string]map[int64]audit.StoredLink{}
	for _, run := range []string{f.A, f.B} {
		l, err := s.Links(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		before[run] = l
	}
	cBefore := events(t, s, f.C)
	// Now is far ahead of the store's clock, so a policy of an hour takes
	// every ended run and one of two centuries none.
	now := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := Retain(t, s, now, 200*365*24*time.Hour); got.Recorded != 0 || got.Events != 0 {
		t.Fatalf("retain with a cutoff before every run: %+v; want none", got)
	}
	var withPayload int64
	for _, run := range []string{f.A, f.B} {
		for _, r := range events(t, s, run) {
			if p := strings.TrimSpace(string(r.Payload)); p != "" && p != "null" {
				withPayload++
			}
		}
	}
	got := Retain(t, s, now, time.Hour)
	if got.Recorded != 2 || got.Runs != 2 || got.Events < withPayload || got.Events > 10 || withPayload == 0 || !got.Fresh || got.Checkpoint.Size != 14 {
		t.Fatalf("retain: %+v; want A and B recorded, a checkpoint of 14 signed (10 events, 2 records, C's 2) and their %d payloads removed (C has not ended and no checkpoint covers it)", got, withPayload)
	}
	if got := Retain(t, s, now, time.Hour); got.Recorded != 0 || got.Runs != 0 || got.Events != 0 {
		t.Fatalf("retain again: %+v; want nothing left to do", got)
	}
	for _, run := range []string{f.A, f.B} {
		after, err := s.Links(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range events(t, s, run) {
			if p := strings.TrimSpace(string(r.Payload)); p != "" && p != "null" {
				t.Fatalf("run %s runSeq %d keeps its payload %s", run, r.RunSeq, p)
			}
			if after[r.RunSeq].Hash != before[run][r.RunSeq].Hash || after[r.RunSeq].PrevHash != before[run][r.RunSeq].PrevHash {
				t.Fatalf("run %s runSeq %d: the link changed", run, r.RunSeq)
			}
		}
	}
	if c := events(t, s, f.C); len(c) != len(cBefore) || fmt.Sprint(c) != fmt.Sprint(cBefore) {
		t.Fatalf("run C changed: %+v, was %+v", c, cBefore)
	}
	rep := verify(t, s, audit.VerifyOptions{PublicKey: TestPublicKey, External: f.Checkpoint.Note})
	if rep.Problem != nil {
		t.Fatalf("after retention: %v", rep.Problem)
	}
	named := map[string]bool{}
	for _, h := range rep.Retained {
		named[h.RunID] = h.RetainedAt == now.Format(engine.TimeFormat)
	}
	if len(named) != 2 || !named[f.A] || !named[f.B] {
		t.Fatalf("verify names %+v as retained, want A and B at %s", rep.Retained, now.Format(engine.TimeFormat))
	}
	if b.Rows != nil {
		if got := b.Rows(t, s, `SELECT CAST(COUNT(*) AS VARCHAR) FROM dvt_audit_chain WHERE NOT ok OR ok IS NULL`); len(got) != 1 || got[0] != "0" {
			t.Fatalf("chain view after retention: %v links not ok", got)
		}
		if got := b.Rows(t, s, `SELECT CAST(COUNT(*) AS VARCHAR) FROM dvt_audit_chain WHERE retained`); len(got) != 1 || got[0] != "10" {
			t.Fatalf("chain view: %v retained links, want A's and B's 10", got)
		}
	}
	if b.Guarded != nil {
		for _, stmt := range []string{
			fmt.Sprintf(`UPDATE dvt_run_events SET payload = NULL WHERE run_id = %s`, q(f.C)),
			fmt.Sprintf(`UPDATE dvt_run_events SET event_type = 'StepFailed' WHERE run_id = %s AND run_seq = 3`, q(f.A)),
			fmt.Sprintf(`UPDATE dvt_run_events SET payload = NULL, hash = %s WHERE run_id = %s AND run_seq = 4`, q(strings.Repeat("a", 64)), q(f.A)),
			// The digest stays: the retention path only removes the payload.
			fmt.Sprintf(`UPDATE dvt_run_events SET payload = NULL, payload_sha256 = NULL WHERE run_id = %s AND run_seq = 4`, q(f.A)),
			fmt.Sprintf(`DELETE FROM dvt_run_events WHERE run_id = %s`, q(f.A)),
			fmt.Sprintf(`UPDATE dvt_audit_retention SET removed_at = 'x' WHERE run_id = %s`, q(f.A)),
			`DELETE FROM dvt_audit_retention`,
			fmt.Sprintf(`INSERT INTO dvt_audit_retention (run_id, removed_at, cutoff) VALUES (%s, 'x', 'x')`, q(f.C)),
		} {
			if err := b.Guarded(s, stmt); err == nil || !strings.Contains(err.Error(), "append-only") {
				t.Errorf("%s: %v, want refused as append-only", stmt, err)
			}
		}
		// What retention does is let through: the payload of a retained
		// run set to NULL, again.
		if err := b.Guarded(s, fmt.Sprintf(`UPDATE dvt_run_events SET payload = NULL WHERE run_id = %s`, q(f.A))); err != nil {
			t.Errorf("removing a retained run's payload: %v", err)
		}
	}

	t.Run("RetainedHashChanged", func(t *testing.T) {
		b.Tamper(t, s, fmt.Sprintf(`UPDATE dvt_run_events SET hash = %s WHERE run_id = %s AND run_seq = 5`, q(strings.Repeat("a", 64)), q(f.B)))
		if p := verify(t, s, audit.VerifyOptions{PublicKey: TestPublicKey}).Problem; p == nil || p.RunID != f.B {
			t.Fatalf("a retained run's hash changed: %v, want run %s named", p, f.B)
		}
	})
	t.Run("RetentionFakedToHideAnEdit", func(t *testing.T) {
		s := b.Fresh(t)
		f := SeedAudit(t, s)
		b.Tamper(t, s,
			fmt.Sprintf(`INSERT INTO dvt_audit_retention (run_id, removed_at, cutoff) VALUES (%s, '2026-05-01T00:00:00.000000000Z', 'x')`, q(f.C)),
			fmt.Sprintf(`UPDATE dvt_run_events SET payload = NULL WHERE run_id = %s`, q(f.C)))
		p := verify(t, s, audit.VerifyOptions{PublicKey: TestPublicKey}).Problem
		if p == nil || p.RunID != f.C || !strings.Contains(p.What, "retention: ") {
			t.Fatalf("a run marked retained outside any checkpoint: %v, want run %s named", p, f.C)
		}
	})
}

// storesBytes reports whether the backend keeps the hashed bytes and the
// payload text beside the row (Snowflake).
func storesBytes(t *testing.T, s AuditStore, run string) bool {
	t.Helper()
	links, err := s.Links(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	return len(links[1].EventBytes) > 0
}

// sqlText quotes v as an SQL string literal.
func sqlText(v string) string { return "'" + strings.ReplaceAll(v, "'", "''") + "'" }

// chainedRecords returns a run's events as the chain hashes them (the
// payload text as appended) and their links.
func chainedRecords(t *testing.T, s AuditStore, run string) ([]engine.RunEventRecord, map[int64]audit.StoredLink) {
	t.Helper()
	links, err := s.Links(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	recs := events(t, s, run)
	for i, r := range recs {
		if l := links[r.RunSeq]; len(l.EventBytes) > 0 {
			recs[i].Payload = []byte(l.PayloadText)
		}
	}
	return recs, links
}

// forgeEvent is an insider's chained event after the run's last one, the
// way README's chain definition says to hash it, inserted with plain SQL
// (the sequence row untouched).
func forgeEvent(t *testing.T, s AuditStore, run string) []string {
	t.Helper()
	recs, links := chainedRecords(t, s, run)
	last := recs[len(recs)-1]
	r := last
	r.RunSeq, r.EventID, r.IdempotencyKey = last.RunSeq+1, "forged-event", "forged-key"
	r.EventType, r.StepID, r.Payload = engine.StepStarted, "model.forged", nil
	c := audit.Chain(links[last.RunSeq].Hash, []engine.RunEventRecord{r})[0]
	cols, vals := "", ""
	if len(links[last.RunSeq].EventBytes) > 0 {
		cols, vals = ", event_bytes", ", "+sqlText(string(c.EventBytes))
	}
	return []string{fmt.Sprintf(`INSERT INTO dvt_run_events (run_id, run_seq, tenant_id, project_id, environment_id, event_id,
    event_type, step_id, plan_id, plan_version, logical_attempt_id, engine_attempt_id, idempotency_key,
    emitted_at, persisted_at, payload, prev_hash, hash%s)
SELECT run_id, %d, tenant_id, project_id, environment_id, 'forged-event', 'StepStarted', 'model.forged',
    plan_id, plan_version, logical_attempt_id, engine_attempt_id, 'forged-key', emitted_at, persisted_at, NULL,
    %s, %s%s
FROM dvt_run_events WHERE run_id = %s AND run_seq = %d`, cols, r.RunSeq, sqlText(c.PrevHash), sqlText(c.Hash), vals, sqlText(run), last.RunSeq)}
}

// rechain is an insider's edit that keeps the run's chain whole: the event
// type of runSeq from changed and every link from there recomputed (the
// sequence row's head with them). log rewrites the run's global log
// entries to the new hashes as well.
func rechain(t *testing.T, s AuditStore, run string, from int64, typ engine.EventType) (stmts, log []string) {
	t.Helper()
	recs, links := chainedRecords(t, s, run)
	recs[from-1].EventType = typ
	stmts = append(stmts, fmt.Sprintf(`UPDATE dvt_run_events SET event_type = %s WHERE run_id = %s AND run_seq = %d`, sqlText(string(typ)), sqlText(run), from))
	head, prev := "", audit.Genesis
	if from > 1 {
		prev = links[from-1].Hash
	}
	for i, c := range audit.Chain(prev, recs[from-1:]) {
		seq := from + int64(i)
		set := fmt.Sprintf(`prev_hash = %s, hash = %s`, sqlText(c.PrevHash), sqlText(c.Hash))
		if len(links[seq].EventBytes) > 0 {
			set += ", event_bytes = " + sqlText(string(c.EventBytes))
		}
		stmts = append(stmts, fmt.Sprintf(`UPDATE dvt_run_events SET %s WHERE run_id = %s AND run_seq = %d`, set, sqlText(run), seq))
		log = append(log, fmt.Sprintf(`UPDATE dvt_audit_log SET hash = %s WHERE run_id = %s AND run_seq = %d`, sqlText(c.Hash), sqlText(run), seq))
		head = c.Hash
	}
	stmts = append(stmts, fmt.Sprintf(`UPDATE dvt_run_seq SET last_hash = %s WHERE run_id = %s`, sqlText(head), sqlText(run)))
	return stmts, log
}

// asV1 rewrites a run's events as the v1 append wrote them (the payload
// hashed itself, no digest), the sequence row's head with them; log
// rewrites the run's global log entries to the new hashes.
func asV1(b AuditBackend, run string, recs []engine.RunEventRecord, storesBytes bool) (stmts, log []string) {
	prev := audit.Genesis
	for _, r := range recs {
		eb := audit.EventBytes(r)
		h := audit.Link(run, r.RunSeq, eb, prev)
		set := fmt.Sprintf(`prev_hash = %s, hash = %s, payload_sha256 = NULL`, sqlText(prev), sqlText(h))
		if len(r.Payload) > 0 {
			set += ", payload = " + b.JSON(sqlText(string(r.Payload)))
		}
		if storesBytes {
			set += ", payload_text = NULL, event_bytes = " + sqlText(string(eb))
		}
		stmts = append(stmts, fmt.Sprintf(`UPDATE dvt_run_events SET %s WHERE run_id = %s AND run_seq = %d`, set, sqlText(run), r.RunSeq))
		log = append(log, fmt.Sprintf(`UPDATE dvt_audit_log SET hash = %s WHERE run_id = %s AND run_seq = %d`, sqlText(h), sqlText(run), r.RunSeq))
		prev = h
	}
	stmts = append(stmts, fmt.Sprintf(`UPDATE dvt_run_seq SET last_hash = %s WHERE run_id = %s`, sqlText(prev), sqlText(run)))
	return stmts, log
}

// signPrefix stores a checkpoint of the log's first size entries, signed
// with TestKey, as if the checkpointer had run when the log was that long.
func signPrefix(t *testing.T, s AuditStore, size int64) {
	t.Helper()
	entries, err := s.LogEntries(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var tree audit.Tree
	for _, e := range entries[:size] {
		if err := tree.Add(e.Hash); err != nil {
			t.Fatal(err)
		}
	}
	root, err := tree.Root(size)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := audit.Sign(TestKey, size, root)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SaveCheckpoint(ctx, cp, time.Date(2026, 4, 1, 12, 30, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
}

func verify(t *testing.T, s AuditStore, o audit.VerifyOptions) audit.Report {
	t.Helper()
	rep, err := audit.Verify(ctx, s, o)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	return rep
}
