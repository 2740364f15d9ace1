package main

// An independent verifier, written from README's "Tamper-evident log"
// alone: it does not call dvtrun's hashing, tree or note code (no
// engine/audit, no sumdb/tlog, no sumdb/note), only the standard library,
// so a mistake shared by the product and its own checks cannot hide here.

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

// chainHash is README's hash: SHA-256 of
// "dvtrun-chain-v1 LF run_id LF run_seq LF event_bytes LF prev_hash".
func chainHash(runID string, seq int64, eventBytes, prev string) string {
	sum := sha256.Sum256([]byte("dvtrun-chain-v1\n" + runID + "\n" + strconv.FormatInt(seq, 10) + "\n" + eventBytes + "\n" + prev))
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

// eventBytes is README's event bytes: each column in README's order, as
// its length in bytes, ':' and its text, or '-' for NULL.
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
	parts := strings.SplitN(vkey, "+", 3)
	if len(parts) != 3 {
		return 0, nil, errors.New("malformed public key")
	}
	keyBytes, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(keyBytes) != 33 || keyBytes[0] != 0x01 {
		return 0, nil, errors.New("not an Ed25519 public key")
	}
	id, err := hex.DecodeString(parts[1])
	if err != nil || len(id) != 4 {
		return 0, nil, errors.New("malformed key id")
	}
	text, sigs, ok := strings.Cut(note, "\n\n")
	if !ok {
		return 0, nil, errors.New("no signature block")
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
		return 0, nil, errors.New("no signature verifies with the public key")
	}
	lines := strings.Split(text, "\n")
	if len(lines) < 4 || lines[0] != parts[0] {
		return 0, nil, errors.New("not a checkpoint of the key's origin")
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		return 0, nil, err
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	return size, root, err
}

// checkInclusionProof checks `audit prove` output with the public key
// alone: the hash from the event's bytes, the audit path (RFC 9162
// 2.1.3.2) to the checkpoint's root, and the checkpoint's signature.
func checkInclusionProof(out, vkey string) error {
	var p struct {
		RunID      string   `json:"runId"`
		RunSeq     int64    `json:"runSeq"`
		PrevHash   string   `json:"prevHash"`
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
	if got := chainHash(p.RunID, p.RunSeq, p.EventBytes, p.PrevHash); got != p.Hash {
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
// straight from the store's tables and checks the checkpoint's signature.
func TestIndependentVerifier(t *testing.T) {
	t.Parallel()
	h, runID, cpFile := auditHarness(t)
	db, err := sql.Open("sqlite", h.statePath())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()

	rows, err := db.QueryContext(ctx, `SELECT run_id, run_seq, prev_hash, hash, event_id, event_type, step_id, tenant_id,
		project_id, environment_id, plan_id, plan_version, CAST(logical_attempt_id AS TEXT), CAST(engine_attempt_id AS TEXT),
		idempotency_key, emitted_at, persisted_at, payload FROM dvt_run_events ORDER BY run_id, run_seq`)
	if err != nil {
		t.Fatal(err)
	}
	hashes := map[string]string{}
	prev, lastRun, n := "", "", 0
	for rows.Next() {
		var run, ph, hh string
		var seq int64
		cols := make([]sql.NullString, 14)
		dest := []any{&run, &seq, &ph, &hh}
		for i := range cols {
			dest = append(dest, &cols[i])
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		eb := eventBytes(cols)
		if run != lastRun {
			prev, lastRun = zeros64, run
		}
		if ph != prev {
			t.Fatalf("%s/%d: prev_hash %s, want %s", run, seq, ph, prev)
		}
		if got := chainHash(run, seq, eb, ph); got != hh {
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
		if idx != int64(len(leaves)) || hashes[fmt.Sprintf("%s/%d", run, seq)] != hh {
			t.Fatalf("log index %d: %s/%d %s is not the stored event's hash", idx, run, seq, hh)
		}
		raw, _ := hex.DecodeString(hh)
		leaves = append(leaves, leafHash(raw))
	}
	lrows.Close()
	if size != int64(n) || int64(len(leaves)) != size {
		t.Fatalf("checkpoint of %d, log of %d, %d chained events", size, len(leaves), n)
	}
	if got := merkleRoot(leaves); !bytes.Equal(got, root) {
		t.Fatalf("root %x, the checkpoint signs %x", got, root)
	}
}
