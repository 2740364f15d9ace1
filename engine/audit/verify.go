package audit

import (
	"bytes"
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
	// Retained: retention removed the run's payloads. An event without its
	// payload then cannot be rehashed; its links and its leaf in the log
	// (checked by VerifyLog against the checkpoints) still are.
	Retained bool
	// Records are the event rows' columns and Links their chain columns,
	// both in runSeq order; a legacy (unchained) event has no link.
	Records []engine.RunEventRecord
	Links   map[int64]StoredLink
}

// StoredLink is an event's chain columns.
type StoredLink struct {
	PrevHash, Hash string
	EventBytes     []byte
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

// VerifyRun checks one run: contiguous runSeqs from 1 to the sequence
// row's last, every chained event's hash recomputed from its stored bytes,
// every link to the one before, the stored bytes against the row's columns,
// and a terminal event when the run has ended. It returns the first break.
func VerifyRun(rc RunChain) *Problem {
	bad := func(seq int64, format string, args ...any) *Problem {
		return &Problem{RunID: rc.RunID, RunSeq: seq, What: fmt.Sprintf(format, args...)}
	}
	prev := Genesis
	ended := false
	first := rc.FirstSeq
	if first < 1 {
		first = 1
	}
	for i, r := range rc.Records {
		want := int64(i + 1)
		if r.RunSeq != want {
			return bad(want, "runSeq %d is missing (the next stored event has runSeq %d)", want, r.RunSeq)
		}
		switch r.EventType {
		case engine.RunCompleted, engine.RunFailed, engine.RunCancelled:
			ended = true
		}
		l, ok := rc.Links[r.RunSeq]
		if r.RunSeq < first {
			if ok && l.Hash != "" {
				return bad(r.RunSeq, "chained, but before the run's genesis at runSeq %d", first)
			}
			continue
		}
		if !ok || l.Hash == "" {
			return bad(r.RunSeq, "not chained (no hash)")
		}
		if l.PrevHash != prev {
			return bad(r.RunSeq, "prev_hash %s does not link to the previous event's hash %s", short(l.PrevHash), short(prev))
		}
		if len(l.EventBytes) == 0 {
			// SQLite, Postgres: the columns are the stored bytes.
			if got := Link(rc.RunID, r.RunSeq, EventBytes(r), l.PrevHash); got != l.Hash && !(rc.Retained && payloadRemoved(r) && PayloadRemovable(l)) {
				return bad(r.RunSeq, "the row does not hash to its hash %s (recomputed %s): a column or the hash was changed", short(l.Hash), short(got))
			}
		} else {
			// Snowflake: the hashed bytes are stored beside the columns.
			if got := Link(rc.RunID, r.RunSeq, l.EventBytes, l.PrevHash); got != l.Hash {
				return bad(r.RunSeq, "hash %s does not match the stored event bytes (recomputed %s)", short(l.Hash), short(got))
			}
			if what := sameEvent(l.EventBytes, r); what != "" {
				return bad(r.RunSeq, "the row's %s differs from the hashed event bytes", what)
			}
		}
		prev = l.Hash
	}
	last := int64(len(rc.Records))
	if rc.NextSeq-1 > last {
		return bad(last+1, "runSeq %d is missing: the run's sequence row says %d events were appended", last+1, rc.NextSeq-1)
	}
	if rc.Status.Terminal() && !ended {
		return bad(0, "the run ended (%s) but no terminal event is stored", rc.Status)
	}
	return nil
}

// payloadRemoved reports whether the row has no payload, as retention
// leaves it.
func payloadRemoved(r engine.RunEventRecord) bool {
	p := string(bytes.TrimSpace(r.Payload))
	return p == "" || p == "null"
}

// sameEvent names the first column where the row differs from the hashed
// bytes ("" when they agree). The payload compares as JSON values: a
// VARIANT re-serialises it.
func sameEvent(stored []byte, r engine.RunEventRecord) string {
	got, ok := splitEventBytes(stored)
	if !ok {
		return "event bytes (not in the canonical form)"
	}
	want, _ := splitEventBytes(EventBytes(r))
	names := [fieldCount]string{"eventId", "eventType", "stepId", "tenantId", "projectId", "environmentId", "planId",
		"planVersion", "logicalAttemptId", "engineAttemptId", "idempotencyKey", "emittedAt", "persistedAt", "payload"}
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

// Chains looks up a chained event's stored hash for VerifyLog.
type Chains func(runID string, runSeq int64) (hash string, ok bool)

// VerifyLog checks the global log: indexes contiguous from 0, each entry's
// hash the hash its event holds now. It returns the tree of the entries.
func VerifyLog(entries []LogEntry, events Chains) (*Tree, *Problem) {
	t := &Tree{stored: make([]tlog.Hash, 0, 2*len(entries))}
	for i, e := range entries {
		if e.Index != int64(i) {
			return nil, &Problem{What: fmt.Sprintf("log index %d is missing (the next stored index is %d)", i, e.Index)}
		}
		h, ok := events(e.RunID, e.RunSeq)
		switch {
		case !ok:
			return nil, &Problem{RunID: e.RunID, RunSeq: e.RunSeq, What: fmt.Sprintf("in the log at index %d but not in the store", e.Index)}
		case h != e.Hash:
			return nil, &Problem{RunID: e.RunID, RunSeq: e.RunSeq, What: fmt.Sprintf("the log's hash at index %d is %s, the event's is %s", e.Index, short(e.Hash), short(h))}
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
