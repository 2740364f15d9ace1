package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/runner"
)

func TestVersion(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--version"}, &out, &errb, func(string) string { return "" })
	if code != exitOK || !strings.HasPrefix(out.String(), "dvtrun ") || !strings.Contains(out.String(), "go1.") {
		t.Fatalf("dvtrun --version: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

// TestDidYouMean: a mistyped command, or a selector naming a step that
// does not exist, gets the closest name; a word close to nothing gets none.
func TestDidYouMean(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	plan := fixture("ok", "plan.yaml")
	cases := []struct {
		args []string
		want string // in stderr
		hint bool
	}{
		{[]string{"rnu", plan}, `unknown command "rnu": did you mean "run"?`, true},
		{[]string{"stauts"}, `did you mean "status"?`, true},
		{[]string{"verfy", "--all"}, `did you mean "verify"?`, true},
		{[]string{"frobnicate"}, `unknown command "frobnicate" (see dvtrun --help)`, false},
		{[]string{"run", plan, "--select", "stg_custmers"}, `did you mean "stg_customers"?`, true},
		{[]string{"ls", plan, "--select", "tag:nope"}, `does not match any step`, false},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args[:1], " "), func(t *testing.T) {
			r := h.run(tc.args...)
			if !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("stderr %q lacks %q", r.stderr, tc.want)
			}
			if got := strings.Contains(r.stderr, "did you mean"); got != tc.hint {
				t.Errorf("hint %v, want %v: %q", got, tc.hint, r.stderr)
			}
		})
	}
}

func TestSuggest(t *testing.T) {
	t.Parallel()
	names := []string{"run", "resume", "retry", "runs", "status", "schedule", "scheduler"}
	cases := map[string]string{
		"rnu": "run", "retyr": "retry", "statsu": "status", "schedul": "schedule",
		"sched": "", // a prefix of two: no guess
		"x":     "", "zzzzzz": "",
	}
	for in, want := range cases {
		if got := suggest(in, names); got != want {
			t.Errorf("suggest(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestEveryCommandHelp: `COMMAND --help` exits 0 for every command and
// shows the flags the way README writes them (--flag, not -flag).
func TestEveryCommandHelp(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	longSingleDash := regexp.MustCompile(`(?m)^  -[a-z][a-z-]+`)
	args := [][]string{{"--help"}, {"help"}}
	for _, cmd := range commands() {
		args = append(args, []string{cmd.name, "--help"}, []string{"help", cmd.name})
	}
	for _, sub := range [][]string{{"plan", "validate"}, {"plan", "show"}, {"plan", "import-dbt"}, {"schedule", "list"},
		{"schedule", "trigger"}, {"schedule", "backfill"}, {"outbox", "deliver"}, {"outbox", "dead"}, {"queue", "cancel"},
		{"audit", "verify"}, {"audit", "checkpoint"}, {"audit", "prove"}, {"audit", "key"}, {"audit", "doctor"}} {
		args = append(args, append(sub, "--help"))
	}
	for _, a := range args {
		r := h.run(a...)
		if r.code != exitOK {
			t.Errorf("dvtrun %s: exit %d, stderr %q", strings.Join(a, " "), r.code, r.stderr)
			continue
		}
		// A command group (plan, outbox, schedule) lists its subcommands;
		// every other help lists flags, the global ones included.
		group := strings.Contains(r.stdout, "SUBCOMMAND --help")
		if !strings.Contains(r.stdout, "Usage: dvtrun") || !group && !strings.Contains(r.stdout, "  --store URL") {
			t.Errorf("dvtrun %s: no usage with --store:\n%s", strings.Join(a, " "), r.stdout)
		}
		if m := longSingleDash.FindString(r.stdout); m != "" {
			t.Errorf("dvtrun %s: flag shown with one dash: %q", strings.Join(a, " "), m)
		}
	}
}

// TestColor: colour on a terminal (CLICOLOR_FORCE stands for one here)
// and never with NO_COLOR or --no-color, nor into a file or pipe.
func TestColor(t *testing.T) {
	t.Parallel()
	ok := runner.Progress{Phase: runner.PhaseStepDone, Step: plan.Step{ID: "model.a", Kind: plan.KindModel}, Status: engine.StepStatusSuccess}
	bad := runner.Progress{Phase: runner.PhaseStepDone, Step: plan.Step{ID: "model.b", Kind: plan.KindModel}, Status: engine.StepStatusFailed,
		Err: engine.Errorf(engine.CodeStepFailed, "boom")}
	cases := []struct {
		name    string
		env     map[string]string
		noColor bool
		want    bool
	}{
		{"pipe", nil, false, false},
		{"forced", map[string]string{"CLICOLOR_FORCE": "1"}, false, true},
		{"NO_COLOR", map[string]string{"CLICOLOR_FORCE": "1", "NO_COLOR": "1"}, false, false},
		{"--no-color", map[string]string{"CLICOLOR_FORCE": "1"}, true, false},
		{"dumb terminal", map[string]string{"CLICOLOR_FORCE": "1", "TERM": "dumb"}, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			c := &cli{stdout: &out, env: func(k string) string { return tc.env[k] }}
			c.g.noColor = tc.noColor
			con := newConsole(c, "sqlite")
			con.Report(ok)
			con.Report(bad)
			con.summary(runEnd{status: engine.StatusFailed})
			got := out.String()
			if has := strings.Contains(got, "\x1b["); has != tc.want {
				t.Fatalf("colour %v, want %v:\n%q", has, tc.want, got)
			}
			if tc.want && (!strings.Contains(got, "\x1b[32m[OK in") || !strings.Contains(got, "\x1b[31m[ERROR in")) {
				t.Errorf("statuses not coloured by outcome:\n%q", got)
			}
			// The words stay: colour never says alone what happened.
			if !strings.Contains(got, "OK in") || !strings.Contains(got, "ERROR in") {
				t.Errorf("status words missing:\n%q", got)
			}
		})
	}
}

// TestLiveLine: on a terminal, steps running for liveAfter or more are
// named on a live line with their time so far; the next printed line
// erases it first, and quick steps never show.
func TestLiveLine(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	con := newConsole(&cli{stdout: &out}, "sqlite")
	con.tty = true
	t0 := time.Now()
	con.running["model.slow"] = t0.Add(-7 * time.Second)
	con.running["model.quick"] = t0.Add(-time.Second)
	con.drawLive(t0)
	live := out.String()
	if !strings.Contains(live, "running: model.slow 7s") || strings.Contains(live, "model.quick") || strings.Contains(live, "\n") {
		t.Fatalf("live line %q: want model.slow 7s only, no newline", live)
	}
	con.Report(runner.Progress{Phase: runner.PhaseStepDone, Step: plan.Step{ID: "model.slow", Kind: plan.KindModel}, Status: engine.StepStatusSuccess})
	rest := strings.TrimPrefix(out.String(), live)
	if !strings.HasPrefix(rest, "\r\x1b[K") {
		t.Fatalf("the next line does not erase the live line first: %q", rest)
	}
	out.Reset()
	con.drawLive(t0.Add(time.Second)) // model.slow is done, model.quick now 2s
	if out.String() != "" {
		t.Errorf("live line with nothing long running: %q", out.String())
	}
}
