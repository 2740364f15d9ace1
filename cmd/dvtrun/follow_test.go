package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestFollowFinishedRun: following a run that already ended prints its
// picture once and exits as `run` did; --json prints snapshots.
func TestFollowFinishedRun(t *testing.T) {
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

func TestTerminalSafe(t *testing.T) {
	cases := map[string]string{
		"plain ünïcødé":     "plain ünïcødé",
		"clear\x1b[2Jthis":  `clear\x1b[2Jthis`,
		"bell\a tab\t nl\n": `bell\x07 tab\x09 nl\x0a`,
		"c1 \u009b del \x7f": `c1 \x9b del \x7f`,
	}
	for in, want := range cases {
		if got := terminalSafe(in); got != want {
			t.Errorf("terminalSafe(%q) = %q, want %q", in, got, want)
		}
	}
}
