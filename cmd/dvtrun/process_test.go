package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
)

// The CLI binary the process tests run: built once per test binary run,
// on first use, into a directory TestMain removes.
var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// buildBinary returns the CLI binary, building it on the first call; the
// process tests share it (a build takes seconds, and they run in parallel).
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "dvtrun-bin-")
		if built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "dvtrun")
		if out, err := exec.Command("go", "build", "-o", built.bin, ".").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// removeBinary removes the shared binary's directory (from TestMain).
func removeBinary() {
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
}

// TestProcess runs the real binary: exit codes through os.Exit, and SIGINT
// interrupting a step's SQL so that the run can be resumed.
func TestProcess(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	h := newHarness(t)
	env := append(os.Environ(), "DVT_STORE="+h.env["DVT_STORE"], "DVT_WAREHOUSE="+h.env["DVT_WAREHOUSE"])
	exits := []struct {
		args []string
		code int
	}{
		{[]string{"--help"}, 0},
		{[]string{"plan", "validate", fixture("ok", "plan.yaml")}, 0},
		{[]string{"plan", "validate", fixture("cycle", "plan.yaml")}, 2},
		{[]string{"status", "--nope"}, 2},
		{[]string{"run", fixture("syntax", "plan.yaml")}, 1},
	}
	for _, e := range exits {
		cmd := exec.Command(bin, e.args...)
		cmd.Env = env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != e.code {
			t.Errorf("%v: exit %d, want %d (stderr %q)", e.args, code, e.code, stderr.String())
		}
		if e.code != 0 && strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("%v: stderr is not one line: %q", e.args, stderr.String())
		}
	}

	t.Run("SIGINT", func(t *testing.T) {
		h := newHarness(t)
		env := append(os.Environ(), "DVT_STORE="+h.env["DVT_STORE"], "DVT_WAREHOUSE="+h.env["DVT_WAREHOUSE"])
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "run", "--threads", "1", fixture("slow", "plan.yaml"))
		cmd.Env = env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		var out strings.Builder
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "START sql table model slow") {
				time.Sleep(200 * time.Millisecond) // let its SQL start
				if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
					t.Fatal(err)
				}
				break
			}
		}
		interrupted := time.Now()
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
		}
		err = cmd.Wait()
		if took := time.Since(interrupted); took > 10*time.Second {
			t.Errorf("the run took %s to stop after SIGINT", took)
		}
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != exitInterrupted {
			t.Fatalf("exit %v, want %d\n%s\n%s", err, exitInterrupted, out.String(), stderr.String())
		}
		r := result{exitInterrupted, out.String(), stderr.String()}
		wantError(t, r, exitInterrupted, "INTERRUPTED", "dvtrun resume")
		if !strings.Contains(r.stdout, "Continue with: dvtrun resume") {
			t.Errorf("stdout does not say how to resume:\n%s", r.stdout)
		}
		snap := h.statusOf(h.onlyRun())
		if snap.Status.Terminal() {
			t.Errorf("the interrupted run is %s: it cannot be resumed", snap.Status)
		}
		for _, s := range snap.Steps {
			if s.StepID == "model.fast" && s.Status != engine.StepStatusSuccess {
				t.Errorf("model.fast is %s", s.Status)
			}
			if s.StepID == "model.after" && s.Status != engine.StepStatusPending {
				t.Errorf("model.after is %s: it ran after the interrupt", s.Status)
			}
		}
		h.checkLog(snap.RunID)
	})

	// A runner killed outright keeps its lease until the lease expires;
	// then resume takes the run over, re-runs only the step that was in
	// flight, and duplicates nothing in the log — with the SQLite store, and
	// with the Snowflake store (the test server runs in this process, the
	// killed runner reached it over the network, mid append or not).
	for _, backend := range []string{"sqlite", "snowflake"} {
		t.Run("SIGKILL/"+backend, func(t *testing.T) {
			t.Parallel()
			sigkill(t, bin, backend)
		})
	}
}

func sigkill(t *testing.T, bin, backend string) {
	{
		h := newHarness(t)
		if backend == "snowflake" {
			h.env["DVT_STORE"] = "snowflake://" + sftest.Start(t).DSN("DVT", "PUBLIC")
			h.env["DVT_TARGET_PATH"] = filepath.Join(h.dir, "target") // not .dvt/ in the package directory
		}
		env := append(os.Environ(), "DVT_STORE="+h.env["DVT_STORE"], "DVT_WAREHOUSE="+h.env["DVT_WAREHOUSE"], "DVT_TARGET_PATH="+h.env["DVT_TARGET_PATH"])
		plan := fixture("slow", "plan.yaml")
		// The lease outlasts, by far, the few store reads between the kill
		// and the LEASE_HELD check below, so that check always runs.
		cmd := exec.Command(bin, "run", "--threads", "1", "--lease-ttl", "6s", plan)
		cmd.Env = env
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "START sql table model slow") {
				break
			}
		}
		// The START line can come before the writer stored the step's
		// StepStarted (appends are written behind; the Snowflake store
		// takes round trips): kill once it is stored, so that resume must
		// continue the step as a new engine attempt.
		waitUntil(t, "model.slow's StepStarted in the store", func() bool {
			ids, err := h.listRuns()
			return err == nil && len(ids) == 1 && stepOf(h.statusOf(ids[0]), "model.slow").Status == engine.StepStatusRunning
		})
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		runID := h.onlyRun()
		if s := h.statusOf(runID); s.Status != engine.StatusRunning {
			t.Fatalf("after SIGKILL the run is %s, want RUNNING", s.Status)
		}

		if r := h.run("resume", runID, plan); r.code != exitLease || !strings.Contains(r.stderr, "LEASE_HELD") {
			t.Errorf("resume while the dead runner's lease holds: exit %d, %q", r.code, r.stderr)
		}
		// resume --wait takes the run over as soon as the dead runner's
		// lease expires (the event), bounded by the wait.
		r := h.run("resume", "--wait", "60s", runID, plan)
		if r.code != 0 {
			t.Fatalf("resume after the lease expired: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
		snap := h.checkLog(runID)
		if snap.Status != engine.StatusCompleted {
			t.Fatalf("resumed run is %s", snap.Status)
		}
		started := map[string]int{}
		for _, e := range h.events(runID) {
			if e.EventType == engine.StepStarted {
				started[e.StepID]++
			}
		}
		if started["model.fast"] != 1 || started["model.slow"] != 1 || started["model.after"] != 1 {
			t.Errorf("StepStarted per step: %v (each once: the in-flight step continues as a new engine attempt)", started)
		}
		if s, _ := snap.Step("model.slow"); s.EngineAttemptID < 2 {
			t.Errorf("model.slow finished on engine attempt %d, want a new attempt after the crash", s.EngineAttemptID)
		}
	}
}
