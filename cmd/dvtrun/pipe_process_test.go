package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
)

// TestBrokenStdout: `dvtrun run … | head -2` — a reader that goes away
// after two lines — does not kill the runner (SIGPIPE, exit 141, the run
// left RUNNING under its lease): output is dropped, the run ends
// COMPLETED and the command exits 0.
func TestBrokenStdout(t *testing.T) {
	bin := buildBinary(t)
	h := newHarness(t)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--threads", "1", fixture("slow", "plan.yaml"))
	cmd.Env = append(os.Environ(), "DVT_STORE="+h.env["DVT_STORE"], "DVT_WAREHOUSE="+h.env["DVT_WAREHOUSE"])
	cmd.Stdout = pw
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	sc := bufio.NewScanner(pr)
	for i := 0; i < 2 && sc.Scan(); i++ {
		t.Logf("read: %s", sc.Text())
	}
	pr.Close() // what head does after its lines: later writes meet EPIPE
	err = cmd.Wait()
	if err != nil {
		t.Fatalf("dvtrun run into a closed pipe: %v (state %v), want exit 0\nstderr: %s", err, cmd.ProcessState, stderr.String())
	}
	if snap := h.statusOf(h.onlyRun()); snap.Status != engine.StatusCompleted {
		t.Errorf("the run is %s, want COMPLETED", snap.Status)
	}
}
