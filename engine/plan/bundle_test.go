package plan

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/dvtrun/dvtrun/engine"
)

// bundleFS is a plan whose model SQL and seed live in files.
func bundleFS() fstest.MapFS {
	text := strings.Replace(basePlan, `sql: "select id from stg"`, `path: models/final.sql`, 1)
	return fstest.MapFS{
		"proj/plan.yaml":        {Data: []byte(text)},
		"proj/models/final.sql": {Data: []byte("select id from file")},
		"proj/seeds/raw.csv":    {Data: []byte("id\n1\n")},
	}
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestLoadBundle(t *testing.T) {
	fsys := bundleFS()
	b, err := LoadBundle(fsys, "proj/plan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The manifest is sha256sum's output: the plan first, then the files by path.
	manifest := hexSum(fsys["proj/plan.yaml"].Data) + "  plan.yaml\n" +
		hexSum(fsys["proj/models/final.sql"].Data) + "  models/final.sql\n" +
		hexSum(fsys["proj/seeds/raw.csv"].Data) + "  seeds/raw.csv\n"
	if b.Ref.SHA256 != hexSum([]byte(manifest)) || len(b.Ref.Files) != 3 || b.Ref.PlanID != "p" || b.Ref.URI != "proj/plan.yaml" {
		t.Errorf("ref %+v, want sha256 of\n%s", b.Ref, manifest)
	}
	if final, _ := b.Plan.Step("model.final"); final.SQL != "select id from file" {
		t.Errorf("model.final SQL %q", final.SQL)
	}
	if err := b.Ref.CheckSHA256(strings.ToUpper(b.Ref.SHA256)); err != nil {
		t.Error(err)
	}
	if err := b.Ref.CheckSHA256(hexSum(fsys["proj/plan.yaml"].Data)); engine.CodeOf(err) != engine.CodePlanHashMismatch {
		t.Errorf("the plan file's own sha256 must not pass for the bundle's: %v", err)
	}
	if err := b.Ref.CheckSHA256("abc"); engine.CodeOf(err) != engine.CodeInvalidArgument {
		t.Errorf("short sha256: %v", err)
	}
	if err := b.Ref.Compare(b.Ref); err != nil {
		t.Errorf("same bundle: %v", err)
	}

	// Each edit changes the bundle, and the refusal names the file.
	edits := []struct {
		name string
		edit func(fstest.MapFS)
		want string
	}{
		{"SQL file", func(m fstest.MapFS) { m["proj/models/final.sql"] = &fstest.MapFile{Data: []byte("select 2 as id")} }, `"models/final.sql" changed`},
		{"seed", func(m fstest.MapFS) { m["proj/seeds/raw.csv"] = &fstest.MapFile{Data: []byte("id\n2\n")} }, `"seeds/raw.csv" changed`},
		{"plan file", func(m fstest.MapFS) {
			m["proj/plan.yaml"] = &fstest.MapFile{Data: append([]byte("# edited\n"), m["proj/plan.yaml"].Data...)}
		}, `the plan file "plan.yaml" changed`},
		{"new file", func(m fstest.MapFS) {
			m["proj/plan.yaml"] = &fstest.MapFile{Data: []byte(strings.Replace(string(m["proj/plan.yaml"].Data), `sql: "select * from raw"`, `path: models/stg.sql`, 1))}
			m["proj/models/stg.sql"] = &fstest.MapFile{Data: []byte("select * from raw")}
		}, `"models/stg.sql" is new`},
	}
	for _, tc := range edits {
		t.Run(tc.name, func(t *testing.T) {
			m := bundleFS()
			tc.edit(m)
			nb, err := LoadBundle(m, "proj/plan.yaml")
			if err != nil {
				t.Fatal(err)
			}
			err = nb.Ref.Compare(b.Ref)
			if engine.CodeOf(err) != engine.CodePlanHashMismatch || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want PLAN_HASH_MISMATCH naming %s", err, tc.want)
			}
		})
	}

	// A run recorded before bundles (no files) is compared by sha256 alone.
	if err := b.Ref.Compare(engine.PlanRef{SHA256: strings.Repeat("0", 64)}); engine.CodeOf(err) != engine.CodePlanHashMismatch {
		t.Errorf("old ref: %v", err)
	}

	delete(fsys, "proj/models/final.sql")
	if _, err := LoadBundle(fsys, "proj/plan.yaml"); engine.CodeOf(err) != engine.CodePlanInvalid || !strings.Contains(err.Error(), "step model.final: cannot read models/final.sql") {
		t.Errorf("missing SQL file: %v", err)
	}
	if _, err := LoadBundle(fsys, "proj/none.yaml"); engine.CodeOf(err) != engine.CodePlanInvalid {
		t.Errorf("missing plan: %v", err)
	}
}

// TestLoadBundlePreflight: a seed that cannot load is refused by
// LoadBundle (what `run` and `plan validate` call), naming file and line.
func TestLoadBundlePreflight(t *testing.T) {
	tests := []struct{ name, csv, want string }{
		{"binary", "id\n1\n\x00\x01\x02\n", "seeds/raw.csv:3: column 1 holds binary content"},
		{"invalid UTF-8", "id\n\xff\xfe\n", "seeds/raw.csv:2: column 1 holds binary content"},
		{"too many columns", strings.Repeat("c,", 40000) + "c\n", "seeds/raw.csv:1: the header has 40001 columns"},
		{"long row", "a\n" + strings.Repeat("x", MaxSeedRowBytes+1) + "\n", "seeds/raw.csv:2: the row is 1048577 bytes"},
		{"ragged", "a,b\n1\n", "seeds/raw.csv:2: the row has 1 fields"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := bundleFS()
			m["proj/seeds/raw.csv"] = &fstest.MapFile{Data: []byte(tc.csv)}
			_, err := LoadBundle(m, "proj/plan.yaml")
			if engine.CodeOf(err) != engine.CodePlanInvalid || !strings.Contains(err.Error(), "step seed.raw: seed "+tc.want) {
				t.Fatalf("got %v, want PLAN_INVALID with %q", err, tc.want)
			}
			if len(err.Error()) > 400 {
				t.Errorf("error is %d bytes long", len(err.Error()))
			}
		})
	}
}

type oneRunLog []engine.RunEventRecord

func (l oneRunLog) ListEvents(_ context.Context, _ string, _ int64, limit int) ([]engine.RunEventRecord, error) {
	if limit > 0 && limit < len(l) {
		return l[:limit], nil
	}
	return l, nil
}

func TestRecordedPlanRef(t *testing.T) {
	b, err := LoadBundle(bundleFS(), "proj/plan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(map[string]any{"planRef": b.Ref})
	meta := engine.RunMetadata{RunID: "r", PlanSHA256: "old", PlanID: "p", PlanVersion: "3"}
	got, err := engine.RecordedPlanRef(context.Background(), oneRunLog{{RunEventWrite: engine.RunEventWrite{EventType: engine.RunQueued, Payload: payload}}}, meta)
	if err != nil || got.SHA256 != b.Ref.SHA256 || len(got.Files) != 3 {
		t.Errorf("recorded %+v, %v", got, err)
	}
	got, err = engine.RecordedPlanRef(context.Background(), oneRunLog{{RunEventWrite: engine.RunEventWrite{EventType: engine.RunQueued, Payload: []byte(`{}`)}}}, meta)
	if err != nil || got.SHA256 != "old" || got.Files != nil {
		t.Errorf("without planRef %+v, %v", got, err)
	}
}

// TestLoadInfersRefsOfSQLFiles: a model's SQL file that refs another step
// depends on it, as inline SQL does (dbt's models are files; found by
// `dvtrun init`'s scaffold, which had to list dependsOn by hand).
func TestLoadInfersRefsOfSQLFiles(t *testing.T) {
	fsys := fstest.MapFS{
		"proj/plan.yaml": {Data: []byte(`
planId: p
planVersion: 1
steps:
  - {id: seed.raw, kind: seed, path: seeds/raw.csv}
  - {id: model.final, kind: model, materialized: table, path: models/final.sql}
  - {id: test.final_ok, kind: test, path: tests/final_ok.sql}
`)},
		"proj/seeds/raw.csv":      {Data: []byte("id\n1\n")},
		"proj/models/final.sql":   {Data: []byte("select id from {{ ref('raw') }}")},
		"proj/tests/final_ok.sql": {Data: []byte("select * from {{ ref('final') }} where id is null")},
	}
	b, err := LoadBundle(fsys, "proj/plan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Plan.Validate(); err != nil {
		t.Fatalf("a ref in a SQL file must add the dependency: %v", err)
	}
	for id, want := range map[string]string{"model.final": "seed.raw", "test.final_ok": "model.final"} {
		s, _ := b.Plan.Step(id)
		if len(s.DependsOn) != 1 || s.DependsOn[0] != want {
			t.Errorf("%s dependsOn %v, want [%s]", id, s.DependsOn, want)
		}
	}
}
