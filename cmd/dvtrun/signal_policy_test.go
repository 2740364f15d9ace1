package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

// TestSignalWithoutRunner: a signal to a run no runner holds says so and
// how it will take effect, whether the run never started, its runner's
// lease expired, or a live runner does not answer in time.
func TestSignalWithoutRunner(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	runID := queueRun(t, h)
	ctx := context.Background()
	lease := func(owner string, ttl time.Duration) {
		t.Helper()
		st, err := sqlite.Open(ctx, h.statePath(), sqlite.Options{MustExist: true})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := st.AcquireLease(ctx, runID, owner, ttl); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name  string
		setup func()
		args  []string
		want  []string
	}{
		{"never started", func() {}, []string{"cancel", runID, "--actor", "bob"},
			[]string{"CANCEL sent to run " + runID + " by bob", "No runner holds run " + runID, "cancelled when it is resumed (`dvtrun resume " + runID + "`)", "before any step runs again"}},
		{"runner gone", func() { lease("dvtrun@gone:1", time.Millisecond); time.Sleep(20 * time.Millisecond) },
			[]string{"signal", runID, "pause", "--actor", "bob"},
			[]string{"the lease of dvtrun@gone:1 expired at", "decided when the run is resumed"}},
		{"live runner, no answer", func() { lease("dvtrun@busy:2", time.Minute) },
			[]string{"signal", runID, "resume", "--actor", "bob", "--wait", "300ms"},
			[]string{"No decision from dvtrun@busy:2 within 300ms", "dvtrun events " + runID}},
		{"live runner, no wait", func() {},
			[]string{"signal", runID, "pause", "--wait", "0"},
			[]string{"owned by dvtrun@busy:2, which decides the signal at its next poll"}},
	}
	for _, tc := range cases {
		tc.setup()
		r := h.run(tc.args...)
		if r.code != 0 {
			t.Fatalf("%s: exit %d: %s", tc.name, r.code, r.stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("%s: stdout lacks %q:\n%s", tc.name, w, r.stdout)
			}
		}
	}
	st, err := sqlite.Open(ctx, h.statePath(), sqlite.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sigs, _ := st.ListSignals(ctx, runID, 0)
	if len(sigs) != 4 || sigs[0].RequestedBy != "bob" || sigs[3].RequestedBy == "" {
		t.Fatalf("stored signals %+v: want 4, the first from bob, the last from the OS user", sigs)
	}
	wantError(t, h.run("signal", runID, "pause", "--wait", "-1s"), exitUsage, "INVALID_ARGUMENT", "--wait")
}

// TestSignalPolicyOnResume: an unauthorised CANCEL sent while no runner
// holds the run is stored; the sender says its policy refuses it, and the
// runner that resumes the run records SignalRejected and completes the run.
func TestSignalPolicyOnResume(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	runID := queueRun(t, h)
	h.env["DVT_CONFIG"] = fixture("policy.yaml")
	r := h.run("cancel", runID, "--actor", "mallory")
	if r.code != 0 || !strings.Contains(r.stdout, "does not allow it") || !strings.Contains(r.stdout, `actor "mallory" may not send CANCEL in environment "dev"`) {
		t.Fatalf("cancel: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = h.run("resume", runID, fixture("ok", "plan.yaml"))
	if r.code != 0 {
		t.Fatalf("resume: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, `Signal CANCEL by mallory rejected: actor "mallory" may not send CANCEL`) {
		t.Errorf("the runner's console does not report the rejection:\n%s", r.stdout)
	}
	snap := h.checkLog(runID)
	if snap.Status != engine.StatusCompleted {
		t.Fatalf("run %s", snap.Status)
	}
	var rejected int
	for _, e := range h.events(runID) {
		if e.EventType == engine.SignalRejected && strings.Contains(string(e.Payload), "signals policy") {
			rejected++
		}
	}
	if rejected != 1 {
		t.Fatalf("%d SignalRejected by the policy, want 1", rejected)
	}

	// Without the policy, the same runner would have cancelled: the policy
	// is what refused it.
	delete(h.env, "DVT_CONFIG")
	runID2 := queueRun(t, h)
	h.run("cancel", runID2, "--actor", "mallory")
	h.run("resume", runID2, fixture("ok", "plan.yaml"))
	if s := h.statusOf(runID2); s.Status != engine.StatusCancelled {
		t.Fatalf("without a policy the CANCEL left the run %s", s.Status)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	runID := queueRun(t, h)
	bad := filepath.Join(h.dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("signals: {rules: [{signals: [STOP]}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantError(t, h.run("--config", filepath.Join(h.dir, "missing.yaml"), "cancel", runID), exitUsage, "CONFIG_INVALID", "missing.yaml")
	wantError(t, h.run("cancel", runID, "--config", bad), exitUsage, "CONFIG_INVALID", "signals.rules[0].signals[0]")
	wantError(t, h.run("--config", bad, "run", fixture("ok", "plan.yaml")), exitUsage, "CONFIG_INVALID", "STOP")
}
