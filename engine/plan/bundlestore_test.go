package plan

import (
	"bytes"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/dvtrun/dvtrun/engine"
)

// TestStoredBundleRoundTrip: a bundle encoded for the store decodes to the
// same bundle (sha256, files, SQL read from its files, seed bytes) with no
// file system; bytes that are not the bundle they claim are STORE_CORRUPT.
func TestStoredBundleRoundTrip(t *testing.T) {
	fsys := bundleFS()
	b, err := LoadBundle(fsys, "proj/plan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data, err := EncodeBundle(b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeBundle(b.Ref.SHA256, data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Ref.SHA256 != b.Ref.SHA256 || got.Ref.URI != "proj/plan.yaml" || len(got.Ref.Files) != 3 {
		t.Fatalf("decoded ref %+v, want %+v", got.Ref, b.Ref)
	}
	if final, _ := got.Plan.Step("model.final"); final.SQL != "select id from file" {
		t.Errorf("model.final SQL %q", final.SQL)
	}
	if seed := got.Plan.Seeds["seeds/raw.csv"]; !bytes.Equal(seed, fsys["proj/seeds/raw.csv"].Data) {
		t.Errorf("seed bytes %q", seed)
	}
	for _, f := range []string{"plan.yaml", "models/final.sql", "./seeds/raw.csv"} {
		if _, ok := got.File(f); !ok {
			t.Errorf("File(%q) not found", f)
		}
	}
	if _, ok := got.File("nope.sql"); ok {
		t.Error("File of a path outside the bundle was found")
	}

	corrupt := []struct {
		name string
		sha  string
		data []byte
	}{
		{"another bundle's sha256", strings.Repeat("0", 64), data},
		{"a file's bytes changed", b.Ref.SHA256, bytes.Replace(data, []byte(`"content":"aWQKMQo="`), []byte(`"content":"aWQKMgo="`), 1)},
		{"not an encoding", b.Ref.SHA256, []byte("{")},
		{"no files", b.Ref.SHA256, []byte(`{"files":[]}`)},
	}
	for _, c := range corrupt {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "a file's bytes changed" && bytes.Equal(c.data, data) {
				t.Fatal("the edit did not apply: the seed's encoding changed")
			}
			if _, err := DecodeBundle(c.sha, c.data); engine.CodeOf(err) != engine.CodeStoreCorrupt {
				t.Fatalf("DecodeBundle: %v, want STORE_CORRUPT", err)
			}
		})
	}
}

// TestStoredBundleSizeBound: a bundle whose files exceed MaxBundleBytes is
// refused with PLAN_INVALID saying the limit; one at the limit is kept.
func TestStoredBundleSizeBound(t *testing.T) {
	plan := "planId: big\nplanVersion: \"1\"\nsteps:\n  - {id: sql.a, kind: sql, path: a.sql}\n"
	for _, tc := range []struct {
		name    string
		sqlSize int
		wantErr bool
	}{
		{"at the limit", MaxBundleBytes - len(plan), false},
		{"one byte over", MaxBundleBytes - len(plan) + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sql := append([]byte("select 1 -- "), bytes.Repeat([]byte("x"), tc.sqlSize-12)...)
			b, err := LoadBundle(fstest.MapFS{"plan.yaml": {Data: []byte(plan)}, "a.sql": {Data: sql}}, "plan.yaml")
			if err != nil {
				t.Fatal(err)
			}
			_, err = EncodeBundle(b)
			switch {
			case tc.wantErr && (engine.CodeOf(err) != engine.CodePlanInvalid || !strings.Contains(err.Error(), "up to 16777216 bytes")):
				t.Fatalf("EncodeBundle: %v, want PLAN_INVALID naming the limit", err)
			case !tc.wantErr && err != nil:
				t.Fatalf("EncodeBundle: %v", err)
			}
		})
	}
}
