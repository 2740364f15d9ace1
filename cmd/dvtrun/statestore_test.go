package main

import (
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine/config"
	"github.com/dvtrun/dvtrun/engine/spool"
)

// run, resume, worker and serve take the write budget and the spool
// directory (registerExec), and say where their defaults come from.
func TestStateStoreFlagsHelp(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"run", "resume", "worker", "serve"} {
		t.Run(cmd, func(t *testing.T) {
			r := newHarness(t).run(cmd, "--help")
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			for _, want := range []string{"-write-budget", "stateStore.writeLatencyBudgetMs, else 3s", "-spool-dir DIR", "stateStore.spoolDir"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("help does not show %q:\n%s", want, r.stdout)
				}
			}
		})
	}
}

// Bad budgets, spool directories and stateStore sections are refused with
// exit 2 and one line, and no run is recorded.
func TestStateStoreBadValues(t *testing.T) {
	t.Parallel()
	h0 := newHarness(t)
	aFile := filepath.Join(h0.dir, "a-file")
	if err := os.WriteFile(aFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	plan := fixture("ok", "plan.yaml")
	byCmd := map[string][]string{ // what each command needs besides flags
		"run": {plan}, "resume": {"no-such-run", plan}, "worker": nil, "serve": nil,
	}
	cases := []struct {
		name   string
		flags  []string
		config string
		code   string
		msg    string
		setup  func(h *harness)
	}{
		{"budget too small", []string{"--write-budget", "50ms"}, "", "INVALID_ARGUMENT", "--write-budget must be between 100ms and 1h0m0s", nil},
		{"budget negative", []string{"--write-budget", "-1s"}, "", "INVALID_ARGUMENT", "--write-budget must be between", nil},
		{"budget too large", []string{"--write-budget", "2h"}, "", "INVALID_ARGUMENT", "--write-budget must be between", nil},
		{"budget not a duration", []string{"--write-budget", "3000"}, "", "INVALID_ARGUMENT", "-write-budget", nil},
		{"spool dir is a file", []string{"--spool-dir", aFile}, "", "INVALID_ARGUMENT", "--spool-dir: spool directory " + aFile + " is not a directory", nil},
		{"config spool dir is a file", nil, "stateStore: {spoolDir: a-file}\n", "CONFIG_INVALID", ".yaml: stateStore.spoolDir: spool directory " + aFile + " is not a directory", nil},
		{"default spool dir is a file", nil, "", "INVALID_ARGUMENT", "the default spool: spool directory ", func(h *harness) {
			if err := os.WriteFile(filepath.Join(h.dir, "spool"), nil, 0o644); err != nil {
				h.t.Fatal(err)
			}
		}},
		{"config budget", nil, "stateStore: {writeLatencyBudgetMs: 3s}\n", "CONFIG_INVALID", `stateStore.writeLatencyBudgetMs: "3s" is not a whole number of milliseconds`, nil},
		{"config policy", nil, "stateStore: {neverFailOpen: [StepFailed]}\n", "CONFIG_INVALID", "stateStore.neverFailOpen: dvtrun never fails open for exactly [StepCompleted, StepFailed]", nil},
	}
	for _, tc := range cases {
		for cmd, rest := range byCmd {
			t.Run(tc.name+"/"+cmd, func(t *testing.T) {
				h := newHarness(t)
				if tc.setup != nil {
					tc.setup(h)
				}
				if tc.config != "" {
					// The config sits next to a-file: a relative spoolDir is
					// read from the config's directory.
					p := filepath.Join(h0.dir, strings.ReplaceAll(t.Name(), "/", "_")+".yaml")
					if err := os.WriteFile(p, []byte(tc.config), 0o644); err != nil {
						t.Fatal(err)
					}
					h.env["DVT_CONFIG"] = p
				}
				// A daemon that accepted its flags would run until cancelled.
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				runs := 0
				if cmd == "resume" {
					seedFailedRun(t, h.statePath()) // resume needs a store
					runs = 1
				}
				args := append(append([]string{cmd}, tc.flags...), rest...)
				wantError(t, h.runCtx(ctx, args...), 2, tc.code, tc.msg)
				if _, err := os.Stat(h.statePath()); err == nil && countRuns(t, h.statePath()) != runs {
					t.Errorf("the refused command recorded a run")
				}
			})
		}
	}
}

// The budget and the spool directory reach the runner: the flag, else
// (the spool) DVT_SPOOL_DIR, else the config's stateStore section, else the
// default (0: the runner's 3s; the spool beside the runs' artifacts).
func TestStateStoreResolution(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "etc", "dvtrun.yaml")
	sqliteStore := "sqlite:" + filepath.Join(dir, "state", "state.db")
	cases := []struct {
		name, store, config string
		flags               []string
		budget              time.Duration
		spoolDir            string
		envSpool            string // DVT_SPOOL_DIR
	}{
		{"defaults, sqlite store", sqliteStore, "", nil, 0, filepath.Join(dir, "state", "spool"), ""},
		{"defaults, snowflake store", "snowflake://u:p@acct/db/sch", "", nil, 0, filepath.Join(".dvt", "spool"), ""},
		{"config", sqliteStore, "stateStore: {writeLatencyBudgetMs: 750, spoolDir: spool-here}", nil, 750 * time.Millisecond, filepath.Join(dir, "etc", "spool-here"), ""},
		{"config, absolute dir", sqliteStore, "stateStore: {spoolDir: /var/lib/dvtrun/spool}", nil, 0, "/var/lib/dvtrun/spool", ""},
		{"flags win", sqliteStore, "stateStore: {writeLatencyBudgetMs: 750, spoolDir: spool-here}",
			[]string{"--write-budget", "1500ms", "--spool-dir", filepath.Join(dir, "flag-spool")}, 1500 * time.Millisecond, filepath.Join(dir, "flag-spool"), ""},
		{"environment over config", sqliteStore, "stateStore: {spoolDir: spool-here}", nil, 0, filepath.Join(dir, "env-spool"), filepath.Join(dir, "env-spool")},
		{"flag over environment", sqliteStore, "", []string{"--spool-dir", filepath.Join(dir, "flag-spool")}, 0, filepath.Join(dir, "flag-spool"), filepath.Join(dir, "env-spool")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := func(k string) string { return map[string]string{"DVT_SPOOL_DIR": tc.envSpool}[k] }
			c := &cli{stdout: io.Discard, stderr: io.Discard, env: env, g: globals{store: tc.store}}
			cfg := &config.Config{}
			if tc.config != "" {
				var err error
				if cfg, err = config.Parse([]byte(tc.config), cfgPath); err != nil {
					t.Fatal(err)
				}
				c.g.config = cfgPath
			}
			var f runFlags
			fs := flag.NewFlagSet("run", flag.ContinueOnError)
			f.registerExec(fs)
			if err := fs.Parse(tc.flags); err != nil {
				t.Fatal(err)
			}
			if err := f.check(); err != nil {
				t.Fatal(err)
			}
			f, err := c.withStateStore(f, cfg.StateStore)
			if err != nil {
				t.Fatal(err)
			}
			rn := c.newRunner(nil, f, nil, nil)
			if rn.Config.WriteBudget != tc.budget {
				t.Errorf("WriteBudget = %v, want %v", rn.Config.WriteBudget, tc.budget)
			}
			sp, ok := rn.Spool.(*spool.Dir)
			if !ok || sp.Path() != tc.spoolDir {
				t.Errorf("Spool = %#v, want a spool in %s", rn.Spool, tc.spoolDir)
			}
		})
	}
}

// A run whose events are all stored in time spools nothing: no spool
// directory appears, with the budget from a flag or from the config.
func TestRunSpoolsNothingWhenTheStoreKeepsUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		config string
		flags  []string
	}{
		{"flags", "", []string{"--write-budget", "10s", "--spool-dir", "SPOOL"}},
		{"config", "stateStore:\n  writeLatencyBudgetMs: 10000\n  spoolDir: SPOOL\n  failOpenForEventClass: [StepStarted]\n  neverFailOpen: [StepCompleted, StepFailed]\n", nil},
		{"defaults", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			spoolDir := filepath.Join(h.dir, "spool")
			args := []string{"run"}
			for _, a := range tc.flags {
				args = append(args, strings.ReplaceAll(a, "SPOOL", spoolDir))
			}
			if tc.config != "" {
				h.env["DVT_CONFIG"] = h.writeConfig(strings.ReplaceAll(tc.config, "SPOOL", spoolDir))
			}
			if r := h.run(append(args, fixture("ok", "plan.yaml"))...); r.code != 0 {
				t.Fatalf("run: exit %d: %s", r.code, r.stderr)
			}
			if _, err := os.Stat(spoolDir); !os.IsNotExist(err) {
				t.Errorf("a run that spooled nothing created %s (stat: %v)", spoolDir, err)
			}
		})
	}
}
