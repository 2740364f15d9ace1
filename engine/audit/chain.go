// Package audit makes dvtrun's event log tamper-evident: a SHA-256 hash
// chain per run (computed by the append authority in the transaction that
// assigns runSeq), a global log of the chained events as an RFC 6962 Merkle
// tree (golang.org/x/mod/sumdb/tlog) and Ed25519-signed checkpoints of it
// in the C2SP signed-note format (golang.org/x/mod/sumdb/note). The
// canonical forms here are documented in README ("Tamper-evident log"):
// an auditor recomputes them without dvtrun.
package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"

	"github.com/dvtrun/dvtrun/engine"
)

// HashVersion names the canonical form of a link; it is the first line of
// every hashed text, so a later form never collides with this one.
const HashVersion = "dvtrun-chain-v1"

// Genesis is the prev_hash of a run's first chained event: 64 zeros. A run
// that existed before the chain starts at the runSeq its genesis row
// records (dvt_audit_genesis); its earlier events are not chained.
const Genesis = "0000000000000000000000000000000000000000000000000000000000000000"

// EventBytes is what the store persists in event_bytes and the chain
// hashes: the RunEvents v2 JSON of the record (the envelope, runSeq,
// persistedAt and the payload), exactly as written. The store keeps these
// bytes verbatim (TEXT/VARCHAR), so the hash never depends on how a
// VARIANT or JSONB column re-serialises the payload.
func EventBytes(rec engine.RunEventRecord) ([]byte, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "event %s cannot be encoded for the chain: %v", rec.EventID, err)
	}
	return b, nil
}

// Link returns the event's hash, lowercase hex: SHA-256 over
//
//	dvtrun-chain-v1 LF run_id LF run_seq LF event_bytes LF prev_hash
//
// with run_seq in decimal and prev_hash the previous link's hash (Genesis
// for the first). The text is unambiguous: run ids hold no control
// character, event_bytes is a JSON object, and prev_hash has a fixed length
// at the end.
func Link(runID string, runSeq int64, eventBytes []byte, prevHash string) string {
	h := sha256.New()
	h.Write([]byte(HashVersion + "\n" + runID + "\n" + strconv.FormatInt(runSeq, 10) + "\n"))
	h.Write(eventBytes)
	h.Write([]byte("\n" + prevHash))
	return hex.EncodeToString(h.Sum(nil))
}

// Chained is one event as the append authority chains it.
type Chained struct {
	PrevHash, Hash string
	EventBytes     []byte
}

// Chain links recs (consecutive runSeqs of one run) after prevHash.
func Chain(prevHash string, recs []engine.RunEventRecord) ([]Chained, error) {
	out := make([]Chained, len(recs))
	for i, r := range recs {
		b, err := EventBytes(r)
		if err != nil {
			return nil, err
		}
		h := Link(r.RunID, r.RunSeq, b, prevHash)
		out[i] = Chained{PrevHash: prevHash, Hash: h, EventBytes: b}
		prevHash = h
	}
	return out, nil
}
