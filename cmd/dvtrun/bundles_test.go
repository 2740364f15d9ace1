package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

// storeBundleOf stores plan's bundle in the harness's state store, as
// `run`, `enqueue` and the scheduler do before recording a run or request.
func storeBundleOf(t *testing.T, h *harness, planFile string) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), h.statePath(), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := loadPlan(planFile, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := storeBundle(context.Background(), st, b); err != nil {
		t.Fatal(err)
	}
}

// TestResumeWithoutPlan: a run whose bundle is stored resumes with no PLAN
// once its plan's directory is gone, seeds loaded from the stored bytes; a
// run recorded before bundles were stored is refused without PLAN (naming
// the command to use), resumes with it, and from then on has its bundle.
func TestResumeWithoutPlan(t *testing.T) {
	t.Parallel()
	for _, stored := range []bool{true, false} {
		name := map[bool]string{true: "stored bundle", false: "recorded before bundles"}[stored]
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			planFile := writeBundle(t)
			runID := queueRunOf(t, h, planFile) // QUEUED, as a runner that died before RunStarted leaves it
			if stored {
				storeBundleOf(t, h, planFile)
				if err := os.RemoveAll(filepath.Dir(planFile)); err != nil {
					t.Fatal(err)
				}
			} else {
				wantError(t, h.run("resume", runID), exitUsage, "INVALID_ARGUMENT", runID, "no stored plan bundle", "dvtrun resume "+runID+" PLAN")
				if r := h.run("resume", runID, planFile); r.code != 0 {
					t.Fatalf("resume with PLAN: %+v", r)
				}
			}
			if r := h.run("resume", runID); r.code != 0 || !strings.Contains(r.stdout, "COMPLETED") {
				t.Fatalf("resume without PLAN: %+v", r)
			}
			if stored {
				if n := h.rowsPerStep("SELECT 'n', count(*) FROM people")["n"]; n != 2 {
					t.Fatalf("the seed loaded %d rows from the stored bundle, want 2", n)
				}
			}
		})
	}
}

// TestPlanShow: `plan show` prints what a run ran from the stored bundle,
// byte for byte, once the plan's directory is gone; --file prints one file
// of it, --list names them; a file outside the bundle or a run without a
// stored bundle is INVALID_ARGUMENT.
func TestPlanShow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	planFile := writeBundle(t)
	files := map[string]string{}
	for _, f := range []string{"plan.yaml", "models/x.sql", "seeds/people.csv"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(planFile), f))
		if err != nil {
			t.Fatal(err)
		}
		files[f] = string(b)
	}
	r := h.run("run", planFile)
	if r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	runID := runIDFrom(t, r.stdout)
	legacy := queueRunOf(t, h, fixture("ok", "plan.yaml")) // no bundle stored for it
	if err := os.RemoveAll(filepath.Dir(planFile)); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name       string
		args       []string
		wantStdout string
		wantCode   string
		wantMsg    []string
	}{
		{name: "the plan", args: []string{"plan", "show", runID}, wantStdout: files["plan.yaml"]},
		{name: "a SQL file", args: []string{"plan", "show", runID, "--file", "models/x.sql"}, wantStdout: files["models/x.sql"]},
		{name: "a seed", args: []string{"plan", "show", runID, "--file", "seeds/people.csv"}, wantStdout: files["seeds/people.csv"]},
		{name: "a file outside the bundle", args: []string{"plan", "show", runID, "--file", "nope.sql"}, wantCode: "INVALID_ARGUMENT", wantMsg: []string{`"nope.sql"`, "models/x.sql"}},
		{name: "a run without a stored bundle", args: []string{"plan", "show", legacy}, wantCode: "INVALID_ARGUMENT", wantMsg: []string{legacy, "no stored plan bundle"}},
		{name: "an unknown run", args: []string{"plan", "show", "no-such-run"}, wantCode: "RUN_NOT_FOUND"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := h.run(c.args...)
			if c.wantCode != "" {
				wantError(t, r, exitUsage, c.wantCode, c.wantMsg...)
				return
			}
			if r.code != 0 || r.stdout != c.wantStdout {
				t.Fatalf("exit %d, stdout %q, want %q (stderr %s)", r.code, r.stdout, c.wantStdout, r.stderr)
			}
		})
	}
	r = h.run("plan", "show", runID, "--list")
	for _, f := range []string{"plan.yaml", "models/x.sql", "seeds/people.csv"} {
		if r.code != 0 || !strings.Contains(r.stdout, f+" ") {
			t.Errorf("--list lacks %s: %+v", f, r)
		}
	}
}

// TestOversizedBundleIsRefused: a bundle over engine.MaxBundleBytes is
// PLAN_INVALID (exit 2) for `run` and `enqueue`, before a run or request
// is recorded.
func TestOversizedBundleIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	planFile := filepath.Join(dir, "plan.yaml")
	if err := os.WriteFile(planFile, []byte("planId: big\nplanVersion: \"1\"\nsteps:\n  - {id: sql.a, kind: sql, path: a.sql}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	big := append([]byte("select 1 -- "), bytes.Repeat([]byte("x"), plan.MaxBundleBytes)...)
	if err := os.WriteFile(filepath.Join(dir, "a.sql"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"run", planFile}, {"enqueue", planFile}} {
		t.Run(args[0], func(t *testing.T) {
			h := newHarness(t)
			wantError(t, h.run(args...), exitUsage, "PLAN_INVALID", "up to 16777216 bytes")
			if _, err := os.Stat(h.statePath()); err == nil {
				if n := countRuns(t, h.statePath()); n != 0 {
					t.Errorf("%d run(s) recorded", n)
				}
				if r := h.run("queue", "--all", "--json"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
					t.Errorf("requests recorded: %+v", r)
				}
			}
		})
	}
}
