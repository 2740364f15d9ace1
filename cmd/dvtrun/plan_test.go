package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine/dbt"
	"github.com/dvtrun/dvtrun/engine/plan"
)

func TestImportDBT(t *testing.T) {
	t.Parallel()
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
		// Without --project-dir, the manifest's directory's parent holds no
		// seeds: one short line that leads with the cause and the remedy.
		{"no project dir", []string{manifest}, exitUsage, "INVALID_ARGUMENT", []string{"seed CSV not found: " + filepath.Join(repoRoot(t), "testdata", "seeds") + "/", "pass --project-dir DIR"}},
		{"wrong project dir", []string{manifest, "--project-dir", dbtDir}, exitUsage, "PLAN_INVALID", []string{"seed CSV not found: " + filepath.Join(dbtDir, "seeds") + "/"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			out := filepath.Join(h.dir, "plan.yaml")
			r := h.run(append([]string{"plan", "import-dbt", "-o", out}, c.args...)...)
			wantError(t, r, c.exit, c.code, c.msgs...)
			if len(r.stderr) > 300 {
				t.Errorf("the error line is %d characters long: %s", len(r.stderr), r.stderr)
			}
		})
	}
}

// TestPlanValidateContext: `plan validate` renders the plan with --vars and
// names each ref, cycle and var it cannot render; `run` refuses the same
// before the run is recorded.
func TestPlanValidateContext(t *testing.T) {
	t.Parallel()
	contextPlan := filepath.Join(repoRoot(t), "plans", "context", "plan.yaml")
	write := func(t *testing.T, dir, steps string) string {
		path := filepath.Join(dir, "plan.yaml")
		if err := os.WriteFile(path, []byte("planId: p\nplanVersion: \"1\"\nsteps:\n"+steps), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cases := []struct {
		name  string
		steps string // "": plans/context
		args  []string
		code  string // "": valid
		want  []string
	}{
		{"context plan with its var", "", []string{"--vars", `{"region": "eu"}`}, "", []string{"OK: plan context@1 is valid: 4 steps"}},
		{"vars as YAML", "", []string{"--vars", "region: eu"}, "", []string{"OK: plan context@1"}},
		{"missing var without default", "", nil, "PLAN_INVALID",
			[]string{`step model.orders_in_interval: {{ var('region') }}: var "region" is not set (pass it with --vars) and has no default`}},
		{"unknown ref", "  - {id: model.a, kind: model, sql: \"select * from {{ ref('missing') }}\"}\n", nil, "PLAN_INVALID",
			[]string{`step model.a: {{ ref('missing') }}: no seed or model of the plan builds "missing"`}},
		{"cycle through refs", "  - {id: model.a, kind: model, sql: \"select * from {{ ref('b') }}\"}\n  - {id: model.b, kind: model, sql: \"select * from {{ ref('a') }}\"}\n", nil, "PLAN_INVALID",
			[]string{"dependency cycle: model.a -> model.b -> model.a"}},
		{"vars not a mapping", "", []string{"--vars", "[1, 2]"}, "INVALID_ARGUMENT", []string{"--vars must be a mapping"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			path := contextPlan
			if tc.steps != "" {
				path = write(t, h.dir, tc.steps)
			}
			r := h.run(append([]string{"plan", "validate", path}, tc.args...)...)
			if tc.code == "" {
				if r.code != 0 || !strings.Contains(r.stdout, tc.want[0]) {
					t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
				}
				return
			}
			wantError(t, r, 2, tc.code, tc.want...)
			if tc.code != "PLAN_INVALID" {
				return
			}
			// run refuses the plan the same way, before it opens the state
			// store.
			wantError(t, h.run(append([]string{"run", path}, tc.args...)...), 2, tc.code, tc.want...)
			if _, err := os.Stat(h.statePath()); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("run wrote the state store (%v)", err)
			}
		})
	}
}
