package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/postgres/pgtest"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
)

// The run header names the config's target, as dbt does, and the adapter
// beside it (it named the adapter as if it were the target).
func TestHeaderNamesTheTarget(t *testing.T) {
	h := newHarness(t)
	cfg := h.writeConfig(`target: dev
targets:
  dev: {store: "sqlite:state.db", warehouse: "sqlite:dev.db"}
`)
	r := h.run("--config", cfg, "run", fixture("ok", "plan.yaml"))
	if r.code != 0 || !strings.Contains(r.stdout, "Concurrency: 4 threads (target='dev', adapter='sqlite')") {
		t.Fatalf("run on target dev: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// An SQLite store or warehouse in a directory that does not exist is
// refused, naming the directory, and nothing is created; dvtrun's own
// .dvt directory is made on first use (a fresh clone runs at once).
func TestSQLiteMissingDirectory(t *testing.T) {
	h := newHarness(t)
	missing := filepath.Join(h.dir, "no", "such")
	for _, flag := range []string{"store", "warehouse"} {
		t.Run(flag, func(t *testing.T) {
			r := h.run("--"+flag, "sqlite:"+filepath.Join(missing, "x.db"), "run", fixture("ok", "plan.yaml"))
			wantError(t, r, exitUsage, "CONFIG_INVALID", "the directory "+missing+" does not exist")
			if _, err := os.Stat(filepath.Join(h.dir, "no")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a directory was created: %v", err)
			}
		})
	}
	t.Run("default .dvt", func(t *testing.T) {
		plan, err := filepath.Abs(fixture("ok", "plan.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		t.Chdir(t.TempDir())
		r := run(context.Background(), []string{"run", plan}, io.Discard, io.Discard, func(string) string { return "" })
		if r != 0 {
			t.Fatalf("run with the default .dvt store: exit %d", r)
		}
		if _, err := os.Stat(filepath.Join(".dvt", "state.db")); err != nil {
			t.Errorf("the default store: %v", err)
		}
	})
}

// A mistyped flag, before or after the command, gets a did-you-mean (the
// helper that guesses mistyped commands and selectors).
func TestMistypedFlag(t *testing.T) {
	h := newHarness(t)
	wantError(t, h.run("run", "--threds", "2", fixture("ok", "plan.yaml")), exitUsage, "INVALID_ARGUMENT", "-threds; did you mean --threads?")
	wantError(t, h.run("--stroe", "x", "runs"), exitUsage, "INVALID_ARGUMENT", "-stroe; did you mean --store?")
	if r := h.run("runs", "--zzzz"); strings.Contains(r.stderr, "did you mean") {
		t.Errorf("a guess for a flag like no other: %s", r.stderr)
	}
}

// The events table cuts long payloads with an ellipsis, so a row stays
// about a line; --full keeps them whole (--json always does).
func TestEventsPayloadsCut(t *testing.T) {
	h := newHarness(t)
	if r := h.run("run", fixture("ok", "plan.yaml")); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	id := h.onlyRun()
	table, full := h.run("events", id), h.run("events", id, "--full")
	if table.code != 0 || full.code != 0 {
		t.Fatalf("events: %+v %+v", table, full)
	}
	// Row by row: the same events, a long payload cut to its first
	// payloadWidth-1 characters and …, a short one whole.
	rows, whole := strings.Split(table.stdout, "\n"), strings.Split(full.stdout, "\n")
	if len(rows) != len(whole) {
		t.Fatalf("%d rows, --full %d", len(rows), len(whole))
	}
	cut := 0
	for i := range rows {
		if rows[i] == whole[i] {
			continue
		}
		cut++
		prefix, ok := strings.CutSuffix(rows[i], "…")
		if !ok || !strings.HasPrefix(strings.TrimRight(whole[i], " "), strings.TrimRight(prefix, " ")) {
			t.Errorf("row %d is not --full's cut with …:\n%s\n%s", i, rows[i], whole[i])
		}
		if n := utf8.RuneCountInString(rows[i]); n > payloadWidth+120 {
			t.Errorf("a row of %d characters: %s", n, rows[i])
		}
	}
	if cut == 0 {
		t.Errorf("no payload was cut:\n%s", table.stdout)
	}
	var evs []engine.RunEventRecord
	if r := h.run("events", id, "--json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &evs) != nil || len(evs) != len(rows)-2 {
		t.Fatalf("events --json: %d events, %+v", len(evs), r)
	}
}

// With a Postgres state store, run_results.json goes next to an SQLite
// warehouse (the target's local files), else into .dvt/runs next to the
// configuration file; never into ./.dvt/runs of whatever directory the
// command ran in; and the run says where it went.
func TestRunResultsBesideTheProject(t *testing.T) {
	cases := []struct {
		name      string
		warehouse func(h *harness) string
		config    bool
		dir       func(h *harness) string
	}{
		{"sqlite warehouse", func(h *harness) string { return "sqlite:" + filepath.Join(h.dir, "wh", "dev.db") }, false,
			func(h *harness) string { return filepath.Join(h.dir, "wh", "runs") }},
		{"postgres warehouse, config", func(*harness) string { return pgtest.URL(t) }, true,
			func(h *harness) string { return filepath.Join(h.dir, "project", ".dvt", "runs") }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.env["DVT_STORE"] = pgtest.URL(t)
			if err := os.MkdirAll(filepath.Join(h.dir, "wh"), 0o755); err != nil {
				t.Fatal(err)
			}
			args := []string{"--warehouse", tc.warehouse(h)}
			if tc.config {
				if err := os.MkdirAll(filepath.Join(h.dir, "project"), 0o755); err != nil {
					t.Fatal(err)
				}
				cfg := filepath.Join(h.dir, "project", "dvtrun.yaml")
				if err := os.WriteFile(cfg, []byte("{}\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config", cfg)
			}
			cwd := t.TempDir()
			plan, err := filepath.Abs(fixture("ok", "plan.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			t.Chdir(cwd)
			r := h.run(append(args, "run", plan)...)
			if r.code != 0 {
				t.Fatalf("run: %+v", r)
			}
			want := filepath.Join(tc.dir(h), h.onlyRun(), "run_results.json")
			if _, err := os.Stat(want); err != nil {
				t.Errorf("run_results.json is not at %s: %v", want, err)
			}
			if !strings.Contains(r.stdout, "Wrote run_results.json: "+want) {
				t.Errorf("the run does not say where run_results.json went:\n%s", r.stdout)
			}
			if _, err := os.Stat(filepath.Join(cwd, ".dvt", "runs")); err == nil {
				t.Errorf("run_results.json still went to ./.dvt/runs")
			}
		})
	}
}

// status --step asks the step ledger of the warehouse of the run's target
// (recorded in RunQueued), not the command's default warehouse; a target
// the configuration lacks is said, not taken for a missing file.
func TestStepLedgerOnTheRunsTarget(t *testing.T) {
	h := newHarness(t)
	cfg := h.writeConfig(`target: dev
targets:
  dev: {store: "sqlite:state.db", warehouse: "sqlite:dev.db", environment: shared}
  qa:  {store: "sqlite:state.db", warehouse: "sqlite:qa.db", environment: shared}
`)
	if r := h.run("--config", cfg, "--target", "qa", "run", fixture("ok", "plan.yaml")); r.code != 0 {
		t.Fatalf("run on qa: %+v", r)
	}
	ids := listed(t, h.run("--config", cfg, "runs", "--json"))
	if len(ids) != 1 {
		t.Fatalf("runs: %v", ids)
	}
	id := ids[0]
	r := h.run("--config", cfg, "status", id, "--step", "model.stg_customers")
	if r.code != 0 || !regexp.MustCompile(`Ledger: +attempt 1 committed`).MatchString(r.stdout) {
		t.Errorf("status --step on the default target dev: the ledger of qa's warehouse was not asked:\n%s%s", r.stdout, r.stderr)
	}
	other := h.writeConfig("target: dev\ntargets:\n  dev: {store: \"sqlite:state.db\", warehouse: \"sqlite:dev.db\", environment: shared}\n")
	r = h.run("--config", other, "status", id, "--step", "model.stg_customers")
	if r.code != 0 || !strings.Contains(r.stdout, "not checked: the run ran on target qa and the configuration "+other+" does not have it: give --warehouse") {
		t.Errorf("status --step with a config without qa:\n%s%s", r.stdout, r.stderr)
	}
}

// A Postgres server that accepts and never answers (no connect_timeout in
// the DSN) ends the command with STORE_UNAVAILABLE, exit 4, within the
// default connect timeout; a database the server does not have is a
// configuration error, exit 2.
func TestPostgresUnreachableExitCodes(t *testing.T) {
	_, silent := sftest.Unreachable(t)
	host, port, _ := net.SplitHostPort(silent.Addr)
	srv := pgtest.Get(t)
	cases := []struct {
		name, store string
		exit        int
		code, says  string
	}{
		{"never answers", "postgres://dvt@" + host + ":" + port + "/dvt?sslmode=disable", exitUnavailable, "STORE_UNAVAILABLE", "cannot reach the Postgres database"},
		{"no such database", srv.URL("no_such_db"), exitUsage, "CONFIG_INVALID", `"no_such_db" does not exist`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			for _, args := range [][]string{{"runs"}, {"run", fixture("ok", "plan.yaml")}} {
				wantError(t, h.run(append([]string{"--store", tc.store}, args...)...), tc.exit, tc.code, tc.says)
			}
		})
	}
}

// outlivesReader names commands that exist, and the ones that run work.
func TestOutlivesReaderNamesCommands(t *testing.T) {
	names := map[string]bool{}
	for _, c := range commands() {
		names[c.name] = true
	}
	for name := range outlivesReader {
		if !names[name] {
			t.Errorf("outlivesReader names %q, which is no command", name)
		}
	}
	for _, name := range []string{"run", "resume", "retry", "worker", "serve"} {
		if !outlivesReader[name] {
			t.Errorf("%s would die with its reader", name)
		}
	}
}
