package audit

import (
	"encoding/hex"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/dvtrun/dvtrun/engine"
)

// Tree is the global log held in memory: every stored hash of the RFC 6962
// tree (tlog's layout), so the root of any size and any proof are read
// from it. A leaf's record is the event's 32-byte chain hash, so its leaf
// hash is SHA-256(0x00 || hash).
type Tree struct {
	n      int64
	stored []tlog.Hash
}

// Add appends the next leaf: an event's chain hash in hex.
func (t *Tree) Add(hashHex string) error {
	raw, err := hex.DecodeString(hashHex)
	if err != nil || len(raw) != 32 {
		return engine.Errorf(engine.CodeStoreCorrupt, "log index %d: hash %q is not 64 hex digits", t.n, hashHex)
	}
	hs, err := tlog.StoredHashes(t.n, raw, t)
	if err != nil {
		return err
	}
	t.stored = append(t.stored, hs...)
	t.n++
	return nil
}

// Size is the number of leaves.
func (t *Tree) Size() int64 { return t.n }

// ReadHashes implements tlog.HashReader.
func (t *Tree) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		if x < 0 || x >= int64(len(t.stored)) {
			return nil, fmt.Errorf("audit: stored hash %d is beyond the tree of %d leaves", x, t.n)
		}
		out[i] = t.stored[x]
	}
	return out, nil
}

// Root is the Merkle root of the first n leaves.
func (t *Tree) Root(n int64) (tlog.Hash, error) {
	if n > t.n {
		return tlog.Hash{}, engine.Errorf(engine.CodeStoreCorrupt, "a checkpoint of %d events, but the log holds only %d", n, t.n)
	}
	return tlog.TreeHash(n, t)
}

// LeafHash is the RFC 6962 leaf hash of an event's chain hash.
func LeafHash(hashHex string) (tlog.Hash, error) {
	raw, err := hex.DecodeString(hashHex)
	if err != nil || len(raw) != 32 {
		return tlog.Hash{}, engine.Errorf(engine.CodeInvalidArgument, "hash %q is not 64 hex digits", hashHex)
	}
	return tlog.RecordHash(raw), nil
}
