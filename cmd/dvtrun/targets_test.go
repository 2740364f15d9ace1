package main

import (
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// targetsProject writes proj/dvtrun.yaml with dev and prod targets whose
// SQLite paths are relative to the file, and returns proj and a directory
// below it to run commands from.
func targetsProject(t *testing.T, h *harness, extra string) (proj, sub string) {
	t.Helper()
	proj = filepath.Join(h.dir, "proj")
	sub = filepath.Join(proj, "deep", "er")
	mkdirs(t, proj, "deep/er")
	cfg := `target: dev
targets:
  dev:  {store: "sqlite:.dvt/state.db", warehouse: "sqlite:.dvt/dev.db", environment: development}
  prod: {store: "sqlite:.dvt/state.db", warehouse: "sqlite:.dvt/prod.db", environment: production, threads: 2}
` + extra
	if err := os.WriteFile(filepath.Join(proj, configFileName), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return proj, sub
}

func tableCount(t *testing.T, path, table string) int {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		return -1
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil {
		return -1
	}
	return n
}

// dvtrun.yaml is found in a parent directory; its target's relative
// paths are the file's, wherever the command runs; --target and
// DVT_TARGET pick another target; a flag still wins; the file and target
// are named on stderr and never in --json output; status shows the target.
func TestTargetsAndConfigDiscovery(t *testing.T) {
	h := newHarness(t) // DVT_STORE and DVT_WAREHOUSE are set: the target wins over them
	proj, sub := targetsProject(t, h, "")
	okPlan := filepath.Join(h.dir, "plan")
	if err := os.CopyFS(okPlan, os.DirFS(fixture("ok"))); err != nil {
		t.Fatal(err)
	}
	t.Chdir(sub)
	cfgPath := filepath.Join(proj, configFileName)
	dev, prod := filepath.Join(proj, ".dvt", "dev.db"), filepath.Join(proj, ".dvt", "prod.db")

	r := h.run("run", filepath.Join(okPlan, "plan.yaml"))
	if r.code != 0 {
		t.Fatalf("run on the default target: %+v", r)
	}
	if want := "dvtrun: config " + cfgPath + ", target dev\n"; !strings.HasPrefix(r.stderr, want) {
		t.Errorf("stderr %q does not start with %q", r.stderr, want)
	}
	if tableCount(t, dev, "customers") != 3 || tableCount(t, prod, "customers") != -1 {
		t.Fatalf("dev run: dev has %d customers, prod %d", tableCount(t, dev, "customers"), tableCount(t, prod, "customers"))
	}
	if _, err := os.Stat(h.statePath()); err == nil {
		t.Errorf("the environment's DVT_STORE %s was used instead of the target's", h.statePath())
	}

	r = h.run("--target", "prod", "run", filepath.Join(okPlan, "plan.yaml"))
	if r.code != 0 || !strings.Contains(r.stdout, "Concurrency: 2 threads") {
		t.Fatalf("run --target prod (threads 2 from the target): %+v", r)
	}
	if tableCount(t, prod, "customers") != 3 {
		t.Fatalf("prod run: prod has %d customers", tableCount(t, prod, "customers"))
	}

	// The run records its target; status shows it (JSON on stdout alone).
	r = h.run("--target", "prod", "status", "last", "--json")
	var st struct {
		Run struct {
			EnvironmentID string `json:"environmentId"`
		} `json:"run"`
		Context struct {
			Target string `json:"target"`
		} `json:"context"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &st) != nil || st.Context.Target != "prod" || st.Run.EnvironmentID != "production" {
		t.Fatalf("status --json: %+v %+v", r, st)
	}
	if !strings.Contains(r.stderr, "target prod") {
		t.Errorf("stderr names no target: %q", r.stderr)
	}
	h.env["DVT_TARGET"] = "prod"
	if r := h.run("status", "last"); r.code != 0 || !strings.Contains(r.stdout, "Target:") || !strings.Contains(r.stdout, "prod") {
		t.Fatalf("status with DVT_TARGET=prod: %+v", r)
	}
	delete(h.env, "DVT_TARGET")

	// runs --target filters by the recorded target (on its store).
	if got := listed(t, h.run("runs", "--target", "prod", "--json")); len(got) != 1 {
		t.Errorf("runs --target prod: %v, want the one prod run", got)
	}
	if got := listed(t, h.run("runs", "--target", "gone", "--json")); len(got) != 0 {
		t.Errorf("runs --target gone: %v, want none", got)
	}

	// An explicit --warehouse wins over the target's.
	other := filepath.Join(h.dir, "other.db")
	if r := h.run("run", filepath.Join(okPlan, "plan.yaml"), "--warehouse", "sqlite:"+other); r.code != 0 || tableCount(t, other, "customers") != 3 {
		t.Fatalf("run --warehouse: %+v", r)
	}

	wantError(t, h.run("--target", "qa", "queue"), 2, "CONFIG_INVALID", "--target \"qa\" is not one of the targets", "dev, prod")
}

func TestTargetErrors(t *testing.T) {
	h := newHarness(t)
	// Explicit --config without targets: --target is refused, no line.
	cfg := h.writeConfig("sinks: []\n")
	wantError(t, h.run("--config", cfg, "--target", "prod", "queue"), 2, "CONFIG_INVALID", "has no targets")
	// Two targets on one warehouse, named by the key.
	bad := h.writeConfig("targets:\n  dev: {store: 'sqlite:s.db', warehouse: 'sqlite:w.db'}\n  prod: {store: 'sqlite:s.db', warehouse: 'sqlite:./w.db'}\n")
	wantError(t, h.run("--config", bad, "queue"), 2, "CONFIG_INVALID", "targets.prod.warehouse: is the warehouse of target dev too")
	noDefault := h.writeConfig("targets:\n  dev: {store: 'sqlite:s.db', warehouse: 'sqlite:w.db'}\n")
	wantError(t, h.run("--config", noDefault, "queue"), 2, "CONFIG_INVALID", "no default target")
	// No file anywhere up the tree.
	t.Chdir(t.TempDir())
	wantError(t, h.run("--target", "prod", "queue"), 2, "CONFIG_INVALID", "no configuration file")
}
