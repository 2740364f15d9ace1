package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

// writeBundle writes a plan whose model SQL and seed are files, and returns
// the plan's path.
func writeBundle(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"plan.yaml": "planId: bundle\nplanVersion: \"1\"\nsteps:\n" +
			"  - {id: seed.people, kind: seed, path: seeds/people.csv}\n" +
			"  - {id: model.x, kind: model, materialized: table, path: models/x.sql, dependsOn: [seed.people]}\n",
		"models/x.sql":     "select id from people",
		"seeds/people.csv": "id\n1\n2\n",
	}
	for name, text := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "plan.yaml")
}

// TestResumeRefusesChangedBundle (issue 8, Found 3): a run is queued, a
// file its plan references is edited, and resume refuses with
// PLAN_HASH_MISMATCH naming the file, writing nothing; restored, it resumes.
func TestResumeRefusesChangedBundle(t *testing.T) {
	t.Parallel()
	for _, file := range []string{"models/x.sql", "seeds/people.csv"} {
		t.Run(file, func(t *testing.T) {
			h := newHarness(t)
			plan := writeBundle(t)
			b, err := loadPlan(plan, "")
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			st, err := sqlite.Open(ctx, h.statePath(), sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			eng := &engine.Engine{Log: st, Clock: engine.ClockFunc(time.Now), IDs: engine.IDFunc(uuid.NewString),
				Config: engine.Config{TenantID: "default", ProjectID: "default", EnvironmentID: "dev"}}
			runID, err := eng.StartRun(ctx, engine.StartRequest{Plan: b.Plan, Ref: b.Ref})
			st.Close()
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(filepath.Dir(plan), file)
			orig, _ := os.ReadFile(path)
			if err := os.WriteFile(path, append(orig, '\n', '3', '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
			n := len(h.events(runID))
			wantError(t, h.run("resume", runID, plan), exitUsage, "PLAN_HASH_MISMATCH", runID, `"`+file+`" changed`)
			if got := len(h.events(runID)); got != n {
				t.Errorf("a refused resume appended %d events", got-n)
			}
			// --plan-sha256 checks the bundle too.
			wantError(t, h.run("run", "--plan-sha256", b.Ref.SHA256, plan), exitUsage, "PLAN_HASH_MISMATCH", b.Ref.SHA256)
			if err := os.WriteFile(path, orig, 0o644); err != nil {
				t.Fatal(err)
			}
			if r := h.run("resume", runID, plan); r.code != 0 {
				t.Fatalf("resume of the unchanged bundle: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			if r := h.run("runs"); r.code != 0 || countRuns(t, h.statePath()) != 1 {
				t.Errorf("runs recorded: %d", countRuns(t, h.statePath()))
			}
		})
	}
}
