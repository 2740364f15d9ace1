package plan

import (
	"cmp"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dvtrun/dvtrun/engine"
)

// MaxBundleBytes bounds a stored plan bundle: the sum of its files' sizes.
// Plans are small; a bigger bundle is refused (PLAN_INVALID) before a run
// or request is recorded rather than stored.
const MaxBundleBytes = 16 << 20

// BundleStore keeps plan bundles content-addressed by their sha256 (the
// PlanRef's), so that a worker, `resume`, `retry` or `plan show` reads what
// a run ran from the state store, not from a path the enqueuing process saw.
type BundleStore interface {
	// PutPlanBundle stores data (EncodeBundle's) as bundle sha256 unless it
	// is stored: storing the same bundle again writes nothing.
	PutPlanBundle(ctx context.Context, sha256 string, data []byte) error
	// GetPlanBundle returns what PutPlanBundle stored as sha256; ok is false
	// when it never was (a run recorded before bundles were stored).
	GetPlanBundle(ctx context.Context, sha256 string) (data []byte, ok bool, err error)
}

// storedBundle is a stored bundle's encoding: its files in manifest order
// (the plan file first), each with its bytes.
type storedBundle struct {
	URI   string       `json:"uri,omitempty"` // where it was first read: informational
	Files []storedFile `json:"files"`
}

type storedFile struct {
	Path    string `json:"path"`
	SHA256  string `json:"sha256"`
	Content []byte `json:"content"`
}

// EncodeBundle is what the state store keeps of b: every file's bytes with
// the manifest. PLAN_INVALID when the files exceed MaxBundleBytes.
func EncodeBundle(b *Bundle) ([]byte, error) {
	sb := storedBundle{URI: b.Ref.URI}
	total := 0
	for _, f := range b.Ref.Files {
		c, ok := b.Files[f.Path]
		if !ok {
			return nil, engine.Errorf(engine.CodePlanInvalid, "plan %s: file %s of the bundle was not read", engine.QuoteText(b.Ref.URI), engine.QuoteText(f.Path))
		}
		total += len(c)
		sb.Files = append(sb.Files, storedFile{Path: f.Path, SHA256: f.SHA256, Content: c})
	}
	if total > MaxBundleBytes {
		return nil, engine.Errorf(engine.CodePlanInvalid, "plan %s: its bundle (the plan and the %d file(s) it references) is %d bytes; the state store keeps bundles up to %d bytes", engine.QuoteText(b.Ref.URI), len(b.Ref.Files)-1, total, MaxBundleBytes)
	}
	return json.Marshal(sb)
}

// DecodeBundle loads a stored bundle (EncodeBundle's data) as LoadBundle
// loads one from disk, and checks that it is bundle sha256: STORE_CORRUPT
// when the bytes are not what they claim.
func DecodeBundle(sha256 string, data []byte) (*Bundle, error) {
	var sb storedBundle
	if err := json.Unmarshal(data, &sb); err != nil || len(sb.Files) == 0 {
		return nil, engine.Errorf(engine.CodeStoreCorrupt, "stored plan bundle %s cannot be read", sha256)
	}
	src := memSource{}
	for _, f := range sb.Files {
		src[filepath.Clean(f.Path)] = f.Content
	}
	b, err := LoadBundle(src, sb.Files[0].Path)
	if err != nil {
		return nil, err
	}
	if !strings.EqualFold(b.Ref.SHA256, sha256) {
		return nil, engine.Errorf(engine.CodeStoreCorrupt, "stored plan bundle %s hashes to %s", sha256, b.Ref.SHA256)
	}
	b.Ref.URI = cmp.Or(sb.URI, b.Ref.URI)
	return b, nil
}

// BundleFileNames lists a bundle's files in manifest order.
func (b *Bundle) BundleFileNames() []string {
	names := make([]string, 0, len(b.Ref.Files))
	for _, f := range b.Ref.Files {
		names = append(names, f.Path)
	}
	return names
}

// File returns one file of the bundle by its path as the plan names it
// (the plan file by its base name).
func (b *Bundle) File(path string) ([]byte, bool) {
	if c, ok := b.Files[path]; ok {
		return c, true
	}
	i := slices.IndexFunc(b.Ref.Files, func(f engine.BundleFile) bool { return filepath.Clean(f.Path) == filepath.Clean(path) })
	if i < 0 {
		return nil, false
	}
	c, ok := b.Files[b.Ref.Files[i].Path]
	return c, ok
}

// memSource reads a stored bundle's files by their cleaned paths: a plan
// loaded from it has Dir ".", so FilePath cleans the paths the plan names.
type memSource map[string][]byte

func (m memSource) ReadFile(name string) ([]byte, error) {
	if b, ok := m[filepath.Clean(name)]; ok {
		return b, nil
	}
	return nil, engine.Errorf(engine.CodeStoreCorrupt, "the stored bundle has no file %s", engine.QuoteText(name))
}
