package main

// An independent verifier, written from docs/guides/auditing.md ("The
// chain, byte for byte", "The retention record") alone: it does not call
// dvtrun's hashing, tree or note code (no engine/audit, no sumdb/tlog, no
// sumdb/note), only the standard library, so a mistake shared by the
// product and its own checks cannot hide here.

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/store/storetest"
)

const zeros64 = "0000000000000000000000000000000000000000000000000000000000000000"

// chainHash is the guide's hash: SHA-256 of
// "FORM LF run_id LF run_seq LF event_bytes LF prev_hash", FORM being
// dvtrun-chain-v2 (or dvtrun-chain-v1 for events appended before v2).
func chainHash(form, runID string, seq int64, eventBytes, prev string) string {
	sum := sha256.Sum256([]byte(form + "\n" + runID + "\n" + strconv.FormatInt(seq, 10) + "\n" + eventBytes + "\n" + prev))
	return hex.EncodeToString(sum[:])
}

func leafHash(raw []byte) []byte {
	h := sha256.Sum256(append([]byte{0x00}, raw...))
	return h[:]
}

func nodeHash(l, r []byte) []byte {
	h := sha256.Sum256(append(append([]byte{0x01}, l...), r...))
	return h[:]
}

// eventBytes is the guide's event bytes: each column in the guide's order
// (v2: payload_sha256 last, in the payload's place), as its length in
// bytes, ':' and its text, or '-' for NULL.
func eventBytes(cols []sql.NullString) string {
	var b strings.Builder
	for _, c := range cols {
		if !c.Valid {
			b.WriteString("-")
			continue
		}
		fmt.Fprintf(&b, "%d:%s", len(c.String), c.String)
	}
	return b.String()
}

// merkleRoot is RFC 6962's MTH over leaf hashes.
func merkleRoot(leaves [][]byte) []byte {
	switch len(leaves) {
	case 0:
		h := sha256.Sum256(nil)
		return h[:]
	case 1:
		return leaves[0]
	}
	k := 1
	for k*2 < len(leaves) {
		k *= 2
	}
	return nodeHash(merkleRoot(leaves[:k]), merkleRoot(leaves[k:]))
}

// openCheckpoint checks a signed note against a public key
// "<name>+<key id hex>+<base64 of 0x01 ‖ key>" and returns the
// checkpoint's size and root.
func openCheckpoint(note, vkey string) (int64, []byte, error) {
	text, err := openNote(note, vkey)
	if err != nil {
		return 0, nil, err
	}
	lines := strings.Split(text, "\n")
	if len(lines) < 4 || lines[0] != strings.SplitN(vkey, "+", 2)[0] {
		return 0, nil, errors.New("not a checkpoint of the key's origin")
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		return 0, nil, err
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	return size, root, err
}

// openNote checks a signed note's signature against a public key and
// returns its text (ending in a newline).
func openNote(note, vkey string) (string, error) {
	parts := strings.SplitN(vkey, "+", 3)
	if len(parts) != 3 {
		return "", errors.New("malformed public key")
	}
	keyBytes, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(keyBytes) != 33 || keyBytes[0] != 0x01 {
		return "", errors.New("not an Ed25519 public key")
	}
	id, err := hex.DecodeString(parts[1])
	if err != nil || len(id) != 4 {
		return "", errors.New("malformed key id")
	}
	text, sigs, ok := strings.Cut(note, "\n\n")
	if !ok {
		return "", errors.New("no signature block")
	}
	text += "\n"
	verified := false
	for _, line := range strings.Split(strings.TrimSuffix(sigs, "\n"), "\n") {
		name, sig, ok := strings.Cut(strings.TrimPrefix(line, "— "), " ")
		if !ok || !strings.HasPrefix(line, "— ") || name != parts[0] {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(sig)
		if err != nil || len(raw) != 4+ed25519.SignatureSize || !bytes.Equal(raw[:4], id) {
			continue
		}
		if ed25519.Verify(ed25519.PublicKey(keyBytes[1:]), []byte(text), raw[4:]) {
			verified = true
		}
	}
	if !verified {
		return "", errors.New("no signature verifies with the public key")
	}
	return text, nil
}

// checkInclusionProof checks `audit prove` output with the public key
// alone: the hash from the event's bytes, the audit path (RFC 9162
// 2.1.3.2) to the checkpoint's root, and the checkpoint's signature.
func checkInclusionProof(out, vkey string) error {
	var p struct {
		RunID      string   `json:"runId"`
		RunSeq     int64    `json:"runSeq"`
		PrevHash   string   `json:"prevHash"`
		ChainForm  string   `json:"chainForm"`
		EventBytes string   `json:"eventBytes"`
		Hash       string   `json:"hash"`
		LogIndex   int64    `json:"logIndex"`
		TreeSize   int64    `json:"treeSize"`
		Proof      []string `json:"proof"`
		Checkpoint string   `json:"checkpoint"`
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		return err
	}
	if p.ChainForm != "dvtrun-chain-v2" {
		return fmt.Errorf("a new event proven in the form %q, want dvtrun-chain-v2", p.ChainForm)
	}
	if got := chainHash(p.ChainForm, p.RunID, p.RunSeq, p.EventBytes, p.PrevHash); got != p.Hash {
		return fmt.Errorf("hash %s does not recompute (%s)", p.Hash, got)
	}
	size, root, err := openCheckpoint(p.Checkpoint, vkey)
	if err != nil {
		return err
	}
	if size != p.TreeSize || p.LogIndex >= size {
		return fmt.Errorf("index %d of a tree of %d, checkpoint of %d", p.LogIndex, p.TreeSize, size)
	}
	raw, err := hex.DecodeString(p.Hash)
	if err != nil {
		return err
	}
	fn, sn, r := p.LogIndex, size-1, leafHash(raw)
	for _, b64 := range p.Proof {
		sib, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return err
		}
		if sn == 0 {
			return errors.New("proof too long")
		}
		if fn&1 == 1 || fn == sn {
			r = nodeHash(sib, r)
			for fn&1 == 0 && fn != 0 {
				fn, sn = fn>>1, sn>>1
			}
		} else {
			r = nodeHash(r, sib)
		}
		fn, sn = fn>>1, sn>>1
	}
	if sn != 0 || !bytes.Equal(r, root) {
		return errors.New("the audit path does not lead to the checkpoint's root")
	}
	return nil
}

// TestIndependentVerifier recomputes the chain and the root of a real run
// straight from the store's tables and checks the checkpoint's signature,
// as appended and after retention (the guide's "Retention": the payloads
// gone, their digests kept, a signed record in the log).
func TestIndependentVerifier(t *testing.T) {
	t.Parallel()
	for _, retain := range []bool{false, true} {
		t.Run(fmt.Sprintf("retained=%v", retain), func(t *testing.T) {
			t.Parallel()
			independentVerifier(t, retain)
		})
	}
}

func independentVerifier(t *testing.T, retain bool) {
	h, runID, cpFile := auditHarness(t)
	if retain {
		if r := h.run("audit", "retain", "--older-than", "1ns"); r.code != 0 {
			t.Fatalf("audit retain: %d %s", r.code, r.stderr)
		}
		if r := h.run("audit", "checkpoint", "--out", cpFile); r.code != 0 {
			t.Fatalf("audit checkpoint: %d %s", r.code, r.stderr)
		}
	}
	db, err := sql.Open("sqlite", h.statePath())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()

	// Retention records: signed notes "dvtrun-retention-v1 LF seq LF run
	// LF …"; their log leaf is the SHA-256 of the note.
	records, retained := map[int64]string{}, map[string]bool{}
	rrows, err := db.QueryContext(ctx, `SELECT run_id, seq, note FROM dvt_audit_retention`)
	if err != nil {
		t.Fatal(err)
	}
	for rrows.Next() {
		var run, note string
		var seq int64
		if err := rrows.Scan(&run, &seq, &note); err != nil {
			t.Fatal(err)
		}
		text, err := openNote(note, storetest.TestPublicKey)
		if err != nil {
			t.Fatalf("retention record of %s: %v", run, err)
		}
		if f := strings.Split(text, "\n"); len(f) < 3 || f[0] != "dvtrun-retention-v1" || f[1] != strconv.FormatInt(seq, 10) || f[2] != run {
			t.Fatalf("retention record of %s: %q", run, text)
		}
		sum := sha256.Sum256([]byte(note))
		records[seq], retained[run] = hex.EncodeToString(sum[:]), true
	}
	rrows.Close()
	if len(records) != map[bool]int{false: 0, true: 1}[retain] {
		t.Fatalf("%d retention records, want one per retained run", len(records))
	}

	rows, err := db.QueryContext(ctx, `SELECT run_id, run_seq, prev_hash, hash, event_id, event_type, step_id, tenant_id,
		project_id, environment_id, plan_id, plan_version, CAST(logical_attempt_id AS TEXT), CAST(engine_attempt_id AS TEXT),
		idempotency_key, emitted_at, persisted_at, payload_sha256, payload FROM dvt_run_events ORDER BY run_id, run_seq`)
	if err != nil {
		t.Fatal(err)
	}
	hashes := map[string]string{}
	prev, lastRun, n := "", "", 0
	for rows.Next() {
		var run, ph, hh string
		var seq int64
		cols := make([]sql.NullString, 14)
		var payload sql.NullString
		dest := []any{&run, &seq, &ph, &hh}
		for i := range cols {
			dest = append(dest, &cols[i])
		}
		if err := rows.Scan(append(dest, &payload)...); err != nil {
			t.Fatal(err)
		}
		// v2: the payload enters as its digest; the payload must be the
		// digest's (an event without one has both NULL; retention removes
		// the payload and keeps the digest).
		if digest := cols[13]; payload.Valid != digest.Valid && !(digest.Valid && retained[run]) {
			t.Fatalf("%s/%d: payload present %v, payload_sha256 present %v", run, seq, payload.Valid, digest.Valid)
		} else if payload.Valid {
			if sum := sha256.Sum256([]byte(payload.String)); hex.EncodeToString(sum[:]) != digest.String {
				t.Fatalf("%s/%d: payload_sha256 %s is not the payload's digest", run, seq, digest.String)
			}
		}
		eb := eventBytes(cols)
		if run != lastRun {
			prev, lastRun = zeros64, run
		}
		if ph != prev {
			t.Fatalf("%s/%d: prev_hash %s, want %s", run, seq, ph, prev)
		}
		if got := chainHash("dvtrun-chain-v2", run, seq, eb, ph); got != hh {
			t.Fatalf("%s/%d: hash %s, recomputed %s", run, seq, hh, got)
		}
		hashes[fmt.Sprintf("%s/%d", run, seq)] = hh
		prev = hh
		n++
	}
	rows.Close()
	if lastRun != runID || n < 10 {
		t.Fatalf("%d chained events of %q, want the run %s's", n, lastRun, runID)
	}

	note, err := os.ReadFile(cpFile)
	if err != nil {
		t.Fatal(err)
	}
	size, root, err := openCheckpoint(string(note), storetest.TestPublicKey)
	if err != nil {
		t.Fatalf("checkpoint: %v\n%s", err, note)
	}
	if _, _, err := openCheckpoint(string(note), storetest.OtherPublicKey); err == nil {
		t.Fatal("the checkpoint verifies with another key")
	}
	lrows, err := db.QueryContext(ctx, `SELECT log_index, run_id, run_seq, hash FROM dvt_audit_log ORDER BY log_index`)
	if err != nil {
		t.Fatal(err)
	}
	var leaves [][]byte
	for lrows.Next() {
		var idx, seq int64
		var run, hh string
		if err := lrows.Scan(&idx, &run, &seq, &hh); err != nil {
			t.Fatal(err)
		}
		want := hashes[fmt.Sprintf("%s/%d", run, seq)]
		if run == "dvtrun.audit.retention" {
			want = records[seq]
		}
		if idx != int64(len(leaves)) || want != hh {
			t.Fatalf("log index %d: %s/%d %s is not the stored event's hash", idx, run, seq, hh)
		}
		raw, _ := hex.DecodeString(hh)
		leaves = append(leaves, leafHash(raw))
	}
	lrows.Close()
	if size != int64(n+len(records)) || int64(len(leaves)) != size {
		t.Fatalf("checkpoint of %d, log of %d, %d chained events", size, len(leaves), n)
	}
	if got := merkleRoot(leaves); !bytes.Equal(got, root) {
		t.Fatalf("root %x, the checkpoint signs %x", got, root)
	}
}
