package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/dvtrun/dvtrun/engine"
)

// Retention is signed evidence (issue 25). A run's payloads may go only
// after three things, in this order, each surviving a crash:
//
//  1. a retention record — the run, the policy, the cutoff, when, and the
//     size of the signed checkpoint that then covered every event of the
//     run — is signed with the audit key (a C2SP note, like a checkpoint)
//     and appended to the global log as an entry of its own, under the
//     reserved run id RetentionRunID with runSeq the record's ordinal;
//  2. a checkpoint is signed that covers the record;
//  3. the payloads of recorded runs whose record a checkpoint covers are
//     removed.
//
// A crash after 1 leaves a record with every payload in place (verify
// accepts it as pending); the next retention signs and removes. A row of
// dvt_audit_retention without that evidence is a break naming the run:
// nobody without the key can sign a record, and the checkpointer, which
// signs whatever the log holds, never signs one.

// RetentionRunID is the run id of retention records in the global log,
// as delivery.CheckpointRunID is the checkpoint stream's; no run has it
// (run ids are UUIDs).
const RetentionRunID = "dvtrun.audit.retention"

// RetentionVersion is the first line of a retention record's signed text:
// a checkpoint's first line is its origin, so neither passes for the other.
const RetentionVersion = "dvtrun-retention-v1"

// Retention is one row of dvt_audit_retention with its signed record.
type Retention struct {
	// Seq is the record's ordinal: its runSeq in the global log.
	Seq   int64
	RunID string
	// OlderThan is the policy (a Go duration); Cutoff is RemovedAt minus
	// it; the run ended before Cutoff. Times are engine.TimeFormat.
	OlderThan         string
	Cutoff, RemovedAt string
	// Covered is the size of the signed checkpoint that covered every
	// event of the run when the record was made: the events were signed
	// before their payloads went.
	Covered int64
	// Note is the signed record; empty for a row made without one (by
	// hand, or by retention before migration 0810).
	Note []byte
}

// retentionText is the signed text: the version, then one field a line.
// Run ids hold no LF.
func retentionText(r Retention) string {
	return strings.Join([]string{RetentionVersion, strconv.FormatInt(r.Seq, 10), r.RunID, r.OlderThan,
		r.Cutoff, r.RemovedAt, strconv.FormatInt(r.Covered, 10)}, "\n") + "\n"
}

// SignRetention signs a retention record with the audit signing key.
func SignRetention(skey string, r Retention) ([]byte, error) {
	if strings.ContainsAny(r.RunID+r.OlderThan+r.Cutoff+r.RemovedAt, "\n") {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "a retention record's fields hold no line feed")
	}
	s, err := note.NewSigner(strings.TrimSpace(skey))
	if err != nil {
		return nil, engine.Errorf(engine.CodeConfigInvalid, "the audit signing key is not a signed-note private key (%v)", err)
	}
	msg, err := note.Sign(&note.Note{Text: retentionText(r)}, s)
	if err != nil {
		return nil, engine.Errorf(engine.CodeConfigInvalid, "cannot sign the retention record: %v", err)
	}
	return msg, nil
}

// OpenRetention checks a signed retention record against the pinned key
// and parses it.
func OpenRetention(msg []byte, vkey string) (Retention, error) {
	v, err := note.NewVerifier(strings.TrimSpace(vkey))
	if err != nil {
		return Retention{}, engine.Errorf(engine.CodeInvalidArgument, "the audit public key is not a signed-note verifier key (%v)", err)
	}
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		return Retention{}, fmt.Errorf("not signed by the pinned key %s", vkey)
	}
	f := strings.Split(strings.TrimSuffix(n.Text, "\n"), "\n")
	if len(f) != 7 || f[0] != RetentionVersion {
		return Retention{}, fmt.Errorf("not a %s record", RetentionVersion)
	}
	r := Retention{RunID: f[2], OlderThan: f[3], Cutoff: f[4], RemovedAt: f[5], Note: msg}
	if r.Seq, err = strconv.ParseInt(f[1], 10, 64); err != nil {
		return Retention{}, fmt.Errorf("malformed ordinal %q", f[1])
	}
	if r.Covered, err = strconv.ParseInt(f[6], 10, 64); err != nil {
		return Retention{}, fmt.Errorf("malformed checkpoint size %q", f[6])
	}
	return r, nil
}

// RetentionLeaf is a retention record's hash in the global log: SHA-256 of
// the signed note, lowercase hex.
func RetentionLeaf(signed []byte) string {
	h := sha256.Sum256(signed)
	return hex.EncodeToString(h[:])
}

// PayloadRemovable says whether retention may remove this chained event's
// payload and verify still accept the row without it: only a v2 event with
// a payload digest, whose hash covers the digest and every other column,
// so the row stays proven without the payload. A v1 hash covers the
// payload itself: without it nothing of the row is proven, so retention
// never records a run with a v1 event holding a payload. The one place
// that decides; its SQL twins are "payload_sha256 IS NOT NULL" in
// audit_retain_remove, audit_retain_runs and audit_retain_candidates
// (sql/<dialect>/audit.sql) and the chain view.
func PayloadRemovable(l StoredLink) bool {
	return l.Hash != "" && l.PayloadSHA256 != ""
}

// RetentionLog is the store's side of retention (store.AuditSQL).
type RetentionLog interface {
	CheckpointLog
	// RecordRetention, in one write transaction, records every ended run
	// whose terminal event was persisted before cutoff and whose every
	// event is chained and covered by the newest stored checkpoint, and
	// none of whose events holds a payload in the v1 form (PayloadRemovable):
	// the record, signed by sign, in dvt_audit_retention and in the global
	// log. It returns how many it recorded, and how many runs it skipped
	// because they hold v1 payloads.
	RecordRetention(ctx context.Context, now, cutoff time.Time, olderThan time.Duration, sign func(Retention) ([]byte, error)) (recorded, skippedV1 int64, err error)
	// RemoveRetainedPayloads removes the payloads of the recorded runs
	// whose record a stored checkpoint covers, and returns how many runs
	// and events lost theirs.
	RemoveRetainedPayloads(ctx context.Context) (runs, events int64, err error)
}

// Retainer applies a retention policy in the order that keeps it
// provable: record, sign a checkpoint over the record, remove.
type Retainer struct {
	Log RetentionLog
	// Checkpointer signs the checkpoints (over the same store); its
	// SigningKey signs the records and its Now is the clock.
	Checkpointer *Checkpointer
}

// Retained is what a retention did.
type Retained struct {
	// Recorded runs this time; Runs and Events lost their payloads (runs
	// recorded by an earlier, interrupted retention included).
	Recorded, Runs, Events int64
	// SkippedV1 runs ended before the cutoff but hold v1 events with their
	// payloads: never recorded (a v1 hash covers the payload, so removing
	// it would leave the rows unproven).
	SkippedV1 int64
	// Checkpoint is the newest; Fresh when this retention signed it.
	Checkpoint Checkpoint
	Fresh      bool
}

// Retain removes the payloads of the runs that ended more than olderThan
// ago and whose events a signed checkpoint covers, and finishes what an
// interrupted retention left.
func (r *Retainer) Retain(ctx context.Context, olderThan time.Duration) (Retained, error) {
	var out Retained
	if olderThan <= 0 {
		return out, engine.Errorf(engine.CodeInvalidArgument, "a retention policy must be a positive duration, not %s", olderThan)
	}
	now := r.Checkpointer.Now().UTC()
	sign := func(rec Retention) ([]byte, error) { return SignRetention(r.Checkpointer.SigningKey, rec) }
	var err error
	if out.Recorded, out.SkippedV1, err = r.Log.RecordRetention(ctx, now, now.Add(-olderThan), olderThan, sign); err != nil {
		return out, err
	}
	if out.Checkpoint, out.Fresh, err = r.Checkpointer.Checkpoint(ctx); err != nil {
		return out, err
	}
	out.Runs, out.Events, err = r.Log.RemoveRetainedPayloads(ctx)
	return out, err
}

// retainedRun is what Verify saw of a run with a retention row.
type retainedRun struct {
	// chained events, and those among them whose payload is gone.
	chained, removed int64
	// ended is when its terminal event was persisted (zero: none).
	ended time.Time
}

// retainedCovered accepts each run's retention only on its evidence: one
// row, with a record signed by the pinned key that agrees with the row; the
// record in the global log at some index R; the run's every chained event
// in the log below the record's covered size, itself at most R; the run
// ended before the cutoff, and the cutoff the removal time less the
// policy. A record no verified checkpoint covers yet (latest is the newest
// verified, nil for none) is pending: accepted only while every payload is
// in place. It returns the first break and the pending runs.
func retainedCovered(entries []LogEntry, runs map[string]retainedRun, rows []Retention, latest *Checkpoint, vkey string) (*Problem, map[string]bool) {
	if len(runs) == 0 {
		return nil, nil
	}
	var signedSize int64
	if latest != nil {
		signedSize = latest.Size
	}
	recordAt := map[int64]int64{} // ordinal → log index
	type span struct{ n, last int64 }
	events := map[string]span{}
	twice := map[int64]bool{}
	for _, e := range entries {
		if e.RunID == RetentionRunID {
			if _, ok := recordAt[e.RunSeq]; ok {
				twice[e.RunSeq] = true
			}
			recordAt[e.RunSeq] = e.Index
			continue
		}
		if _, ok := runs[e.RunID]; ok {
			s := events[e.RunID]
			events[e.RunID] = span{s.n + 1, e.Index}
		}
	}
	byRun := map[string][]Retention{}
	for _, r := range rows {
		if _, ok := runs[r.RunID]; ok {
			byRun[r.RunID] = append(byRun[r.RunID], r)
		}
	}
	ids := make([]string, 0, len(runs))
	for id := range runs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	pending := map[string]bool{}
	for _, id := range ids {
		bad := func(format string, args ...any) (*Problem, map[string]bool) {
			return &Problem{RunID: id, What: "retention: " + fmt.Sprintf(format, args...)}, nil
		}
		run := runs[id]
		rs := byRun[id]
		if len(rs) != 1 {
			return bad("%d rows in dvt_audit_retention, want one", len(rs))
		}
		row := rs[0]
		if len(row.Note) == 0 {
			return bad("its dvt_audit_retention row has no signed record (inserted by hand, or by a retention before migration 0810): nothing proves the payloads went by policy")
		}
		if vkey == "" {
			return bad("no public key is pinned to check its signed record with")
		}
		rec, err := OpenRetention(row.Note, vkey)
		if err != nil {
			return bad("its record: %v", err)
		}
		if rec.RunID != id {
			return bad("its signed record names run %s", rec.RunID)
		}
		if rec.Seq != row.Seq || rec.OlderThan != row.OlderThan || rec.Cutoff != row.Cutoff || rec.RemovedAt != row.RemovedAt || rec.Covered != row.Covered {
			return bad("its dvt_audit_retention row differs from its signed record")
		}
		at, ok := recordAt[rec.Seq]
		switch {
		case !ok:
			return bad("its record #%d is not in the global log", rec.Seq)
		case twice[rec.Seq]:
			return bad("its record #%d is in the global log twice", rec.Seq)
		}
		if rec.Covered > at {
			return bad("its record at log index %d claims a checkpoint of %d events", at, rec.Covered)
		}
		if ev := events[id]; ev.n != run.chained || (ev.n > 0 && ev.last >= rec.Covered) {
			return bad("its events were not all in the checkpoint of %d events its record names (%d of %d chained events in the log, the last at index %d)", rec.Covered, ev.n, run.chained, ev.last)
		}
		older, err1 := time.ParseDuration(rec.OlderThan)
		cutoff, err2 := time.Parse(engine.TimeFormat, rec.Cutoff)
		removed, err3 := time.Parse(engine.TimeFormat, rec.RemovedAt)
		switch {
		case err1 != nil || err2 != nil || err3 != nil || older <= 0:
			return bad("its record's policy %q, cutoff %q or time %q does not parse", rec.OlderThan, rec.Cutoff, rec.RemovedAt)
		case !removed.Add(-older).Equal(cutoff):
			return bad("its record's cutoff %s is not %s before %s", rec.Cutoff, rec.OlderThan, rec.RemovedAt)
		case run.ended.IsZero() || !run.ended.Before(cutoff):
			return bad("the run had not ended before the record's cutoff %s", rec.Cutoff)
		}
		if at >= signedSize {
			if run.removed > 0 {
				return bad("%d payloads removed, but its record at log index %d is in no verified checkpoint", run.removed, at)
			}
			pending[id] = true
		}
	}
	return nil, pending
}

// genesisChecked refuses a genesis row that un-chains events the signed
// log holds: migration 0500 made a genesis row only for a run that had
// events before the chain existed, so none of its events below first_seq
// were ever in the log. (No code path inserts genesis rows after 0500;
// the triggers refuse it where the backend has them.)
func genesisChecked(heads []RunHead, entries []LogEntry) *Problem {
	first := map[string]int64{}
	for _, h := range heads {
		if h.FirstSeq > 1 {
			if h.FirstSeq > h.NextSeq {
				return &Problem{RunID: h.RunID, What: fmt.Sprintf("its genesis row starts the chain at runSeq %d, beyond the run's %d events", h.FirstSeq, h.NextSeq-1)}
			}
			first[h.RunID] = h.FirstSeq
		}
	}
	if len(first) == 0 {
		return nil
	}
	for _, e := range entries {
		if f, ok := first[e.RunID]; ok && e.RunSeq < f {
			return &Problem{RunID: e.RunID, RunSeq: e.RunSeq, What: fmt.Sprintf("its genesis row says runSeq below %d are unchained, but the global log holds this one at index %d: the genesis row was made after the fact", f, e.Index)}
		}
	}
	return nil
}

// retainedOf sums up a run with a retention row for retainedCovered, from
// its events and what checkRun found of them.
func retainedOf(recs []engine.RunEventRecord, res *runResult) retainedRun {
	r := retainedRun{chained: res.v1 + res.v2, removed: res.removed}
	for _, rec := range recs {
		switch rec.EventType {
		case engine.RunCompleted, engine.RunFailed, engine.RunCancelled:
			if r.ended.IsZero() {
				r.ended = rec.PersistedAt
			}
		}
	}
	return r
}
