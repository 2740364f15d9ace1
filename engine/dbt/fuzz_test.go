package dbt_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/dbt"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// FuzzImportManifest: any bytes give a PLAN_INVALID error or a valid plan
// that survives its YAML rendering, and every node of the manifest is
// either a step or a problem (nothing skipped silently).
func FuzzImportManifest(f *testing.F) {
	for _, name := range []string{"v4_compiled_sql.json", "v11_parse_only.json", "v12_compiled_code.json"} {
		if b, err := os.ReadFile(filepath.Join(fixtures, name)); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"metadata": {"dbt_schema_version": "https://schemas.getdbt.com/dbt/manifest/v7.json"}, "nodes": {"model.p.a": {"resource_type": "model", "name": "a", "compiled_code": "\n\n  select 1", "depends_on": {"nodes": ["model.p.a", "source.p.s.t"]}}}}`))
	f.Add([]byte(`{"metadata": {"dbt_schema_version": "https://schemas.getdbt.com/dbt/manifest/v12.json"}, "nodes": {"test.p.t.abc": {"resource_type": "test", "name": "t", "test_metadata": {"name": "accepted_values", "kwargs": {"column_name": "c", "values": ["it's", 1, true], "model": "ref('x', v='2')"}}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := dbt.Import(data, dbt.Options{ProjectDir: filepath.Join(fixtures, "market"), OutDir: fixtures})
		if err != nil {
			if engine.CodeOf(err) != engine.CodePlanInvalid {
				t.Fatalf("error without PLAN_INVALID: %v", err)
			}
			return
		}
		if err := res.Plan.Validate(); err != nil {
			t.Fatalf("imported plan invalid: %v", err)
		}
		var m struct {
			Nodes     map[string]json.RawMessage `json:"nodes"`
			UnitTests map[string]json.RawMessage `json:"unit_tests"`
		}
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("Import accepted what json rejects: %v", err)
		}
		if len(res.Plan.Steps)+len(res.Problems) != len(m.Nodes)+len(m.UnitTests) {
			t.Fatalf("%d nodes and %d unit tests became %d steps and %d problems", len(m.Nodes), len(m.UnitTests), len(res.Plan.Steps), len(res.Problems))
		}
		y, err := res.YAML()
		if err != nil {
			t.Fatal(err)
		}
		back, err := plan.Parse(y, "fuzz.yaml")
		if err != nil {
			t.Fatalf("YAML does not read back: %v\n%s", err, y)
		}
		if err := back.Validate(); err != nil {
			t.Fatalf("YAML reads back invalid: %v", err)
		}
		for i, s := range back.Steps {
			if s.SQL != res.Plan.Steps[i].SQL || s.ID != res.Plan.Steps[i].ID {
				t.Fatalf("step %d changed in YAML: %q %q -> %q %q", i, res.Plan.Steps[i].ID, res.Plan.Steps[i].SQL, s.ID, s.SQL)
			}
		}
	})
}
