// Package audit makes dvtrun's event log tamper-evident: a SHA-256 hash
// chain per run (computed by the append authority in the transaction that
// assigns runSeq), a global log of the chained events as an RFC 6962 Merkle
// tree (golang.org/x/mod/sumdb/tlog) and Ed25519-signed checkpoints of it
// in the C2SP signed-note format (golang.org/x/mod/sumdb/note). The
// canonical forms here are documented in docs/guides/auditing.md:
// an auditor recomputes them without dvtrun.
package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/dvtrun/dvtrun/engine"
)

// HashVersion names the first canonical form of a link; it is the first
// line of every hashed text, so a later form never collides with it. Events
// appended before HashVersion2 keep their v1 links.
const HashVersion = "dvtrun-chain-v1"

// HashVersion2 names the form every event is appended with now: the same
// columns, but the payload enters as its SHA-256 digest (the row's
// payload_sha256), so retention can remove the payload and every other
// column stays covered by the hash.
const HashVersion2 = "dvtrun-chain-v2"

// Genesis is the prev_hash of a run's first chained event: 64 zeros. A run
// that existed before the chain starts at the runSeq its genesis row
// records (dvt_audit_genesis); its earlier events are not chained.
const Genesis = "0000000000000000000000000000000000000000000000000000000000000000"

// fieldCount is the number of event columns in EventBytes.
const fieldCount = 14

// EventBytes is the event as the chain hashes it: the row's columns as the
// SQLite and Postgres stores keep them, in this order — event_id,
// event_type, step_id, tenant_id, project_id, environment_id, plan_id,
// plan_version, logical_attempt_id, engine_attempt_id, idempotency_key,
// emitted_at, persisted_at, payload — each written as its length in bytes,
// ':' and its text, or '-' for NULL. Times are engine.TimeFormat (RFC 3339,
// UTC, nine fractional digits) and the payload is its JSON text exactly as
// stored. The length prefixes make the form unambiguous whatever a value
// holds; the SQL view recomputes it from the columns. (Snowflake keeps
// these bytes in event_bytes: its payload VARIANT re-serialises.)
func EventBytes(rec engine.RunEventRecord) []byte {
	p := string(rec.Payload)
	return eventBytes(rec, p, p == "" || p == "null")
}

// EventBytesV2 is the event as the v2 chain hashes it: EventBytes with the
// last field the payload's digest (PayloadDigest: 64 lowercase hex digits,
// or '-' for an event appended without a payload) instead of the payload.
func EventBytesV2(rec engine.RunEventRecord, payloadSHA256 string) []byte {
	return eventBytes(rec, payloadSHA256, payloadSHA256 == "")
}

// PayloadDigest is the payload_sha256 of a payload: SHA-256 of its JSON
// text exactly as appended, lowercase hex; "" when there is none (the
// stores keep an empty or JSON null payload as NULL).
func PayloadDigest(payload []byte) string {
	if len(payload) == 0 || string(payload) == "null" {
		return ""
	}
	d := sha256.Sum256(payload)
	return hex.EncodeToString(d[:])
}

func eventBytes(rec engine.RunEventRecord, last string, lastNull bool) []byte {
	// Sized once: the fixed-width times, attempts and length prefixes fit
	// in 160 bytes beside the text columns.
	b := make([]byte, 0, 160+len(rec.EventID)+len(rec.EventType)+len(rec.StepID)+len(rec.TenantID)+len(rec.ProjectID)+
		len(rec.EnvironmentID)+len(rec.PlanID)+len(rec.PlanVersion)+len(rec.IdempotencyKey)+len(last))
	add := func(v string) {
		b = strconv.AppendInt(b, int64(len(v)), 10)
		b = append(b, ':')
		b = append(b, v...)
	}
	addNull := func(v string, null bool) {
		if null {
			b = append(b, '-')
			return
		}
		add(v)
	}
	add(rec.EventID)
	add(string(rec.EventType))
	addNull(rec.StepID, rec.StepID == "")
	add(rec.TenantID)
	add(rec.ProjectID)
	add(rec.EnvironmentID)
	add(rec.PlanID)
	add(rec.PlanVersion)
	add(strconv.Itoa(rec.LogicalAttemptID))
	add(strconv.Itoa(rec.EngineAttemptID))
	add(rec.IdempotencyKey)
	add(rec.EmittedAt.UTC().Format(engine.TimeFormat))
	add(rec.PersistedAt.UTC().Format(engine.TimeFormat))
	addNull(last, lastNull)
	return b
}

// splitEventBytes reads EventBytes back into its fields (nil for NULL);
// ok is false for bytes not in the form.
func splitEventBytes(b []byte) (fields []*string, ok bool) {
	for len(b) > 0 {
		if b[0] == '-' {
			fields, b = append(fields, nil), b[1:]
			continue
		}
		i := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == 0 || i == len(b) || b[i] != ':' {
			return nil, false
		}
		n, err := strconv.Atoi(string(b[:i]))
		if err != nil || i+1+n > len(b) {
			return nil, false
		}
		v := string(b[i+1 : i+1+n])
		fields, b = append(fields, &v), b[i+1+n:]
	}
	return fields, len(fields) == fieldCount
}

// Link returns the event's hash, lowercase hex: SHA-256 over
//
//	dvtrun-chain-v1 LF run_id LF run_seq LF event_bytes LF prev_hash
//
// with run_seq in decimal and prev_hash the previous link's hash (Genesis
// for the first). prev_hash has a fixed length at the end and event_bytes
// is length-prefixed, so the text is unambiguous (run ids hold no LF).
func Link(runID string, runSeq int64, eventBytes []byte, prevHash string) string {
	return link(HashVersion, runID, runSeq, eventBytes, prevHash)
}

// LinkV2 is Link in the v2 form: the same text with dvtrun-chain-v2 first
// and EventBytesV2 as the event bytes.
func LinkV2(runID string, runSeq int64, eventBytes []byte, prevHash string) string {
	return link(HashVersion2, runID, runSeq, eventBytes, prevHash)
}

func link(version, runID string, runSeq int64, eventBytes []byte, prevHash string) string {
	h := sha256.New()
	h.Write([]byte(version + "\n" + runID + "\n" + strconv.FormatInt(runSeq, 10) + "\n"))
	h.Write(eventBytes)
	h.Write([]byte("\n" + prevHash))
	return hex.EncodeToString(h.Sum(nil))
}

// Chained is one event as the append authority chains it (v2).
type Chained struct {
	PrevHash, Hash string
	// EventBytes are the hashed bytes (EventBytesV2; Snowflake stores them).
	EventBytes []byte
	// PayloadSHA256 is the row's payload_sha256 ("" for NULL).
	PayloadSHA256 string
}

// Chain links recs (consecutive runSeqs of one run) after prevHash, in the
// v2 form.
func Chain(prevHash string, recs []engine.RunEventRecord) []Chained {
	out := make([]Chained, len(recs))
	for i, r := range recs {
		d := PayloadDigest(r.Payload)
		b := EventBytesV2(r, d)
		h := LinkV2(r.RunID, r.RunSeq, b, prevHash)
		out[i] = Chained{PrevHash: prevHash, Hash: h, EventBytes: b, PayloadSHA256: d}
		prevHash = h
	}
	return out
}
