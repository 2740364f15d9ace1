package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine/config"
)

// TestInitRunsAtOnce: the project `dvtrun init DIR` writes runs on the
// first try, as its next steps say (cd DIR && dvtrun run plan.yaml), on
// dev and on prod, each in its own files under DIR/.dvt/, and verifies.
func TestInitRunsAtOnce(t *testing.T) {
	u := newUserShell(t)
	parent := t.TempDir()
	r := u.ok(parent, "init", "my-shop")
	for _, want := range []string{"Created project my-shop in " + filepath.Join(parent, "my-shop"), "cd my-shop\n", "dvtrun run plan.yaml ", "--target prod"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("init's output lacks %q:\n%s", want, r.stdout)
		}
	}
	dir := filepath.Join(parent, "my-shop")
	for _, f := range []string{"dvtrun.yaml", "plan.yaml", "seeds/raw_orders.csv", "models/orders.sql", ".gitignore"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("init wrote no %s: %v", f, err)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "plan.yaml")); !strings.Contains(string(data), "planId: my-shop\n") {
		t.Errorf("the plan is not named for its directory:\n%s", data)
	}

	r = u.ok(dir, "run", "plan.yaml")
	if !strings.Contains(r.stdout, "Done. PASS=3 WARN=0 ERROR=0 SKIP=0 TOTAL=3") {
		t.Errorf("the new project's first run:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "target dev") {
		t.Errorf("the first run did not say it used target dev: %q", r.stderr)
	}
	u.ok(dir, "verify", "--all")
	r = u.ok(dir, "run", "plan.yaml", "--target", "prod")
	if !strings.Contains(r.stdout, "PASS=3") {
		t.Errorf("the run on prod:\n%s", r.stdout)
	}
	u.ok(dir, "verify", "--all", "--target", "prod")
	for _, f := range []string{"dev-state.db", "dev-warehouse.db", "prod-state.db", "prod-warehouse.db"} {
		if _, err := os.Stat(filepath.Join(dir, ".dvt", f)); err != nil {
			t.Errorf("no .dvt/%s after a run on each target: %v", f, err)
		}
	}
}

// TestInitRefusesToOverwrite: init writes into a new or empty directory
// (a .git aside) and, without --force, touches nothing in another one;
// --force replaces its own files and adds to a .gitignore.
func TestInitRefusesToOverwrite(t *testing.T) {
	h := newHarness(t)
	mk := func(t *testing.T, files map[string]string) string {
		dir := t.TempDir()
		for name, content := range files {
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	cases := []struct {
		name  string
		files map[string]string
		force bool
		code  int
		msg   string
	}{
		{"empty", nil, false, 0, ""},
		{"only .git", map[string]string{".git/HEAD": "ref: refs/heads/main\n"}, false, 0, ""},
		{"a project already", map[string]string{"dvtrun.yaml": "mine\n", "notes.txt": "x"}, false, 2, "is not empty (dvtrun.yaml, notes.txt)"},
		{"forced", map[string]string{"dvtrun.yaml": "mine\n", ".gitignore": "*.pyc"}, true, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := mk(t, tc.files)
			args := []string{"init", dir}
			if tc.force {
				args = append(args, "--force")
			}
			r := h.run(args...)
			if tc.code != 0 {
				wantError(t, r, tc.code, "INVALID_ARGUMENT", tc.msg, "--force")
				if data, _ := os.ReadFile(filepath.Join(dir, "dvtrun.yaml")); string(data) != "mine\n" {
					t.Errorf("a refused init changed dvtrun.yaml: %q", data)
				}
				if _, err := os.Stat(filepath.Join(dir, "plan.yaml")); err == nil {
					t.Error("a refused init wrote plan.yaml")
				}
				return
			}
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if data, _ := os.ReadFile(filepath.Join(dir, "dvtrun.yaml")); !strings.Contains(string(data), "targets:") {
				t.Errorf("dvtrun.yaml was not written:\n%s", data)
			}
			gi, _ := os.ReadFile(filepath.Join(dir, ".gitignore"))
			if !strings.Contains(string(gi), "\n.dvt/\n") {
				t.Errorf(".gitignore does not ignore .dvt/: %q", gi)
			}
			if tc.force {
				if !strings.HasPrefix(string(gi), "*.pyc\n") {
					t.Errorf("--force replaced the .gitignore instead of adding to it: %q", gi)
				}
				if !strings.Contains(r.stdout, "Replaced (--force): dvtrun.yaml") {
					t.Errorf("--force did not say what it replaced:\n%s", r.stdout)
				}
				// Twice: .dvt/ is not added again.
				h.run("init", dir, "--force")
				if gi2, _ := os.ReadFile(filepath.Join(dir, ".gitignore")); string(gi2) != string(gi) {
					t.Errorf("a second init --force changed .gitignore: %q", gi2)
				}
			}
		})
	}

	t.Run("a file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		wantError(t, h.run("init", f), 2, "INVALID_ARGUMENT", "is not a directory")
	})
	t.Run("bad name", func(t *testing.T) {
		wantError(t, h.run("init", filepath.Join(t.TempDir(), "p"), "--name", "a b"), 2, "INVALID_ARGUMENT", "--name")
	})
	t.Run("help", func(t *testing.T) {
		r := h.run("init", "--help")
		if r.code != 0 || !strings.Contains(r.stdout, "Usage: dvtrun init [flags] [DIR]") || !strings.Contains(r.stdout, "--force") {
			t.Errorf("init --help: exit %d\n%s", r.code, r.stdout)
		}
	})
}

func TestNameFromDir(t *testing.T) {
	for _, tc := range []struct{ dir, want string }{
		{"my-shop", "my-shop"},
		{"My Shop", "my_shop"},
		{"__x__", "x"},
		{"été", "t"},
		{"данные", "my_project"},
		{"/", "my_project"},
		{strings.Repeat("a", 80), strings.Repeat("a", 64)},
	} {
		if got := nameFromDir(tc.dir); got != tc.want {
			t.Errorf("nameFromDir(%q) = %q, want %q", tc.dir, got, tc.want)
		}
	}
}

// TestInitCommentedExamplesParse: what dvtrun.yaml suggests in comments
// (the nightly schedule, prod on Postgres or Snowflake) is a valid file
// once uncommented, as a user would do it.
func TestInitCommentedExamplesParse(t *testing.T) {
	files, err := scaffoldFiles("my-shop")
	if err != nil {
		t.Fatal(err)
	}
	var text string
	for _, f := range files {
		if f.path == "dvtrun.yaml" {
			text = string(f.data)
		}
	}
	lines := strings.Split(text, "\n")
	// The schedule: the commented lines from "# schedules:" on, less "# ".
	i := slices.Index(lines, "# schedules:")
	if i < 0 {
		t.Fatal("dvtrun.yaml suggests no schedule")
	}
	var sched []string
	for _, l := range lines[i:] {
		sched = append(sched, strings.TrimPrefix(l, "# "))
	}
	cases := map[string]string{"schedule": text + strings.Join(sched, "\n")}
	for _, db := range []string{"postgres://", "snowflake://"} {
		var store, wh string
		for _, l := range lines {
			l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "#"))
			switch {
			case strings.HasPrefix(l, "store: "+db):
				store = l
			case strings.HasPrefix(l, "warehouse: "+db):
				wh = l
			}
		}
		if store == "" || wh == "" {
			t.Fatalf("dvtrun.yaml suggests no %s store and warehouse", db)
		}
		cases[db] = strings.Replace(strings.Replace(text, "store: sqlite:.dvt/prod-state.db", store, 1),
			"warehouse: sqlite:.dvt/prod-warehouse.db", wh, 1)
	}
	for name, text := range cases {
		cfg, err := config.Parse([]byte(text), "dvtrun.yaml")
		switch {
		case err != nil:
			t.Errorf("%s: %v\n%s", name, err, text)
		case name == "schedule" && (len(cfg.Schedules) != 1 || cfg.Schedules[0].Target != "prod"):
			t.Errorf("the uncommented schedule: %+v", cfg.Schedules)
		case name != "schedule" && !strings.HasPrefix(cfg.Targets["prod"].Store, name):
			t.Errorf("%s: prod's store is %s", name, cfg.Targets["prod"].Store)
		}
	}
}
