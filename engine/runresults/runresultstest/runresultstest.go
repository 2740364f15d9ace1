// Package runresultstest checks documents against dbt's published
// run-results v6 JSON Schema, vendored in testdata/dbt/run-results/v6.json
// (see the README next to it for its source).
package runresultstest

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/dvtrun/dvtrun/engine/runresults"
)

var schema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	_, here, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(here), "..", "..", "..", "testdata", "dbt", "run-results", "v6.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(runresults.SchemaVersion, doc); err != nil {
		return nil, err
	}
	return c.Compile(runresults.SchemaVersion)
})

// Validate fails t unless data is a run_results.json that dbt's v6 schema
// accepts.
func Validate(t testing.TB, data []byte) {
	t.Helper()
	sch, err := schema()
	if err != nil {
		t.Fatalf("loading the vendored run-results v6 schema: %v", err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("run_results.json is not JSON: %v", err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Fatalf("run_results.json does not match dbt's run-results v6 schema: %v", err)
	}
}
