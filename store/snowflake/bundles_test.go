package snowflake_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
)

// TestPlanBundleRowsOnSnowflake: Snowflake enforces no key, so two
// writers storing one bundle at once may both insert its rows; the bundle
// still reads back whole. A chunk that is missing is STORE_CORRUPT, not a
// shorter bundle.
func TestPlanBundleRowsOnSnowflake(t *testing.T) {
	srv := sftest.Start(t)
	s := openStore(t, srv.DSN("dvt", "bundles"), snowflake.Options{})
	defer s.Close()
	sha := strings.Repeat("c3", 32)
	data := bytes.Repeat([]byte("0123456789"), (5<<20)/20) // two and a half chunks
	if err := s.PutPlanBundle(ctx, sha, data); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"INSERT INTO dvt_plan_bundle_chunks SELECT * FROM dvt_plan_bundle_chunks",
		"INSERT INTO dvt_plan_bundles SELECT * FROM dvt_plan_bundles",
	} {
		if _, err := s.DB().ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if got, ok, err := s.GetPlanBundle(ctx, sha); err != nil || !ok || !bytes.Equal(got, data) {
		t.Fatalf("with every row twice: ok=%v err=%v, %d bytes of %d", ok, err, len(got), len(data))
	}
	if _, err := s.DB().ExecContext(ctx, "DELETE FROM dvt_plan_bundle_chunks WHERE seq = 1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetPlanBundle(ctx, sha); engine.CodeOf(err) != engine.CodeStoreCorrupt {
		t.Fatalf("a chunk missing: %v, want STORE_CORRUPT", err)
	}
}
