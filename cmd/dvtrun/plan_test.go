package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
)

func TestImportDBT(t *testing.T) {
	dbtDir := filepath.Join(repoRoot(t), "testdata", "dbt")
	manifest := filepath.Join(dbtDir, "v12_compiled_code.json")
	project := filepath.Join(dbtDir, "market")
	// Nodes the importer cannot translate must be listed by id.
	untranslatable := []string{"model.market.forecast", "model.market.forecast_report", "test.market.assert_revenue_positive"}

	t.Run("to a file", func(t *testing.T) {
		h := newHarness(t)
		out := filepath.Join(h.dir, "plan.yaml")
		r := h.run("plan", "import-dbt", manifest, "--project-dir", project, "-o", out)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		for _, want := range append([]string{"imported 16 steps", "not imported"}, untranslatable...) {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("report does not mention %q:\n%s", want, r.stdout)
			}
		}
		if v := h.run("plan", "validate", out); v.code != 0 || !strings.Contains(v.stdout, "16 steps") {
			t.Errorf("the imported plan does not validate: %s%s", v.stdout, v.stderr)
		}
	})
	t.Run("to stdout", func(t *testing.T) {
		h := newHarness(t)
		r := h.run("plan", "import-dbt", manifest, "--project-dir", project)
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		p, err := engine.ParsePlan([]byte(r.stdout), "stdout")
		if err != nil || len(p.Steps) != 16 {
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
		{"strict", []string{manifest, "--project-dir", project, "--strict"}, exitFailed, "PLAN_INVALID", []string{"6 dbt node(s)"}},
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
