package storetest

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/audit"
)

// The insider's statements below run as a table owner would (Tamper:
// triggers dropped); each must leave verify failing and naming the run.

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// nullPayloads is how an insider removes a run's payloads in this dialect.
func (b AuditBackend) nullPayloads(runID string) string {
	if b.NullPayloads != nil {
		return b.NullPayloads(quote(runID))
	}
	return `UPDATE dvt_run_events SET payload = NULL WHERE run_id = ` + quote(runID)
}

// foundOne is issue 25's Found 1 in the FAILED run B: payloads removed,
// StepFailed→StepCompleted, RunFailed→RunCompleted, the sequence row
// COMPLETED.
func foundOne(b AuditBackend, run string) []string {
	return []string{
		b.nullPayloads(run),
		fmt.Sprintf(`UPDATE dvt_run_events SET event_type = 'StepCompleted' WHERE run_id = %s AND event_type = 'StepFailed'`, quote(run)),
		fmt.Sprintf(`UPDATE dvt_run_events SET event_type = 'RunCompleted' WHERE run_id = %s AND event_type = 'RunFailed'`, quote(run)),
		fmt.Sprintf(`UPDATE dvt_run_seq SET status = 'COMPLETED' WHERE run_id = %s`, quote(run)),
	}
}

// bareRow is a row of dvt_audit_retention as an insider inserts it: no
// signed record.
func bareRow(run string) string {
	return fmt.Sprintf(`INSERT INTO dvt_audit_retention (run_id, removed_at, cutoff) VALUES (%s, '2026-05-01T00:00:00.000000000Z', '2026-04-01T00:00:00.000000000Z')`, quote(run))
}

// forgedRecord is a retention record for run signed with key, as the
// statements that put it in the global log at index at and in
// dvt_audit_retention; its times follow the run's end, so only what the
// case is about is wrong with it.
func forgedRecord(t *testing.T, s AuditStore, key, run string, seq, at, covered int64) []string {
	t.Helper()
	recs := events(t, s, run)
	ended := recs[len(recs)-1].PersistedAt
	r := audit.Retention{Seq: seq, RunID: run, OlderThan: time.Hour.String(),
		Cutoff: ended.Add(time.Minute).UTC().Format(engine.TimeFormat), RemovedAt: ended.Add(time.Hour + time.Minute).UTC().Format(engine.TimeFormat), Covered: covered}
	note, err := audit.SignRetention(key, r)
	if err != nil {
		t.Fatal(err)
	}
	return []string{
		fmt.Sprintf(`INSERT INTO dvt_audit_log (log_index, run_id, run_seq, hash) VALUES (%d, %s, %d, %s)`, at, quote(audit.RetentionRunID), seq, quote(audit.RetentionLeaf(note))),
		fmt.Sprintf(`INSERT INTO dvt_audit_retention (run_id, removed_at, cutoff, seq, older_than, covered, note) VALUES (%s, %s, %s, %d, %s, %d, %s)`,
			quote(run), quote(r.RemovedAt), quote(r.Cutoff), seq, quote(r.OlderThan), covered, quote(string(note))),
	}
}

// testForgedRetention: a retention row is accepted only on its evidence.
func testForgedRetention(t *testing.T, b AuditBackend) {
	cases := []struct {
		name string
		// stmts forges; then checkpoint says whether the checkpointer
		// (which signs whatever the log holds) runs before verify.
		stmts      func(t *testing.T, s AuditStore, f AuditFixture) []string
		checkpoint bool
		run        func(f AuditFixture) string
		want       string
	}{
		// Found 1 exactly: a bare row in dvt_audit_retention. The v2 hash
		// still covers the event type once the payload is gone: the first
		// edited row is named before the retention is judged.
		{"FoundOneBareRow", func(t *testing.T, s AuditStore, f AuditFixture) []string {
			return append(foundOne(b, f.B), bareRow(f.B))
		}, false, func(f AuditFixture) string { return f.B }, "runSeq 4: (the row does not hash to its hash|the row's eventType differs)"},
		// The rest remove the payloads only (every other column intact):
		// what the retention's evidence alone must refuse.
		{"BareRow", func(t *testing.T, s AuditStore, f AuditFixture) []string {
			return []string{b.nullPayloads(f.B), bareRow(f.B)}
		}, false, func(f AuditFixture) string { return f.B }, "retention: its dvt_audit_retention row has no signed record"},
		// A record in the log, signed by a key other than the pinned one,
		// and a checkpoint signed over it by the service.
		{"RecordSignedByAnotherKey", func(t *testing.T, s AuditStore, f AuditFixture) []string {
			return append([]string{b.nullPayloads(f.B)}, forgedRecord(t, s, OtherKey, f.B, 1, 10, 10)...)
		}, true, func(f AuditFixture) string { return f.B }, "retention: its record: not signed by the pinned key"},
		// A record signed with the audit key but no checkpoint over it:
		// the payloads went before the record was signed into the log.
		{"RecordWithoutSignedCheckpoint", func(t *testing.T, s AuditStore, f AuditFixture) []string {
			return append([]string{b.nullPayloads(f.B)}, forgedRecord(t, s, TestKey, f.B, 1, 10, 10)...)
		}, false, func(f AuditFixture) string { return f.B }, "payloads removed, but its record at log index 10 is in no verified checkpoint"},
		// A record of the run C, which no checkpoint covered: its events
		// go into the log after the record.
		{"RunNoCheckpointCovered", func(t *testing.T, s AuditStore, f AuditFixture) []string {
			appendAll(t, s, f.c, f.c.Event(engine.RunFailed, "", 1))
			return append(forgedRecord(t, s, TestKey, f.C, 1, 10, 10), b.nullPayloads(f.C))
		}, true, func(f AuditFixture) string { return f.C }, "its events were not all in the checkpoint of 10 events its record names"},
		// A record that claims a checkpoint it came before.
		{"RecordBeforeItsCheckpoint", func(t *testing.T, s AuditStore, f AuditFixture) []string {
			return append([]string{b.nullPayloads(f.B)}, forgedRecord(t, s, TestKey, f.B, 1, 10, 11)...)
		}, true, func(f AuditFixture) string { return f.B }, "its record at log index 10 claims a checkpoint of 11 events"},
		// The row and its signed record disagree (the policy edited).
		{"RowDiffersFromRecord", func(t *testing.T, s AuditStore, f AuditFixture) []string {
			return append(append([]string{b.nullPayloads(f.B)}, forgedRecord(t, s, TestKey, f.B, 1, 10, 10)...),
				fmt.Sprintf(`UPDATE dvt_audit_retention SET older_than = '1m0s' WHERE run_id = %s`, quote(f.B)))
		}, true, func(f AuditFixture) string { return f.B }, "row differs from its signed record"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := b.Fresh(t)
			f := SeedAudit(t, s)
			b.Tamper(t, s, c.stmts(t, s, f)...)
			if c.checkpoint {
				Checkpoint(t, s)
			}
			p := verify(t, s, audit.VerifyOptions{PublicKey: TestPublicKey, External: f.Checkpoint.Note}).Problem
			if p == nil || p.RunID != c.run(f) || !regexp.MustCompile(c.want).MatchString(p.Error()) {
				t.Fatalf("verify: %v\nwant run %s named and %q", p, c.run(f), c.want)
			}
			// The chain view cannot check a signature, but a row without a
			// record in the log below a checkpoint does not make it ok.
			if b.Rows != nil && (c.name == "FoundOneBareRow" || c.name == "BareRow" || c.name == "RecordWithoutSignedCheckpoint") {
				q := fmt.Sprintf(`SELECT CAST(COUNT(*) AS VARCHAR) FROM dvt_audit_chain WHERE run_id = %s AND NOT ok`, quote(c.run(f)))
				if got := b.Rows(t, s, q); len(got) != 1 || got[0] == "0" {
					t.Fatalf("dvt_audit_chain: %v rows of run %s not ok, want its payload-less rows", got, c.run(f))
				}
			}
		})
	}
}

// testGenesisForChainedRun: a genesis row inserted for a run whose events
// the signed log holds, with its first events un-chained and one edited,
// is named; the guards refuse the insert.
func testGenesisForChainedRun(t *testing.T, b AuditBackend) {
	s := b.Fresh(t)
	f := SeedAudit(t, s)
	insert := fmt.Sprintf(`INSERT INTO dvt_audit_genesis (run_id, first_seq, recorded_at) VALUES (%s, 4, '2026-01-01T00:00:00.000000000Z')`, quote(f.B))
	if b.Guarded != nil {
		if err := b.Guarded(s, insert); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Fatalf("%s: %v, want refused as append-only", insert, err)
		}
	}
	b.Tamper(t, s, insert,
		fmt.Sprintf(`UPDATE dvt_run_events SET hash = NULL, prev_hash = NULL WHERE run_id = %s AND run_seq < 4`, quote(f.B)),
		fmt.Sprintf(`UPDATE dvt_run_events SET event_type = 'StepCompleted' WHERE run_id = %s AND run_seq = 3`, quote(f.B)))
	p := verify(t, s, audit.VerifyOptions{PublicKey: TestPublicKey}).Problem
	if p == nil || p.RunID != f.B || p.RunSeq != 1 || !strings.Contains(p.What, "genesis row") {
		t.Fatalf("verify: %v, want run %s runSeq 1 named for its genesis row", p, f.B)
	}
}

// testRetentionCrash: retention interrupted after its records (and after
// the checkpoint over them) leaves a store that verifies with every
// payload in place, and the next retention finishes it.
func testRetentionCrash(t *testing.T, b AuditBackend) {
	s := b.Fresh(t)
	f := SeedAudit(t, s)
	now := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	sign := func(r audit.Retention) ([]byte, error) { return audit.SignRetention(TestKey, r) }
	// The crash: recorded, not signed.
	if n, _, err := s.RecordRetention(ctx, now, now.Add(-time.Hour), time.Hour, sign); err != nil || n != 2 {
		t.Fatalf("record: %d %v, want A and B", n, err)
	}
	rep := verify(t, s, audit.VerifyOptions{PublicKey: TestPublicKey, External: f.Checkpoint.Note})
	if rep.Problem != nil || len(rep.Pending) != 2 || len(rep.Retained) != 0 {
		t.Fatalf("after a retention interrupted before signing: %+v, want A and B pending", rep)
	}
	if b.Guarded != nil {
		stmt := `UPDATE dvt_run_events SET payload = NULL WHERE run_id = ` + quote(f.A)
		if err := b.Guarded(s, stmt); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Fatalf("a payload removed before its record is signed: %v, want refused as append-only", err)
		}
	}
	// A second retention does not record them again, signs, removes.
	got := Retain(t, s, now, time.Hour)
	if got.Recorded != 0 || got.Runs != 2 || got.Events == 0 || !got.Fresh {
		t.Fatalf("retain after the crash: %+v, want A's and B's payloads removed under their first records", got)
	}
	rep = verify(t, s, audit.VerifyOptions{PublicKey: TestPublicKey, External: f.Checkpoint.Note})
	if rep.Problem != nil || len(rep.Pending) != 0 || len(rep.Retained) != 2 {
		t.Fatalf("after the retention finished: %+v", rep)
	}
	rets, err := s.Retentions(ctx)
	if err != nil || len(rets) != 2 || rets[0].Seq != 1 || rets[1].Seq != 2 {
		t.Fatalf("retention rows %+v %v, want two, ordinals 1 and 2", rets, err)
	}
}

// testNewGuards: the guards of migration 0810 refuse the insider's
// statements on dvt_run_seq, dvt_runs, dvt_audit_retention and
// dvt_audit_genesis, and let the append path's own through.
func testNewGuards(t *testing.T, b AuditBackend) {
	if b.Guarded == nil {
		t.Skip("this dialect enforces append-only by grants (dvtrun audit doctor), not in the store")
	}
	s := b.Fresh(t)
	f := SeedAudit(t, s)
	for _, stmt := range []string{
		`DELETE FROM dvt_run_seq WHERE run_id = ` + quote(f.A),
		`UPDATE dvt_run_seq SET status = 'COMPLETED' WHERE run_id = ` + quote(f.B),
		`UPDATE dvt_run_seq SET next_seq = 4 WHERE run_id = ` + quote(f.A),
		`UPDATE dvt_run_seq SET last_hash = ` + quote(strings.Repeat("a", 64)) + ` WHERE run_id = ` + quote(f.A),
		`UPDATE dvt_run_seq SET run_id = 'x' WHERE run_id = ` + quote(f.A),
		`DELETE FROM dvt_runs WHERE run_id = ` + quote(f.A),
		`UPDATE dvt_runs SET plan_id = 'other' WHERE run_id = ` + quote(f.A),
		`UPDATE dvt_runs SET created_at = '2020-01-01T00:00:00.000000000Z' WHERE run_id = ` + quote(f.A),
		`INSERT INTO dvt_audit_retention (run_id, removed_at, cutoff) VALUES (` + quote(f.B) + `, 'x', 'x')`,
		`INSERT INTO dvt_audit_retention (run_id, removed_at, cutoff, seq, older_than, covered, note) VALUES (` + quote(f.B) + `, 'x', 'x', 1, '1h0m0s', 10, 'x')`,
		`INSERT INTO dvt_audit_genesis (run_id, first_seq, recorded_at) VALUES (` + quote(f.B) + `, 4, 'x')`,
	} {
		if err := b.Guarded(s, stmt); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want refused as append-only", stmt, err)
		}
	}
	// What the append path does goes through: the adapter's reference,
	// and an append to a running run (C) advancing its sequence row.
	if err := b.Guarded(s, `UPDATE dvt_runs SET provider_run_ref = 'wf-1' WHERE run_id = `+quote(f.A)); err != nil {
		t.Errorf("setting provider_run_ref: %v", err)
	}
	appendAll(t, s, f.c, f.c.Event(engine.RunFailed, "", 1))
	if rep := verify(t, s, audit.VerifyOptions{PublicKey: TestPublicKey}); rep.Problem != nil {
		t.Fatalf("after the refused statements: %v", rep.Problem)
	}
}

// testRetentionSkipsV1: a run whose events are chained in the v1 form (its
// hash covers the payload) is never recorded for retention: it is counted
// as skipped and keeps its payloads, and the store still verifies.
func testRetentionSkipsV1(t *testing.T, b AuditBackend) {
	s := b.Fresh(t)
	f := SeedAudit(t, s)
	recs, _ := chainedRecords(t, s, f.A)
	stmts, log := asV1(b, f.A, recs, storesBytes(t, s, f.A))
	// A as the v1 append left it, its log entries with it, and the old
	// checkpoint (over A's v2 hashes) replaced by one over the new log.
	b.Tamper(t, s, append(append(stmts, log...), `DELETE FROM dvt_audit_checkpoints`)...)
	Checkpoint(t, s)
	if rep := verify(t, s, audit.VerifyOptions{PublicKey: TestPublicKey}); rep.Problem != nil || rep.V1 != 5 {
		t.Fatalf("A in v1: %+v, want verified with its 5 events in v1", rep)
	}
	now := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	got := Retain(t, s, now, time.Hour)
	if got.Recorded != 1 || got.Runs != 1 || got.SkippedV1 != 1 {
		t.Fatalf("retain: %+v, want B recorded and emptied, A skipped for its v1 events", got)
	}
	var kept int
	for _, r := range events(t, s, f.A) {
		if p := strings.TrimSpace(string(r.Payload)); p != "" && p != "null" {
			kept++
		}
	}
	if kept == 0 {
		t.Fatal("A's payloads were removed")
	}
	rep := verify(t, s, audit.VerifyOptions{PublicKey: TestPublicKey})
	if rep.Problem != nil || len(rep.Retained) != 1 || rep.Retained[0].RunID != f.B {
		t.Fatalf("after retention: %+v, want verified with only B retained", rep)
	}
	// The record's leaf is recomputed from its note, not read from the log.
	b.Tamper(t, s, fmt.Sprintf(`UPDATE dvt_audit_log SET hash = %s WHERE run_id = %s`, quote(strings.Repeat("a", 64)), quote(audit.RetentionRunID)))
	if p := verify(t, s, audit.VerifyOptions{PublicKey: TestPublicKey}).Problem; p == nil || p.RunID != audit.RetentionRunID || p.RunSeq != 1 || !strings.Contains(p.What, "the log's hash at index 12 is aaaaaaaaaaaa…") {
		t.Fatalf("a retention record's log entry replaced: %v, want record 1 named at index 12", p)
	}
}
