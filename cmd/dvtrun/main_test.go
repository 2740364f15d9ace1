package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// result is one in-process invocation of the CLI.
type result struct {
	code           int
	stdout, stderr string
}

// harness runs the CLI in-process against a state store and a warehouse in
// a temporary directory.
type harness struct {
	t   *testing.T
	dir string
	env map[string]string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	dir := t.TempDir()
	return &harness{t: t, dir: dir, env: map[string]string{
		"DVT_STORE":     "sqlite:" + filepath.Join(dir, "state.db"),
		"DVT_WAREHOUSE": "sqlite:" + filepath.Join(dir, "warehouse.db"),
	}}
}

func (h *harness) statePath() string { return strings.TrimPrefix(h.env["DVT_STORE"], "sqlite:") }

func (h *harness) run(args ...string) result {
	h.t.Helper()
	return h.runCtx(context.Background(), args...)
}

func (h *harness) runCtx(ctx context.Context, args ...string) result {
	h.t.Helper()
	var out, errb bytes.Buffer
	code := run(ctx, args, &out, &errb, func(k string) string { return h.env[k] })
	return result{code, out.String(), errb.String()}
}

// fixture returns the path of a file under testdata/.
func fixture(parts ...string) string {
	return filepath.Join(append([]string{"testdata"}, parts...)...)
}

var errorLineRE = regexp.MustCompile(`^dvtrun: [A-Z_]+: \S.*\n$`)

// wantError checks the contract of every failure: the exit code, and one
// line `dvtrun: CODE: sentence` on stderr containing each of msgs.
func wantError(t *testing.T, r result, exit int, code string, msgs ...string) {
	t.Helper()
	if r.code != exit {
		t.Errorf("exit code %d, want %d (stderr %q)", r.code, exit, r.stderr)
	}
	if !errorLineRE.MatchString(r.stderr) {
		t.Errorf("stderr is not one `dvtrun: CODE: sentence` line: %q", r.stderr)
	}
	if !strings.HasPrefix(r.stderr, "dvtrun: "+code+": ") {
		t.Errorf("stderr %q, want code %s", r.stderr, code)
	}
	for _, m := range msgs {
		if !strings.Contains(r.stderr, m) {
			t.Errorf("stderr %q does not mention %q", r.stderr, m)
		}
	}
	for _, bad := range []string{"goroutine ", "panic", ".go:"} {
		if strings.Contains(r.stderr+r.stdout, bad) {
			t.Errorf("output contains %q (a stack trace?)", bad)
		}
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args  []string
		flags []string // flags the help must list
	}{
		{[]string{"--help"}, []string{"-store", "-warehouse", "run", "resume", "cancel", "signal", "runs", "status", "events", "export", "plan", "verify"}},
		{[]string{"help"}, []string{"-store", "verify"}},
		{[]string{"run", "--help"}, []string{"-threads", "-fail-fast", "-secrets-file", "-run-request-id", "-plan-sha256", "-store", "-warehouse"}},
		{[]string{"resume", "--help"}, []string{"-threads", "-secrets-file"}},
		{[]string{"cancel", "--help"}, []string{"-reason", "-store"}},
		{[]string{"signal", "-h"}, []string{"-step", "-reason", "retry-step"}},
		{[]string{"runs", "--help"}, []string{"-limit", "-json"}},
		{[]string{"status", "--help"}, []string{"-json"}},
		{[]string{"events", "--help"}, []string{"-json", "-after", "-limit"}},
		{[]string{"export", "--help"}, []string{"-format", "-o"}},
		{[]string{"plan", "--help"}, []string{"validate", "import-dbt"}},
		{[]string{"plan", "validate", "--help"}, []string{"-plan-sha256", "-json"}},
		{[]string{"plan", "import-dbt", "--help"}, []string{"-project-dir", "-o", "-strict"}},
		{[]string{"verify", "--help"}, []string{"-all", "-json"}},
		{[]string{"help", "events"}, []string{"-after"}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			h := newHarness(t)
			r := h.run(c.args...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			for _, f := range c.flags {
				if !strings.Contains(r.stdout, f) {
					t.Errorf("help does not list %s:\n%s", f, r.stdout)
				}
			}
			if _, err := os.Stat(h.statePath()); err == nil {
				t.Error("--help created a state store")
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		msg  string
	}{
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"unknown flag", []string{"status", "--bogus", "x"}, "-bogus"},
		{"unknown global flag", []string{"--bogus", "runs"}, "-bogus"},
		{"missing argument", []string{"status"}, "missing arguments"},
		{"extra argument", []string{"status", "a", "b"}, `unexpected argument "b"`},
		{"bad threads", []string{"run", "--threads", "0", fixture("ok", "plan.yaml")}, "--threads"},
		{"threads not a number", []string{"run", "--threads", "many", fixture("ok", "plan.yaml")}, "-threads"},
		{"unknown signal", []string{"signal", "r1", "explode"}, `unknown signal "explode"`},
		{"retry-step without step", []string{"signal", "r1", "retry-step"}, "--step"},
		{"export format", []string{"export", "r1", "--format", "xml"}, `"xml"`},
		{"verify needs a target", []string{"verify"}, "--all"},
		{"unknown store scheme", []string{"--store", "mysql://x/y", "runs"}, `"mysql"`},
		{"plan subcommand", []string{"plan", "frob"}, `"frob"`},
		{"bad sha256", []string{"run", "--plan-sha256", "xyz", fixture("ok", "plan.yaml")}, "64 hex digits"},
		{"missing secrets file", []string{"run", "--secrets-file", "testdata/nope.env", fixture("ok", "plan.yaml")}, "nope.env"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			r := h.run(c.args...)
			wantError(t, r, exitUsage, "INVALID_ARGUMENT", c.msg)
			if _, err := os.Stat(h.statePath()); err == nil {
				t.Error("a refused command created the state store")
			}
		})
	}
}

func TestNoArgumentsPrintsUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{}, {"plan"}} {
		r := newHarness(t).run(args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "Usage: dvtrun") || r.stdout != "" {
			t.Errorf("%v: exit %d, stderr %q, stdout %q", args, r.code, r.stderr, r.stdout)
		}
	}
}

func TestParseTarget(t *testing.T) {
	t.Parallel()
	c := &cli{env: func(k string) string {
		if k == "DVT_SNOWFLAKE_DSN" {
			return "bob:envpass@acct/db/sch"
		}
		return ""
	}}
	cases := []struct {
		raw, kind, path, dsn, secret string
		bad                          bool
	}{
		{raw: "sqlite:.dvt/state.db", kind: "sqlite", path: ".dvt/state.db"},
		{raw: "sqlite:///abs/state.db", kind: "sqlite", path: "/abs/state.db"},
		{raw: "state.db", kind: "sqlite", path: "state.db"},
		{raw: "snowflake://alice:pw123@acct/db/schema?warehouse=wh", kind: "snowflake", dsn: "alice:pw123@acct/db/schema?warehouse=wh", secret: "pw123"},
		{raw: "snowflake://", kind: "snowflake", dsn: "bob:envpass@acct/db/sch", secret: "envpass"},
		{raw: "postgres://ann:pgpw9@db.example:5432/dvt?sslmode=require", kind: "postgres", dsn: "postgres://ann:pgpw9@db.example:5432/dvt?sslmode=require", secret: "pgpw9"},
		{raw: "postgresql://ann@/dvt?host=/run/pg", kind: "postgres", dsn: "postgresql://ann@/dvt?host=/run/pg"},
		{raw: "postgres:host=/run/pg dbname=dvt password=kvpw7", kind: "postgres", dsn: "host=/run/pg dbname=dvt password=kvpw7", secret: "kvpw7"},
		{raw: "postgres:", bad: true},
		{raw: "sqlite:", bad: true},
		{raw: "mysql://x", bad: true},
	}
	for _, tc := range cases {
		got, err := c.parseTarget("store", tc.raw)
		if tc.bad {
			if err == nil {
				t.Errorf("%q: no error", tc.raw)
			}
			continue
		}
		if err != nil || got.kind != tc.kind || got.path != tc.path || got.dsn != tc.dsn {
			t.Errorf("%q: got %+v, %v", tc.raw, got, err)
		}
		if tc.secret != "" && c.redact("x "+tc.secret+" y") != "x [REDACTED] y" {
			t.Errorf("%q: the DSN password is not redacted", tc.raw)
		}
	}
}

func TestReadSecretsFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cases := []struct {
		name, text string
		want       map[string]string
		errLine    string
	}{
		{"plain", "A=1\n# comment\n\nB_2 = x=y \n", map[string]string{"A": "1", "B_2": "x=y"}, ""},
		{"no equals", "A=1\nhunter2\n", nil, "line 2"},
		{"bad key", "a-b=1\n", nil, "line 1"},
	}
	for _, c := range cases {
		p := filepath.Join(dir, c.name+".env")
		if err := os.WriteFile(p, []byte(c.text), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := readSecretsFile(p)
		if c.errLine != "" {
			if err == nil || !strings.Contains(err.Error(), c.errLine) || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("%s: error %v, want one naming %s and no value", c.name, err, c.errLine)
			}
			continue
		}
		if err != nil || len(got) != len(c.want) {
			t.Fatalf("%s: %v %v", c.name, got, err)
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%s: %s=%q, want %q", c.name, k, got[k], v)
			}
		}
	}
}

// TestSnowflakeDSNNeverPrinted: a Snowflake DSN the driver refuses is
// reported without its password, and a refused warehouse records no run.
func TestSnowflakeDSNNeverPrinted(t *testing.T) {
	t.Parallel()
	const password = "Sup3rS3cret"
	cases := [][]string{
		{"--store", "snowflake://alice:" + password + "@", "runs"},
		{"--warehouse", "snowflake://alice:" + password + "@", "run", fixture("ok", "plan.yaml")},
	}
	for _, args := range cases {
		h := newHarness(t)
		r := h.run(args...)
		wantError(t, r, exitUsage, "INVALID_ARGUMENT")
		if strings.Contains(r.stdout+r.stderr, password) {
			t.Errorf("%v: the password was printed: %q", args, r.stderr)
		}
		if _, err := os.Stat(h.statePath()); err == nil && countRuns(t, h.statePath()) != 0 {
			t.Errorf("%v: a run was recorded", args)
		}
	}
}

// TestHelpHidesDSNPassword (issue 8, Found 5): --help prints the flags'
// defaults, which come from DVT_STORE and DVT_WAREHOUSE: a DSN's password
// and tokens must not be among them.
func TestHelpHidesDSNPassword(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.env["DVT_STORE"] = "snowflake://alice:s3cr3t-pw@myorg-acct/DVT/PUBLIC?warehouse=WH&token=t0ken-value"
	h.env["DVT_WAREHOUSE"] = "snowflake://bob:wh-pa55@myorg-acct/DVT/PUBLIC"
	for _, args := range [][]string{{"--help"}, {"run", "--help"}, {"verify", "--help"}, {"help", "status"}} {
		r := h.run(args...)
		if r.code != 0 || !strings.Contains(r.stdout, "alice:***@myorg-acct") || !strings.Contains(r.stdout, "bob:***@") {
			t.Errorf("%v: exit %d, the defaults are not shown redacted:\n%s", args, r.code, r.stdout)
		}
		for _, secret := range []string{"s3cr3t-pw", "t0ken-value", "wh-pa55"} {
			if strings.Contains(r.stdout+r.stderr, secret) {
				t.Errorf("%v prints %q", args, secret)
			}
		}
	}
}
