package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// badSeeds reads the bad_* inputs of a fuzz target's seed corpus (go's
// corpus format: a header line, then one []byte("…") value).
func badSeeds(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "bad_") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		_, lit, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		lit = strings.TrimSuffix(strings.TrimPrefix(lit, "[]byte("), ")")
		v, err := strconv.Unquote(lit)
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		out[e.Name()] = []byte(v)
	}
	if len(out) == 0 {
		t.Fatalf("no bad_* seeds in %s", dir)
	}
	return out
}

// wantRefused checks the contract for refused input: exit 2, one line
// `dvtrun: CODE: sentence` a terminal can print (no control characters, no
// 12 KB line), and no run recorded.
func wantRefused(t *testing.T, h *harness, r result, code string, msgs ...string) {
	t.Helper()
	wantError(t, r, exitUsage, code, msgs...)
	if line := strings.TrimSuffix(r.stderr, "\n"); engine.HasControl(line) || len(line) > 4096 {
		t.Errorf("the error line is %d bytes or holds control characters: %.200q", len(line), line)
	}
	if _, err := os.Stat(h.statePath()); err == nil && countRuns(t, h.statePath()) != 0 {
		t.Errorf("a run was recorded for refused input")
	}
}

// TestBadInputsThroughCLI (issue 8, Must show): every bad input of the
// fuzz corpora for plans, seeds and manifests is refused by the CLI with
// one line, exit 2 and no run recorded — by `run` and by `plan validate`.
func TestBadInputsThroughCLI(t *testing.T) {
	t.Parallel()
	for name, text := range badSeeds(t, filepath.Join("..", "..", "engine", "plan", "testdata", "fuzz", "FuzzParsePlan")) {
		t.Run("plan/"+name, func(t *testing.T) {
			h := newHarness(t)
			plan := filepath.Join(h.dir, "plan.yaml")
			if err := os.WriteFile(plan, text, 0o644); err != nil {
				t.Fatal(err)
			}
			wantRefused(t, h, h.run("run", plan), "PLAN_INVALID")
			wantRefused(t, h, h.run("plan", "validate", plan), "PLAN_INVALID")
		})
	}
	for name, csv := range badSeeds(t, filepath.Join("..", "..", "engine", "plan", "testdata", "fuzz", "FuzzReadSeed")) {
		t.Run("seed/"+name, func(t *testing.T) {
			h := newHarness(t)
			plan := filepath.Join(h.dir, "plan.yaml")
			text := "planId: p\nplanVersion: \"1\"\nsteps:\n  - {id: seed.raw, kind: seed, path: raw.csv}\n  - {id: model.m, kind: model, sql: select * from raw, dependsOn: [seed.raw]}\n"
			if err := os.WriteFile(plan, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(h.dir, "raw.csv"), csv, 0o644); err != nil {
				t.Fatal(err)
			}
			wantRefused(t, h, h.run("run", plan), "PLAN_INVALID", "step seed.raw: seed raw.csv:")
			wantRefused(t, h, h.run("plan", "validate", plan), "PLAN_INVALID", "raw.csv:")
		})
	}
	for name, manifest := range badSeeds(t, filepath.Join("..", "..", "engine", "dbt", "testdata", "fuzz", "FuzzImportManifest")) {
		t.Run("manifest/"+name, func(t *testing.T) {
			h := newHarness(t)
			path := filepath.Join(h.dir, "manifest.json")
			if err := os.WriteFile(path, manifest, 0o644); err != nil {
				t.Fatal(err)
			}
			r := h.run("plan", "import-dbt", path, "--project-dir", h.dir, "-o", filepath.Join(h.dir, "plan.yaml"))
			wantRefused(t, h, r, "PLAN_INVALID")
			if _, err := os.Stat(filepath.Join(h.dir, "plan.yaml")); err == nil {
				t.Error("a plan was written for a refused manifest")
			}
			if name == "bad_nothing_imports" && !strings.Contains(r.stderr, "(40 problems): model.p.m00: ") {
				t.Errorf("the problem list is gone: %s", r.stderr)
			}
		})
	}
}

// TestHostileScopeFlags: scope ids with control characters are refused
// before anything is opened.
func TestHostileScopeFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--tenant", "acme\x1b[2J", "runs"},
		{"runs", "--project", "p\nq"},
		{"run", "--environment", "dev|prod", fixture("ok", "plan.yaml")},
	} {
		h := newHarness(t)
		wantRefused(t, h, h.run(args...), "INVALID_ARGUMENT", "contains a control character or '|'")
	}
	h := newHarness(t)
	h.env["DVT_TENANT"] = "t\a"
	wantRefused(t, h, h.run("runs"), "INVALID_ARGUMENT", "--tenant")
}

// TestHostileStoreTextIsEscaped (issue 8, Found 6): a run written by
// another producer with ESC, BEL and newlines in its ids and error text is
// printed escaped by every read command: the runs table keeps one row per
// run and nothing reaches the terminal raw.
func TestHostileStoreTextIsEscaped(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	st, err := sqlite.Open(ctx, h.statePath(), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := storetest.NewFixture()
	f.Meta.TenantID, f.Meta.ProjectID, f.Meta.EnvironmentID = "default", "default", "dev"
	f.Meta.PlanID = "plan\x1b[2J\x1b]0;pwned\a\nFAKE-RUN  plan@1  COMPLETED"
	f.Bootstrap(t, st)
	step := "model.x\a\x1b[31m\ninjected"
	failed := f.Event(engine.StepFailed, step, 1)
	failed.Payload = json.RawMessage(`{"error":{"code":"STEP_FAILED","message":"boom \u001b[2J\u0007\u009b31m\nline2 \u202eevil"}}`)
	failed = rekeyed(t, failed)
	if _, err := st.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{rekeyed(t, f.Event(engine.StepStarted, step, 1)), failed}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	for _, args := range [][]string{
		{"runs"}, {"runs", "--json"}, {"status", f.Meta.RunID}, {"status", f.Meta.RunID, "--json"},
		{"events", f.Meta.RunID}, {"events", f.Meta.RunID, "--json"}, {"export", f.Meta.RunID}, {"export", f.Meta.RunID, "--format", "csv"},
		{"verify", "--all"}, {"status", "run\x1b[2J"},
	} {
		r := h.run(args...)
		out := r.stdout + r.stderr
		for _, bad := range []string{"\x1b", "\a", "\u009b", "\u202e"} {
			if strings.Contains(out, bad) {
				t.Errorf("%q prints %q raw:\n%s", args, bad, out)
			}
		}
		if args[0] == "runs" && len(args) == 1 && strings.Count(r.stdout, "\n") != 2 {
			t.Errorf("the runs table has %d lines for one run:\n%s", strings.Count(r.stdout, "\n"), r.stdout)
		}
		if strings.HasSuffix(args[len(args)-1], "--json") {
			var v any
			if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
				t.Errorf("%q: not JSON after escaping: %v", args, err)
			} else if b, _ := json.Marshal(v); !strings.Contains(string(b), `\u001b`) && args[0] != "runs" {
				t.Errorf("%q: the JSON lost the escaped characters: %s", args, b)
			}
		}
	}
}

func rekeyed(t *testing.T, e engine.RunEventWrite) engine.RunEventWrite {
	t.Helper()
	k, err := engine.KeyOf(e).IdempotencyKey()
	if err != nil {
		t.Fatal(err)
	}
	e.IdempotencyKey = k
	return e
}

// TestSecretNeverLeaks (issue 8, Found 5 and Must show): a secret with a
// quote, a double quote, a backslash and a newline is stored by one step
// and read back by steps that do not declare it, whose SQLite errors echo
// it SQL-escaped and upper-cased. No form of it appears in the console, the
// events, status, exports, or any table of the state store.
func TestSecretNeverLeaks(t *testing.T) {
	t.Parallel()
	const secret = "hun'ter\"2\\x\nend-secret"
	h := newHarness(t)
	h.env["DVT_SECRET_API_TOKEN"] = secret
	plan := filepath.Join(h.dir, "plan.yaml")
	text := `planId: leak
planVersion: "1"
steps:
  - {id: sql.create, kind: sql, sql: "create table audit_log(token text)"}
  - id: sql.store
    kind: sql
    sql: "insert into audit_log values ({{ secret('API_TOKEN') }})"
    secrets: [{name: API_TOKEN}]
    dependsOn: [sql.create]
  - {id: sql.readback, kind: sql, sql: "insert into audit_log select json_extract('{}', token) from audit_log", dependsOn: [sql.store]}
  - {id: sql.readback_upper, kind: sql, sql: "insert into audit_log select json_extract('{}', upper(token)) from audit_log", dependsOn: [sql.store]}
  - {id: model.readback_lower, kind: model, materialized: table, sql: "select json_extract('{}', lower(token)) as t from audit_log", dependsOn: [sql.store]}
`
	if err := os.WriteFile(plan, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	var outputs []string
	r := h.run("run", "--threads", "1", plan)
	if r.code != exitFailed || !strings.Contains(r.stdout, "[REDACTED]") {
		t.Fatalf("run: exit %d, want 1 with the readbacks failed and redacted:\n%s%s", r.code, r.stdout, r.stderr)
	}
	outputs = append(outputs, r.stdout+r.stderr)
	runID := h.onlyRun()
	for _, args := range [][]string{
		{"runs"}, {"runs", "--json"}, {"status", runID}, {"status", runID, "--json"}, {"events", runID}, {"events", runID, "--json"},
		{"export", runID}, {"export", runID, "--format", "csv"}, {"verify", "--all"},
	} {
		r := h.run(args...)
		outputs = append(outputs, r.stdout+r.stderr)
	}
	if status := outputs[4]; strings.Count(status, "[REDACTED]") < 3 {
		t.Errorf("status does not show the three readback failures redacted:\n%s", status)
	}
	outputs = append(outputs, dumpTables(t, h.statePath()))

	forms := []string{"hun'ter", "hun''ter", "HUN'TER", "HUN''TER", "end-secret", "END-SECRET", `ter\"2`, `TER\"2`}
	for i, out := range outputs {
		for _, f := range forms {
			if strings.Contains(out, f) {
				t.Errorf("output %d holds the secret as %q:\n%s", i, f, out)
			}
		}
	}
}

// dumpTables renders every row of every table of an SQLite database.
func dumpTables(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'table'`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, n)
	}
	rows.Close()
	var b strings.Builder
	for _, tbl := range tables {
		rows, err := db.Query(`SELECT * FROM "` + tbl + `"`)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s: ", tbl)
			for _, v := range vals {
				if bs, ok := v.([]byte); ok {
					v = string(bs)
				}
				fmt.Fprintf(&b, "%v | ", v)
			}
			b.WriteByte('\n')
		}
		rows.Close()
	}
	if b.Len() == 0 {
		t.Fatal("the state store is empty")
	}
	return b.String()
}

// TestManyFailuresOneShortLine (issue 8, Found 6): a run whose many steps
// fail ends with one error line that names ten and counts the rest.
func TestManyFailuresOneShortLine(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var b strings.Builder
	b.WriteString("planId: many\nplanVersion: \"1\"\nsteps:\n")
	for i := range 40 {
		fmt.Fprintf(&b, "  - {id: sql.broken_%02d, kind: sql, sql: \"insert into missing_table values (1)\"}\n", i)
	}
	plan := filepath.Join(h.dir, "plan.yaml")
	if err := os.WriteFile(plan, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	r := h.run("run", "--threads", "4", plan)
	wantError(t, r, exitFailed, "STEP_FAILED", "40 failed (", "… and 30 more")
	if len(r.stderr) > 600 {
		t.Errorf("a %d-byte error line: %s", len(r.stderr), r.stderr)
	}
}
