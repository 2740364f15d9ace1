package storetest

import (
	"bytes"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
)

// testPlanBundles: a bundle is stored by its sha256 and read back byte for
// byte by another handle; storing it again keeps one copy; a bundle larger
// than one chunk row comes back whole; an unknown sha256 is not found.
func testPlanBundles(t *testing.T, b Backend) {
	s1, s2 := b.Open(t), b.Open(t)
	defer s1.Close()
	defer s2.Close()
	small := []byte(`{"files":[{"path":"plan.yaml","sha256":"x","content":"cGxhbklkOiBw"}]}`)
	// Two chunk rows and a bit (1 MiB each), with every byte value a JSON
	// encoding can hold.
	big := bytes.Repeat([]byte("0123456789abcdef\"\\/+="), (2<<20)/21+7)
	cases := []struct {
		name, sha string
		data      []byte
	}{
		{"small", strings.Repeat("a1", 32), small},
		{"several chunks", strings.Repeat("b2", 32), big},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, ok, err := s2.GetPlanBundle(ctx, c.sha); err != nil || ok {
				t.Fatalf("before put: ok=%v err=%v, want not found", ok, err)
			}
			for i := range 2 { // the second put is a no-op
				if err := s1.PutPlanBundle(ctx, c.sha, c.data); err != nil {
					t.Fatalf("put #%d: %v", i+1, err)
				}
			}
			got, ok, err := s2.GetPlanBundle(ctx, c.sha)
			if err != nil || !ok {
				t.Fatalf("get: ok=%v err=%v", ok, err)
			}
			if !bytes.Equal(got, c.data) {
				t.Fatalf("get returned %d bytes that differ from the %d stored", len(got), len(c.data))
			}
		})
	}
	// Content-addressed: a put of other bytes under a stored sha256 does not
	// replace them (the caller's sha256 names the content).
	if err := s1.PutPlanBundle(ctx, cases[0].sha, []byte(`{"other":true}`)); err != nil {
		t.Fatalf("put again: %v", err)
	}
	if got, _, _ := s2.GetPlanBundle(ctx, cases[0].sha); !bytes.Equal(got, small) {
		t.Fatalf("a second put replaced the stored bundle: %q", got)
	}
	if err := s1.PutPlanBundle(ctx, "", small); engine.CodeOf(err) != engine.CodeInvalidArgument {
		t.Fatalf("put without sha256: %v, want INVALID_ARGUMENT", err)
	}
}
