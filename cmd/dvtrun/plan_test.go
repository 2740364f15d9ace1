package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine/dbt"
	"github.com/dvtrun/dvtrun/engine/plan"
)

func TestImportDBT(t *testing.T) {
	dbtDir := filepath.Join(repoRoot(t), "testdata", "dbt")
	manifest := filepath.Join(dbtDir, "v12_compiled_code.json")
	project := filepath.Join(dbtDir, "market")
	// The CLI must report exactly what the importer says: every node it
	// could not translate, by id.
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	want, err := dbt.Import(data, dbt.Options{ProjectDir: project})
	if err != nil || len(want.Problems) == 0 {
		t.Fatalf("the fixture no longer has untranslatable nodes: %v", err)
	}
	var untranslatable []string
	for _, p := range want.Problems {
		untranslatable = append(untranslatable, p.NodeID)
	}
	steps := fmt.Sprintf("%d steps", len(want.Plan.Steps))

	t.Run("to a file", func(t *testing.T) {
		h := newHarness(t)
		out := filepath.Join(h.dir, "plan.yaml")
		r := h.run("plan", "import-dbt", manifest, "--project-dir", project, "-o", out)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		for _, want := range append([]string{"imported " + steps, fmt.Sprintf("%d node(s) not imported", len(untranslatable))}, untranslatable...) {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("report does not mention %q:\n%s", want, r.stdout)
			}
		}
		if v := h.run("plan", "validate", out); v.code != 0 || !strings.Contains(v.stdout, steps) {
			t.Errorf("the imported plan does not validate: %s%s", v.stdout, v.stderr)
		}
	})
	t.Run("to stdout", func(t *testing.T) {
		h := newHarness(t)
		r := h.run("plan", "import-dbt", manifest, "--project-dir", project)
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		p, err := plan.Parse([]byte(r.stdout), "stdout")
		if err != nil || len(p.Steps) != len(want.Plan.Steps) {
			t.Fatalf("stdout is not the plan: %v", err)
		}
		for _, id := range untranslatable {
			if !strings.Contains(r.stderr, id) {
				t.Errorf("stderr does not list %s", id)
			}
		}
	})
	cases := []struct {
		name string
		args []string
		exit int
		code string
		msgs []string
	}{
		{"strict", []string{manifest, "--project-dir", project, "--strict"}, exitUsage, "PLAN_INVALID", []string{fmt.Sprintf("%d dbt node(s)", len(untranslatable))}},
		{"missing manifest", []string{filepath.Join(dbtDir, "nope.json"), "--project-dir", project}, exitUsage, "INVALID_ARGUMENT", []string{"nope.json"}},
		{"not a manifest", []string{fixture("ok", "plan.yaml"), "--project-dir", project}, exitUsage, "PLAN_INVALID", []string{"manifest"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			out := filepath.Join(h.dir, "plan.yaml")
			r := h.run(append([]string{"plan", "import-dbt", "-o", out}, c.args...)...)
			wantError(t, r, c.exit, c.code, c.msgs...)
		})
	}
}
