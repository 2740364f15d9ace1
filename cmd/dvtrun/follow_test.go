package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/runner"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

// TestFollowFinishedRun: following a run that already ended prints its
// picture once and exits as `run` did; --json prints snapshots.
func TestFollowFinishedRun(t *testing.T) {
	t.Parallel()
	cases := []struct {
		plan string
		exit int
		want []string
	}{
		{"ok", exitOK, []string{"run   COMPLETED", "seed.customers", "SUCCESS"}},
		{"failing", exitFailed, []string{"run   FAILED", "FAILED in", "SKIPPED"}},
	}
	for _, tc := range cases {
		t.Run(tc.plan, func(t *testing.T) {
			h := newHarness(t)
			h.run("run", fixture(tc.plan, "plan.yaml"))
			runID := h.onlyRun()
			r := h.run("status", runID, "--follow", "--interval", "10ms")
			if r.code != tc.exit {
				t.Fatalf("exit %d, want %d\n%s\n%s", r.code, tc.exit, r.stdout, r.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("output lacks %q:\n%s", w, r.stdout)
				}
			}
			j := h.run("status", runID, "--follow", "--json")
			var snap struct {
				Status   string `json:"status"`
				InFlight int    `json:"inFlight"`
			}
			lines := strings.Split(strings.TrimSpace(j.stdout), "\n")
			if err := json.Unmarshal([]byte(lines[0]), &snap); err != nil || len(lines) != 1 || snap.Status == "" {
				t.Errorf("--json: %v, %q", err, j.stdout)
			}
		})
	}
	h := newHarness(t)
	wantError(t, h.run("status", "x", "--follow", "--interval", "1ms"), exitUsage, "INVALID_ARGUMENT", "--interval")
}

// TestProjectOnce: `project --once` stores one snapshot per run and then has
// nothing left to do; the stored snapshot is the run's status.
func TestProjectOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.run("run", fixture("ok", "plan.yaml"))
	runID := h.onlyRun()
	for _, want := range []string{"Projected 1 snapshot(s).", "Projected 0 snapshot(s)."} {
		r := h.run("project", "--once")
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Fatalf("project --once: exit %d, %q, want %q (%s)", r.code, r.stdout, want, r.stderr)
		}
	}
	st, err := sqlite.Open(context.Background(), h.statePath(), sqlite.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	state, version, err := st.LoadSnapshot(context.Background(), runID)
	if err != nil || version != 1 {
		t.Fatalf("stored version %d, %v", version, err)
	}
	stored, err := engine.UnmarshalSnapshotState(state)
	if err != nil {
		t.Fatal(err)
	}
	if d := engine.DiffSnapshots(stored, h.statusOf(runID)); len(d) > 0 {
		t.Fatalf("stored snapshot differs from status: %+v", d)
	}
	// follow starts from the stored snapshot; a stored state that does not
	// decode falls back to the log.
	for _, corrupt := range []bool{false, true} {
		if corrupt {
			if _, err := st.DB().Exec(`UPDATE dvt_live_snapshots SET state = '{' WHERE run_id = ?`, runID); err != nil {
				t.Fatal(err)
			}
		}
		if r := h.run("status", runID, "--follow"); r.code != 0 || !strings.Contains(r.stdout, "run   COMPLETED") {
			t.Fatalf("follow (corrupt state %v): exit %d\n%s\n%s", corrupt, r.code, r.stdout, r.stderr)
		}
	}
}

// TestConsoleReportsSignals: the running `run` console says what a signal
// sent from elsewhere did, with control characters escaped.
func TestConsoleReportsSignals(t *testing.T) {
	t.Parallel()
	cases := []struct {
		p    runner.Progress
		want string
	}{
		{runner.Progress{Phase: runner.PhaseSignal, Signal: &engine.Signal{Type: engine.SignalPause, RequestedBy: "alice", Reason: "deploy"}, InFlight: 2},
			"PAUSED by alice (deploy): no new steps start; 2 step(s) in flight draining\n"},
		{runner.Progress{Phase: runner.PhaseSignal, Signal: &engine.Signal{Type: engine.SignalResume, RequestedBy: "alice"}},
			"RESUMED by alice\n"},
		{runner.Progress{Phase: runner.PhaseSignal, Signal: &engine.Signal{Type: engine.SignalCancel, RequestedBy: "bob", Reason: "wrong\x1b[2J data"}},
			"CANCELLED by bob (wrong\\x1b[2J data)\n"},
		{runner.Progress{Phase: runner.PhaseSignal, Signal: &engine.Signal{Type: engine.SignalRetryStep, StepID: "model.a"}},
			"RETRY of model.a requested by an unnamed actor\n"},
		{runner.Progress{Phase: runner.PhaseSignal, Signal: &engine.Signal{Type: engine.SignalCancel, RequestedBy: "mallory"}, Rejected: "not allowed"},
			"Signal CANCEL by mallory rejected: not allowed\n"},
		{runner.Progress{Phase: runner.PhaseDrained}, "Drained: no step in flight; the run stays PAUSED until it is resumed\n"},
	}
	for _, tc := range cases {
		var out strings.Builder
		c := &cli{stdout: &out}
		newConsole(c, "sqlite").Report(tc.p)
		if out.String() != tc.want {
			t.Errorf("got %q, want %q", out.String(), tc.want)
		}
	}
}
