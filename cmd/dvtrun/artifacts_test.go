package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/runresults/runresultstest"
)

// closingArtifact returns the run_results.json reference of the run's
// closing event.
func (h *harness) closingArtifact(runID string) engine.ArtifactRef {
	h.t.Helper()
	for _, ev := range h.events(runID) {
		switch ev.EventType {
		case engine.RunCompleted, engine.RunFailed, engine.RunCancelled:
			var p struct {
				Artifacts []engine.ArtifactRef `json:"artifacts"`
			}
			if err := json.Unmarshal(ev.Payload, &p); err != nil || len(p.Artifacts) != 1 {
				h.t.Fatalf("%s payload %s: want one artifact (%v)", ev.EventType, ev.Payload, err)
			}
			return p.Artifacts[0]
		}
	}
	h.t.Fatalf("run %s has no closing event", runID)
	return engine.ArtifactRef{}
}

// readArtifact reads the file a file:// reference names and checks the
// reference's kind, sha256 and size against it.
func readArtifact(t *testing.T, ref engine.ArtifactRef) []byte {
	t.Helper()
	u, err := url.Parse(ref.URI)
	if err != nil || u.Scheme != "file" || !filepath.IsAbs(filepath.FromSlash(u.Path)) {
		t.Fatalf("artifact URI %q is not an absolute file:// URI (%v)", ref.URI, err)
	}
	data, err := os.ReadFile(filepath.FromSlash(u.Path))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if ref.Kind != "dbt-run-results" || ref.SHA256 != hex.EncodeToString(sum[:]) || ref.SizeBytes != int64(len(data)) {
		t.Errorf("reference %+v does not describe the file (sha256 %x, %d bytes)", ref, sum, len(data))
	}
	return data
}

// TestRunResultsFile: every run, passing or failing, writes
// run_results.json next to the state store (runs/<run_id>/), valid against
// dbt's published v6 schema, with dbt's statuses; the closing event
// references it with its sha256 and size; `export --format run-results`
// rebuilds the same bytes from the log.
func TestRunResultsFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		plan     string
		flags    []string
		exit     int
		statuses map[string]string // unique_id -> status
	}{
		{"passing", fixture("ok", "plan.yaml"), nil, 0, map[string]string{
			"seed.cli_ok.customers": "success", "model.cli_ok.stg_customers": "success", "model.cli_ok.customer_names": "success",
			"test.cli_ok.not_null_stg_customers_id": "pass", "test.cli_ok.short_names": "warn",
		}},
		{"failing model", fixture("failing", "plan.yaml"), nil, 1, map[string]string{
			"seed.cli_failing.customers": "success", "model.cli_failing.broken": "error", "model.cli_failing.downstream": "skipped",
			"test.cli_failing.not_null_downstream_id": "skipped", "model.cli_failing.independent": "success",
		}},
		{"failing test", fixture("testfail", "plan.yaml"), nil, 1, map[string]string{
			"seed.cli_testfail.customers": "success", "test.cli_testfail.no_short_names": "fail", "test.cli_testfail.few_short_names": "warn",
		}},
		// A selected run: results for the selected steps only (the model and,
		// by eager indirect selection, its tests), and the selection in args.
		{"selected", fixture("ok", "plan.yaml"), []string{"--select", "stg_customers"}, 0, map[string]string{
			"model.cli_ok.stg_customers": "success", "test.cli_ok.not_null_stg_customers_id": "pass", "test.cli_ok.short_names": "warn",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			if tc.flags != nil {
				// The selection leaves the seed out: build it first.
				if r := h.run("run", "--select", "customers", tc.plan); r.code != 0 {
					t.Fatalf("seeding run: %d %s", r.code, r.stderr)
				}
			}
			r := h.run(append(append([]string{"run", "--threads", "1"}, tc.flags...), tc.plan)...)
			if r.code != tc.exit {
				t.Fatalf("run: exit %d, want %d: %s %s", r.code, tc.exit, r.stdout, r.stderr)
			}
			runID := runIDFrom(t, r.stdout)
			ref := h.closingArtifact(runID)
			if want := filepath.Join(h.dir, "runs", runID, "run_results.json"); !strings.HasSuffix(ref.URI, filepath.ToSlash(want)) {
				t.Errorf("artifact at %s, want %s", ref.URI, want)
			}
			data := readArtifact(t, ref)
			runresultstest.Validate(t, data)
			var doc struct {
				Metadata struct {
					InvocationID string `json:"invocation_id"`
				} `json:"metadata"`
				Args struct {
					Select []string `json:"select"`
				} `json:"args"`
				Results []struct {
					UniqueID     string  `json:"unique_id"`
					Status       string  `json:"status"`
					CompiledCode *string `json:"compiled_code"`
				} `json:"results"`
			}
			if err := json.Unmarshal(data, &doc); err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, r := range doc.Results {
				got[r.UniqueID] = r.Status
				if !strings.HasPrefix(r.UniqueID, "seed.") && r.Status != "skipped" && (r.CompiledCode == nil || *r.CompiledCode == "") {
					t.Errorf("%s has no compiled_code", r.UniqueID)
				}
			}
			if doc.Metadata.InvocationID != runID || !maps.Equal(got, tc.statuses) {
				t.Errorf("invocation %s statuses %v, want run %s and %v", doc.Metadata.InvocationID, got, runID, tc.statuses)
			}
			if tc.flags != nil && strings.Join(doc.Args.Select, " ") != tc.flags[1] {
				t.Errorf("args.select %v, want %s", doc.Args.Select, tc.flags[1])
			}

			out := filepath.Join(t.TempDir(), "export.json")
			if r := h.run("export", runID, "--format", "run-results", "-o", out); r.code != 0 {
				t.Fatalf("export: %d %s", r.code, r.stderr)
			}
			exported, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(exported, data) {
				t.Errorf("export --format run-results differs from the run's file:\n%s\n---\n%s", exported, data)
			}
		})
	}
}

// TestRunResultsTargetPathAndChangedPlan: --target-path puts the file in
// DIR; once the plan file changes, export still takes compiled_code from
// the bundle the store keeps for the run, and given the changed file as
// --plan it rebuilds the document from the log without compiled_code and
// says why.
func TestRunResultsTargetPathAndChangedPlan(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.yaml")
	src, err := os.ReadFile(fixture("ok", "plan.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	csv, err := os.ReadFile(fixture("ok", "customers.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plan, src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "customers.csv"), csv, 0o644); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "target")
	if r := h.run("run", "--target-path", target, plan); r.code != 0 {
		t.Fatalf("run: %d %s", r.code, r.stderr)
	}
	runID := h.onlyRun()
	ref := h.closingArtifact(runID)
	if !strings.HasSuffix(ref.URI, filepath.ToSlash(filepath.Join(target, "run_results.json"))) {
		t.Errorf("artifact at %s, want in %s", ref.URI, target)
	}
	readArtifact(t, ref)

	if err := os.WriteFile(plan, append(src, []byte("# changed\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	r := h.run("export", runID, "--format", "run-results")
	if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, `"compiled_code": "select id, name, country from customers"`) {
		t.Fatalf("export from the stored bundle after the plan file changed: %d %q\n%s", r.code, r.stderr, r.stdout)
	}
	r = h.run("export", runID, "--format", "run-results", "--plan", plan)
	if r.code != 0 || !strings.Contains(r.stderr, "has changed since run "+runID) {
		t.Fatalf("export with the changed plan: %d %q", r.code, r.stderr)
	}
	runresultstest.Validate(t, []byte(r.stdout))
	if strings.Contains(r.stdout, `"compiled_code": "`) {
		t.Error("compiled_code taken from a plan that changed")
	}
}

// checkResultsAgainstManifest validates a run_results.json against dbt's
// v6 schema and checks that it has n results, each unique_id a node of the
// dbt manifest the plan was imported from.
func checkResultsAgainstManifest(t *testing.T, data []byte, manifest string, n int) {
	t.Helper()
	runresultstest.Validate(t, data)
	raw, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Nodes map[string]json.RawMessage `json:"nodes"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Results []struct {
			UniqueID string `json:"unique_id"`
		} `json:"results"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Results) != n {
		t.Errorf("%d results, want %d", len(doc.Results), n)
	}
	for _, r := range doc.Results {
		if _, ok := m.Nodes[r.UniqueID]; !ok {
			t.Errorf("unique_id %s is not a node of the manifest", r.UniqueID)
		}
	}
}
