package audit

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/dvtrun/dvtrun/engine"
)

// RunChain is one run as the store holds it, for VerifyRun.
type RunChain struct {
	RunID string
	// Status and NextSeq are the run's dvt_run_seq row.
	Status  engine.RunStatus
	NextSeq int64
	// FirstSeq is the first chained runSeq: 1, or the genesis row's for a
	// run that existed before the chain.
	FirstSeq int64
	// Retained: the run has a retention record. A v2 event whose payload
	// is gone is accepted only then (retainedCovered judges the record); its
	// hash is still recomputed from every other column and the digest.
	Retained bool
	// Records are the event rows' columns and Links their chain columns,
	// both in runSeq order; a legacy (unchained) event has no link.
	Records []engine.RunEventRecord
	Links   map[int64]StoredLink
}

// StoredLink is an event's chain columns.
type StoredLink struct {
	PrevHash, Hash string
	// EventBytes are the hashed bytes as stored (Snowflake only: its
	// payload VARIANT re-serialises); empty where the row's columns are
	// the hashed bytes.
	EventBytes []byte
	// PayloadSHA256 is the row's payload_sha256 (v2 events; "" for NULL).
	PayloadSHA256 string
	// PayloadText is the payload exactly as appended (Snowflake's
	// payload_text, which the digest covers); "" elsewhere or when NULL.
	PayloadText string
}

// LogEntry is one row of the global log.
type LogEntry struct {
	Index  int64
	RunID  string
	RunSeq int64
	Hash   string
}

// Problem is the first thing verification found broken: a run and runSeq,
// or a log index, or a checkpoint.
type Problem struct {
	RunID  string
	RunSeq int64
	What   string
}

func (p *Problem) Error() string {
	switch {
	case p.RunID != "" && p.RunSeq > 0:
		return fmt.Sprintf("run %s runSeq %d: %s", p.RunID, p.RunSeq, p.What)
	case p.RunID != "":
		return fmt.Sprintf("run %s: %s", p.RunID, p.What)
	}
	return p.What
}

// runResult is what checking a run leaves for the log check: each chained
// event's hash as recomputed from its row (zero for an unchained one) and
// when it was persisted, indexed by runSeq-1.
type runResult struct {
	hashes    []tlog.Hash
	chained   []bool
	persisted []int64 // UnixNano
	index     []int64 // the log index, -1 when not indexed (checkIndexed)
	v1, v2    int64
	removed   int64 // v2 events whose payload is gone
}

// head is the run's chain head as recomputed: the last chained event's
// hash, Genesis when none is chained (dvt_run_seq.last_hash must say the
// same). headSeq is that event's runSeq (0 for none).
func (r *runResult) head() string {
	if i := r.headSeq(); i > 0 {
		return hex.EncodeToString(r.hashes[i-1][:])
	}
	return Genesis
}

func (r *runResult) headSeq() int64 {
	for i := len(r.chained) - 1; i >= 0; i-- {
		if r.chained[i] {
			return int64(i) + 1
		}
	}
	return 0
}

// VerifyRun checks one run: contiguous runSeqs from 1 to the sequence
// row's last and none beyond it, no event after the terminal event, every
// chained event's hash recomputed from its columns (v2, or v1 for events
// appended before v2) and linked to the one before, a v2 event's payload
// against its digest, and a terminal event when the run has ended. It
// returns the first break.
func VerifyRun(rc RunChain) *Problem {
	_, p := checkRun(rc)
	return p
}

func checkRun(rc RunChain) (runResult, *Problem) {
	bad := func(seq int64, format string, args ...any) *Problem {
		return &Problem{RunID: rc.RunID, RunSeq: seq, What: fmt.Sprintf(format, args...)}
	}
	n := len(rc.Records)
	res := runResult{hashes: make([]tlog.Hash, n), chained: make([]bool, n), persisted: make([]int64, n)}
	prev := Genesis
	var terminal int64
	first := rc.FirstSeq
	if first < 1 {
		first = 1
	}
	for i, r := range rc.Records {
		want := int64(i + 1)
		if r.RunSeq != want {
			return res, bad(want, "runSeq %d is missing (the next stored event has runSeq %d)", want, r.RunSeq)
		}
		if terminal > 0 {
			return res, bad(r.RunSeq, "stored after the run's terminal event (runSeq %d)", terminal)
		}
		if r.RunSeq > rc.NextSeq-1 {
			return res, bad(r.RunSeq, "beyond the run's sequence row, whose next_seq is %d: the event was not appended through the append path", rc.NextSeq)
		}
		switch r.EventType {
		case engine.RunCompleted, engine.RunFailed, engine.RunCancelled:
			terminal = r.RunSeq
		}
		res.persisted[i] = r.PersistedAt.UnixNano()
		l, ok := rc.Links[r.RunSeq]
		if r.RunSeq < first {
			if ok && l.Hash != "" {
				return res, bad(r.RunSeq, "chained, but before the run's genesis at runSeq %d", first)
			}
			continue
		}
		if !ok || l.Hash == "" {
			return res, bad(r.RunSeq, "not chained (no hash)")
		}
		if l.PrevHash != prev {
			return res, bad(r.RunSeq, "prev_hash %s does not link to the previous event's hash %s", short(l.PrevHash), short(prev))
		}
		v2, p := checkEvent(rc, r, l)
		if p != nil {
			return res, p
		}
		if v2 {
			res.v2++
			if l.PayloadSHA256 != "" && !hasPayload(r, l) {
				res.removed++
			}
		} else {
			res.v1++
		}
		raw, err := hex.DecodeString(l.Hash)
		if err != nil || len(raw) != tlog.HashSize {
			return res, bad(r.RunSeq, "hash %q is not 64 hex digits", l.Hash)
		}
		copy(res.hashes[i][:], raw)
		res.chained[i] = true
		prev = l.Hash
	}
	last := int64(n)
	if rc.NextSeq-1 > last {
		return res, bad(last+1, "runSeq %d is missing: the run's sequence row says %d events were appended", last+1, rc.NextSeq-1)
	}
	if rc.Status.Terminal() && terminal == 0 {
		return res, bad(0, "the run ended (%s) but no terminal event is stored", rc.Status)
	}
	return res, nil
}

// checkEvent recomputes a chained event's hash from its stored columns —
// the v2 form first, then v1 — and checks a v2 event's payload against
// its digest. v2 reports the form that matched.
func checkEvent(rc RunChain, r engine.RunEventRecord, l StoredLink) (v2 bool, p *Problem) {
	bad := func(format string, args ...any) (bool, *Problem) {
		return false, &Problem{RunID: rc.RunID, RunSeq: r.RunSeq, What: fmt.Sprintf(format, args...)}
	}
	if len(l.EventBytes) == 0 {
		// SQLite, Postgres: the columns are the hashed bytes.
		if LinkV2(rc.RunID, r.RunSeq, EventBytesV2(r, l.PayloadSHA256), l.PrevHash) == l.Hash {
			v2 = true
		} else if Link(rc.RunID, r.RunSeq, EventBytes(r), l.PrevHash) != l.Hash {
			if !PayloadRemovable(l) && !hasPayload(r, l) {
				return bad("the row does not hash to its hash %s in either form: a column or the hash was changed, or it is a v1 event whose payload was removed (v1 hashes the payload itself, so without it nothing of the row is proven)", short(l.Hash))
			}
			return bad("the row does not hash to its hash %s (recomputed %s): a column or the hash was changed", short(l.Hash), short(LinkV2(rc.RunID, r.RunSeq, EventBytesV2(r, l.PayloadSHA256), l.PrevHash)))
		}
	} else {
		// Snowflake: the hashed bytes are stored beside the columns and
		// must say what the columns say.
		switch l.Hash {
		case LinkV2(rc.RunID, r.RunSeq, l.EventBytes, l.PrevHash):
			v2 = true
			if what := sameEventV2(l.EventBytes, r, l.PayloadSHA256); what != "" {
				return bad("the row's %s differs from the hashed event bytes", what)
			}
		case Link(rc.RunID, r.RunSeq, l.EventBytes, l.PrevHash):
			if what := sameEvent(l.EventBytes, r); what != "" {
				return bad("the row's %s differs from the hashed event bytes", what)
			}
		default:
			return bad("hash %s does not match the stored event bytes in either form (recomputed %s)", short(l.Hash), short(LinkV2(rc.RunID, r.RunSeq, l.EventBytes, l.PrevHash)))
		}
	}
	if !v2 {
		return false, nil
	}
	// v2: the digest is hashed; the payload must be the digest's.
	switch {
	case l.PayloadSHA256 == "" && hasPayload(r, l):
		return bad("the row holds a payload, but the event was appended without one (payload_sha256 is NULL)")
	case l.PayloadSHA256 == "":
	case !hasPayload(r, l):
		if !rc.Retained || !PayloadRemovable(l) {
			return bad("the payload was removed, but the run has no retention record")
		}
	default:
		text := []byte(r.Payload)
		if len(l.EventBytes) > 0 {
			// Snowflake: the digest covers payload_text; the VARIANT must
			// hold the same JSON value.
			text = []byte(l.PayloadText)
			if !sameJSON(text, r.Payload) {
				return bad("the row's payload differs from its payload_text")
			}
		}
		if got := PayloadDigest(text); got != l.PayloadSHA256 {
			return bad("the payload does not hash to its payload_sha256 %s (recomputed %s): the payload was changed", short(l.PayloadSHA256), short(got))
		}
	}
	return true, nil
}

// hasPayload reports whether the row still holds a payload (Snowflake:
// either its VARIANT or its payload_text).
func hasPayload(r engine.RunEventRecord, l StoredLink) bool {
	return !payloadRemoved(r) || l.PayloadText != ""
}

// payloadRemoved reports whether the row has no payload, as retention
// leaves it.
func payloadRemoved(r engine.RunEventRecord) bool {
	p := bytes.TrimSpace(r.Payload)
	return len(p) == 0 || bytes.Equal(p, []byte("null"))
}

// sameEventV2 names the first column where the row differs from the v2
// hashed bytes ("" when they agree): the payload field is the digest.
func sameEventV2(stored []byte, r engine.RunEventRecord, digest string) string {
	got, ok := splitEventBytes(stored)
	if !ok {
		return "event bytes (not in the canonical form)"
	}
	want, _ := splitEventBytes(EventBytesV2(r, digest))
	for i := range fieldCount {
		if g, w := got[i], want[i]; (g == nil) != (w == nil) || g != nil && *g != *w {
			return fieldNames[i]
		}
	}
	return ""
}

var fieldNames = [fieldCount]string{"eventId", "eventType", "stepId", "tenantId", "projectId", "environmentId", "planId",
	"planVersion", "logicalAttemptId", "engineAttemptId", "idempotencyKey", "emittedAt", "persistedAt", "payload_sha256"}

// sameEvent names the first column where the row differs from the hashed
// bytes ("" when they agree). The payload compares as JSON values: a
// VARIANT re-serialises it.
func sameEvent(stored []byte, r engine.RunEventRecord) string {
	got, ok := splitEventBytes(stored)
	if !ok {
		return "event bytes (not in the canonical form)"
	}
	want, _ := splitEventBytes(EventBytes(r))
	names := fieldNames
	names[fieldCount-1] = "payload"
	for i := range fieldCount {
		g, w := got[i], want[i]
		switch {
		case i == fieldCount-1:
			var gs, ws []byte
			if g != nil {
				gs = []byte(*g)
			}
			if w != nil {
				ws = []byte(*w)
			}
			if !sameJSON(gs, ws) {
				return names[i]
			}
		case (g == nil) != (w == nil) || g != nil && *g != *w:
			return names[i]
		}
	}
	return ""
}

func sameJSON(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	null := func(m json.RawMessage) bool {
		return len(bytes.TrimSpace(m)) == 0 || string(bytes.TrimSpace(m)) == "null"
	}
	if null(a) || null(b) {
		return null(a) && null(b)
	}
	var va, vb any
	da, db := json.NewDecoder(bytes.NewReader(a)), json.NewDecoder(bytes.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	if da.Decode(&va) != nil || db.Decode(&vb) != nil {
		return false
	}
	return sameValue(va, vb)
}

// sameValue compares decoded JSON values, numbers by value: a VARIANT
// gives 1.0 back as 1 and 1e2 as 100.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		rx, okx := new(big.Rat).SetString(x.String())
		ry, oky := new(big.Rat).SetString(y.String())
		return okx && oky && rx.Cmp(ry) == 0
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !sameValue(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return a == b
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}

// Chains looks up a chained event's hash, as Verify recomputed it from the
// event's row, for VerifyLog.
// ok is false for an event not in the store (or not chained).
type Chains func(e LogEntry) (hash string, ok bool)

// VerifyLog checks the global log: indexes contiguous from 0, each entry's
// hash the hash recomputed from its event's row. It returns the tree of
// the entries.
func VerifyLog(entries []LogEntry, events Chains) (*Tree, *Problem) {
	t := &Tree{stored: make([]tlog.Hash, 0, 2*len(entries))}
	for i, e := range entries {
		if e.Index != int64(i) {
			return nil, &Problem{What: fmt.Sprintf("log index %d is missing (the next stored index is %d)", i, e.Index)}
		}
		h, ok := events(e)
		switch {
		case !ok:
			return nil, &Problem{RunID: e.RunID, RunSeq: e.RunSeq, What: fmt.Sprintf("in the log at index %d but not in the store", e.Index)}
		case h != e.Hash:
			return nil, &Problem{RunID: e.RunID, RunSeq: e.RunSeq, What: fmt.Sprintf("the log's hash at index %d is %s, the event's row hashes to %s", e.Index, short(e.Hash), short(h))}
		}
		if err := t.Add(e.Hash); err != nil {
			return nil, &Problem{RunID: e.RunID, RunSeq: e.RunSeq, What: err.Error()}
		}
	}
	return t, nil
}

// VerifyCheckpoint checks a signed checkpoint (stored, or held outside
// the store) against the pinned key and the log: its root must be the
// root of the log's first Size entries, which is what proves the log only
// grew since it was signed.
func VerifyCheckpoint(t *Tree, msg []byte, vkey, source string) (Checkpoint, *Problem) {
	cp, err := Open(msg, vkey)
	if err != nil {
		return cp, &Problem{What: fmt.Sprintf("%s: %v", source, err)}
	}
	if cp.Size > t.Size() {
		return cp, &Problem{What: fmt.Sprintf("%s covers %d events but the log holds %d: events were removed", source, cp.Size, t.Size())}
	}
	root, err := t.Root(cp.Size)
	if err != nil {
		return cp, &Problem{What: fmt.Sprintf("%s: %v", source, err)}
	}
	if root != cp.Root {
		return cp, &Problem{What: fmt.Sprintf("%s: the log's first %d events do not have the signed root: the log was rewritten", source, cp.Size)}
	}
	return cp, nil
}
