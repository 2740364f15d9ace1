package audit

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/dvtrun/dvtrun/engine"
)

// DefaultOrigin is the checkpoint origin (and key name) unless configured.
const DefaultOrigin = "dvtrun.audit"

// Checkpoint is a signed statement of the log: its origin, size and root.
type Checkpoint struct {
	Origin string
	Size   int64
	Root   tlog.Hash
	// Note is the signed note (text and signature lines), as published.
	Note []byte
}

// checkpointText is the C2SP tlog-checkpoint body: origin, tree size in
// decimal and the root in base64, each on its own line.
func checkpointText(origin string, size int64, root tlog.Hash) string {
	return fmt.Sprintf("%s\n%d\n%s\n", origin, size, base64.StdEncoding.EncodeToString(root[:]))
}

// Sign makes the signed checkpoint of a tree of size leaves with root.
// skey is a note signer key (PRIVATE+KEY+name+hash+key); its name is the
// origin, as C2SP recommends.
func Sign(skey string, size int64, root tlog.Hash) (Checkpoint, error) {
	s, err := note.NewSigner(strings.TrimSpace(skey))
	if err != nil {
		return Checkpoint{}, engine.Errorf(engine.CodeConfigInvalid, "the audit signing key is not a signed-note private key (%v)", err)
	}
	msg, err := note.Sign(&note.Note{Text: checkpointText(s.Name(), size, root)}, s)
	if err != nil {
		return Checkpoint{}, engine.Errorf(engine.CodeConfigInvalid, "cannot sign the checkpoint: %v", err)
	}
	return Checkpoint{Origin: s.Name(), Size: size, Root: root, Note: msg}, nil
}

// PublicKey returns the verifier key (name+hash+key) of a signer key.
func PublicKey(skey string) (string, error) {
	// A signer key is PRIVATE+KEY+name+hash+key; its verifier key holds the
	// public half of the same Ed25519 key.
	if _, err := note.NewSigner(strings.TrimSpace(skey)); err != nil {
		return "", engine.Errorf(engine.CodeConfigInvalid, "the audit signing key is not a signed-note private key (%v)", err)
	}
	parts := strings.Split(strings.TrimPrefix(strings.TrimSpace(skey), "PRIVATE+KEY+"), "+")
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(raw) != 33 || raw[0] != 1 {
		return "", engine.Errorf(engine.CodeConfigInvalid, "the audit signing key is not an Ed25519 key")
	}
	pub := ed25519.NewKeyFromSeed(raw[1:]).Public().(ed25519.PublicKey)
	return note.NewEd25519VerifierKey(parts[0], pub)
}

// GenerateKey makes a new signing key named origin and its public key.
func GenerateKey(rand io.Reader, origin string) (skey, vkey string, err error) {
	return note.GenerateKey(rand, origin)
}

// Open checks a signed checkpoint against the pinned public key vkey and
// parses it.
func Open(msg []byte, vkey string) (Checkpoint, error) {
	v, err := note.NewVerifier(strings.TrimSpace(vkey))
	if err != nil {
		return Checkpoint{}, engine.Errorf(engine.CodeInvalidArgument, "the audit public key is not a signed-note verifier key (%v)", err)
	}
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		var unknown *note.UnknownVerifierError
		var unverified *note.UnverifiedNoteError
		if errors.As(err, &unknown) || errors.As(err, &unverified) {
			return Checkpoint{}, fmt.Errorf("not signed by the pinned key %s", vkey)
		}
		return Checkpoint{}, fmt.Errorf("signature does not verify with the pinned key %s: %v", v.Name(), err)
	}
	lines := strings.SplitN(n.Text, "\n", 4)
	if len(lines) < 4 || lines[0] != v.Name() {
		return Checkpoint{}, fmt.Errorf("not a checkpoint of origin %s", v.Name())
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 || lines[1] != strconv.FormatInt(size, 10) {
		return Checkpoint{}, fmt.Errorf("malformed tree size %q", lines[1])
	}
	raw, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(raw) != tlog.HashSize {
		return Checkpoint{}, fmt.Errorf("malformed root hash %q", lines[2])
	}
	var root tlog.Hash
	copy(root[:], raw)
	return Checkpoint{Origin: lines[0], Size: size, Root: root, Note: bytes.Clone(msg)}, nil
}
