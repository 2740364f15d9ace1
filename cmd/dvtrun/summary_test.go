package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/runner"
)

// onLine is a stdout that calls fn once, in its own goroutine, with the
// text printed so far when a line matching re appears.
type onLine struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	re   *regexp.Regexp
	once sync.Once
	fn   func(out string)
}

func (w *onLine) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.re.Match(w.buf.Bytes()) {
		out := w.buf.String()
		w.once.Do(func() { go w.fn(out) })
	}
	return len(p), nil
}

func (w *onLine) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

var runIDLineRE = regexp.MustCompile(`as run (\S+)`)

// TestSummaryFollowsTheRunsEnd: the closing lines say how the run really
// ended. An interrupted run is resumable and says how to resume (not
// "Completed successfully"); a cancelled run counts its cancelled step as
// CANCELLED, not as an error.
func TestSummaryFollowsTheRunsEnd(t *testing.T) {
	t.Parallel()
	t.Run("interrupted", func(t *testing.T) {
		h := newHarness(t)
		planFile := fixture("ok", "plan.yaml")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		out := &cancelAfter{n: 2, cancel: cancel}
		var errb bytes.Buffer
		code := run(ctx, []string{"run", "--threads", "1", planFile}, out, &errb, func(k string) string { return h.env[k] })
		r := result{code, out.buf.String(), errb.String()}
		wantError(t, r, exitInterrupted, "INTERRUPTED", "dvtrun resume")
		runID := h.onlyRun()
		for _, bad := range []string{"Completed successfully", "Completed with", "Finished running"} {
			if strings.Contains(r.stdout, bad) {
				t.Errorf("an interrupted run's summary says %q:\n%s", bad, r.stdout)
			}
		}
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`(?m)^Interrupted after \d+\.\d\ds: \d+ step\(s\) in flight stopped, \d+ not started\.$`),
			regexp.MustCompile(`(?m)^The run is resumable: .*Continue with: dvtrun resume ` + regexp.QuoteMeta(runID) + `$`),
			regexp.MustCompile(`(?m)^Done\. PASS=\d+ WARN=0 ERROR=0 SKIP=0 INTERRUPTED=\d+ NOT_STARTED=\d+ TOTAL=5$`),
		} {
			if !want.MatchString(r.stdout) {
				t.Errorf("stdout lacks %s:\n%s", want, r.stdout)
			}
		}
	})

	t.Run("cancelled", func(t *testing.T) {
		h := newHarness(t)
		ctx, stop := context.WithTimeout(context.Background(), 60*time.Second)
		defer stop()
		cancelled := make(chan result, 1)
		out := &onLine{re: regexp.MustCompile(`START sql table model slow`), fn: func(out string) {
			m := runIDLineRE.FindStringSubmatch(out)
			if m == nil {
				cancelled <- result{code: -1, stderr: "no run id printed"}
				return
			}
			var o, e bytes.Buffer
			code := run(ctx, []string{"cancel", m[1], "--reason", "wrong day"}, &o, &e, func(k string) string { return h.env[k] })
			cancelled <- result{code, o.String(), e.String()}
		}}
		var errb bytes.Buffer
		code := run(ctx, []string{"run", "--threads", "1", fixture("slow", "plan.yaml")}, out, &errb, func(k string) string { return h.env[k] })
		r := result{code, out.String(), errb.String()}
		select {
		case c := <-cancelled:
			if c.code != 0 {
				t.Fatalf("cancel: exit %d: %s", c.code, c.stderr)
			}
		case <-time.After(10 * time.Second): // the cancel command's own end
			t.Fatalf("no cancel was sent within 10s of the run's end: the run ended before model.slow started (exit %d):\n%s\n%s", r.code, r.stdout, r.stderr)
		}
		wantError(t, r, exitFailed, "STEP_CANCELLED")
		if snap := h.statusOf(h.onlyRun()); snap.Status != engine.StatusCancelled {
			t.Fatalf("the run is %s, want CANCELLED:\n%s", snap.Status, r.stdout)
		}
		for _, bad := range []string{"Completed successfully", "Completed with", "ERROR creating"} {
			if strings.Contains(r.stdout, bad) {
				t.Errorf("a cancelled run's output says %q:\n%s", bad, r.stdout)
			}
		}
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`(?m)^2 of 3 CANCELLED sql table model slow \.+ \[CANCELLED after \d+\.\d\ds\]$`),
			regexp.MustCompile(`(?m)^Cancelled: 1 step\(s\) stopped in flight, 1 skipped\.$`),
			regexp.MustCompile(`(?m)^Done\. PASS=1 WARN=0 ERROR=0 SKIP=1 CANCELLED=1 TOTAL=3$`),
		} {
			if !want.MatchString(r.stdout) {
				t.Errorf("stdout lacks %s:\n%s", want, r.stdout)
			}
		}
	})
}

// TestConsoleSummary: each way a run ends gets its own closing lines,
// whatever the console counted.

// TestConsoleSummary: each way a run ends gets its own closing lines,
// whatever the console counted.
func TestConsoleSummary(t *testing.T) {
	t.Parallel()
	ok := runner.Progress{Phase: runner.PhaseStepDone, Step: plan.Step{ID: "model.a", Kind: plan.KindModel}, Status: engine.StepStatusSuccess}
	failed := runner.Progress{Phase: runner.PhaseStepDone, Step: plan.Step{ID: "model.b", Kind: plan.KindModel}, Status: engine.StepStatusFailed,
		Err: engine.Errorf(engine.CodeStepFailed, "model.b: no such table")}
	stopped := runner.Progress{Phase: runner.PhaseStepDone, Step: plan.Step{ID: "model.c", Kind: plan.KindModel}, Status: engine.StepStatusFailed,
		Err: engine.Errorf(engine.CodeStepCancelled, "step model.c was cancelled")}
	skipped := runner.Progress{Phase: runner.PhaseStepDone, Step: plan.Step{ID: "model.d", Kind: plan.KindModel}, Status: engine.StepStatusSkipped, SkipReason: "run cancelled"}
	started := runner.Progress{Phase: runner.PhaseRunStarted, Total: 4, Threads: 1}
	cases := []struct {
		name    string
		reports []runner.Progress
		end     runEnd
		want    []string // in this order
		notWant []string
	}{
		{"completed", []runner.Progress{started, ok}, runEnd{status: engine.StatusCompleted},
			[]string{"Completed successfully", "Done. PASS=1 WARN=0 ERROR=0 SKIP=0 TOTAL=1"}, []string{"CANCELLED=", "Interrupted"}},
		{"failed", []runner.Progress{started, ok, failed}, runEnd{status: engine.StatusFailed},
			[]string{"Completed with 1 error(s):", "model.b: no such table", "Done. PASS=1 WARN=0 ERROR=1 SKIP=0 TOTAL=2"}, []string{"Completed successfully"}},
		{"failed by an earlier runner", []runner.Progress{started}, runEnd{status: engine.StatusFailed, reason: "1 step(s) failed: model.b"},
			[]string{"Failed: 1 step(s) failed: model.b", "Done. PASS=0 WARN=0 ERROR=0 SKIP=0 TOTAL=0"}, []string{"Completed successfully"}},
		{"cancelled", []runner.Progress{started, ok, stopped, skipped}, runEnd{status: engine.StatusCancelled},
			[]string{"CANCELLED sql view model c", "Cancelled: 1 step(s) stopped in flight, 1 skipped.", "Done. PASS=1 WARN=0 ERROR=0 SKIP=1 CANCELLED=1 TOTAL=3"},
			[]string{"Completed", "ERROR creating"}},
		{"interrupted", []runner.Progress{started, ok}, runEnd{interrupted: true, resume: "dvtrun resume R p.yaml", inFlight: 1, finished: 1},
			[]string{"1 step(s) in flight stopped, 2 not started.", "Continue with: dvtrun resume R p.yaml", "Done. PASS=1 WARN=0 ERROR=0 SKIP=0 INTERRUPTED=1 NOT_STARTED=2 TOTAL=4"},
			[]string{"Completed", "Finished running"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			con := newConsole(&cli{stdout: &out}, "sqlite")
			for _, p := range tc.reports {
				con.Report(p)
			}
			con.summary(tc.end)
			got := out.String()
			rest := got
			for _, w := range tc.want {
				_, after, found := strings.Cut(rest, w)
				if !found {
					t.Fatalf("missing %q (in order) in:\n%s", w, got)
				}
				rest = after
			}
			for _, w := range tc.notWant {
				if strings.Contains(got, w) {
					t.Errorf("has %q:\n%s", w, got)
				}
			}
		})
	}
}

// TestResumeTimesTheStepItRunsAgain: a step in flight when its run was
// interrupted runs again on resume with a START line of its own, and
// status, the CSV export and run_results.json time it from that attempt,
// not from the first runner's StepStarted (the interruption and the wait
// before the resume are not execution); the SQL projection agrees.
func TestResumeTimesTheStepItRunsAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	planFile := fixture("slow", "plan.yaml")
	// Bounds the interrupted run and the resume that runs model.slow to
	// its end (seconds; much longer on a loaded machine).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	runCtx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	out := &onLine{re: regexp.MustCompile(`START sql table model slow`), fn: func(string) {
		time.Sleep(100 * time.Millisecond) // let its SQL start
		interrupt()
	}}
	var errb bytes.Buffer
	code := run(runCtx, []string{"run", "--threads", "1", planFile}, out, &errb, func(k string) string { return h.env[k] })
	wantError(t, result{code, out.String(), errb.String()}, exitInterrupted, "INTERRUPTED")
	runID := h.onlyRun()
	if s := stepOf(h.statusOf(runID), "model.slow"); s.Status != engine.StepStatusRunning {
		t.Fatalf("model.slow is %s after the interrupt, want RUNNING", s.Status)
	}
	const gap = 1500 * time.Millisecond
	time.Sleep(gap) // the interruption lasts a while
	resumed := time.Now()
	r := h.runCtx(ctx, "resume", runID, planFile)
	if r.code != 0 {
		t.Fatalf("resume: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if !regexp.MustCompile(`(?m)^\d+ of 3 START sql table model slow \(engine attempt 2\) \.+ \[RUN\]$`).MatchString(r.stdout) {
		t.Errorf("resume printed no START line for model.slow:\n%s", r.stdout)
	}
	slow := stepOf(h.statusOf(runID), "model.slow")
	if slow.EngineAttemptID != 2 || slow.StartedAt.Before(resumed.Add(-time.Second)) {
		t.Errorf("model.slow: engine attempt %d started at %s, want attempt 2 started by the resume (%s)", slow.EngineAttemptID, slow.StartedAt, resumed)
	}
	if took := time.Since(resumed); slow.DurationMs > took.Milliseconds() {
		t.Errorf("model.slow took %d ms, longer than the resume (%s): the interruption was counted", slow.DurationMs, took)
	}
	if v := h.run("verify", runID); v.code != 0 {
		t.Errorf("verify: exit %d\n%s\n%s", v.code, v.stdout, v.stderr)
	}
	csv := h.run("export", runID, "--format", "csv")
	if want := strconv.FormatInt(slow.DurationMs, 10); csv.code != 0 || !regexp.MustCompile(`(?m),model\.slow,OK,[^,]*,[^,]*,`+want+`,`).MatchString(csv.stdout) {
		t.Errorf("the CSV export does not give model.slow %s ms: exit %d\n%s\n%s", want, csv.code, csv.stdout, csv.stderr)
	}
	rr := h.run("export", runID, "--format", "run-results")
	var doc struct {
		Results []struct {
			UniqueID      string  `json:"unique_id"`
			ExecutionTime float64 `json:"execution_time"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(rr.stdout), &doc); err != nil || rr.code != 0 {
		t.Fatalf("export --format run-results: exit %d, %v: %s", rr.code, err, rr.stderr)
	}
	for _, res := range doc.Results {
		if strings.HasSuffix(res.UniqueID, ".slow") && (res.ExecutionTime*1000 > float64(slow.DurationMs)+1 || res.ExecutionTime*1000 < float64(slow.DurationMs)-1) {
			t.Errorf("run_results.json: model.slow's execution_time is %.3fs, status says %d ms", res.ExecutionTime, slow.DurationMs)
		}
	}
}

// stepOf is Snapshot.Step without its ok.
func stepOf(s engine.Snapshot, id string) engine.StepSnapshot {
	st, _ := s.Step(id)
	return st
}
