package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestSecretsResolvedBeforeAnythingIsWritten: a declared secret that does
// not resolve refuses run, resume, retry and a worker's start of a queued
// run up front — exit 2 (a REFUSED request for the worker) with
// SECRET_NOT_FOUND naming the secret and the step — and nothing is written
// to the store: no run, no event.
func TestSecretsResolvedBeforeAnythingIsWritten(t *testing.T) {
	t.Parallel()
	plan := fixture("secret", "plan.yaml")
	// runsAndEvents is what the store holds: each run's event count.
	runsAndEvents := func(h *harness) map[string]int {
		t.Helper()
		if _, err := os.Stat(h.statePath()); os.IsNotExist(err) {
			return map[string]int{}
		}
		ids, err := h.listRuns()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, id := range ids {
			out[id] = len(h.events(id))
		}
		return out
	}
	cases := []struct {
		name string
		// prep leaves the store as the command finds it and returns the
		// command's arguments.
		prep func(t *testing.T, h *harness) []string
	}{
		{"run", func(t *testing.T, h *harness) []string {
			if r := h.run("run", fixture("ok", "plan.yaml")); r.code != 0 { // the store exists, with another run
				t.Fatalf("run ok: %+v", r)
			}
			return []string{"run", plan}
		}},
		{"resume", func(t *testing.T, h *harness) []string {
			runID := queueRunOf(t, h, plan) // QUEUED, as a runner that died before RunStarted leaves it
			return []string{"resume", runID, plan}
		}},
		{"retry", func(t *testing.T, h *harness) []string {
			// An empty value resolves: the test step fails, so the run can be retried.
			empty := filepath.Join(t.TempDir(), "empty.env")
			if err := os.WriteFile(empty, []byte("API_TOKEN=\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if r := h.run("run", "--secrets-file", empty, plan); r.code != exitFailed {
				t.Fatalf("run with an empty secret: %+v", r)
			}
			return []string{"retry", h.onlyRun()}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			args := tc.prep(t, h)
			before := runsAndEvents(h)
			r := h.run(args...)
			wantError(t, r, exitUsage, "SECRET_NOT_FOUND", "API_TOKEN", "test.token_is_set")
			after := runsAndEvents(h)
			if len(after) != len(before) {
				t.Errorf("%d run(s) in the store after the refusal, %d before", len(after), len(before))
			}
			for id, n := range after {
				if n != before[id] {
					t.Errorf("run %s has %d events after the refusal, %d before", id, n, before[id])
				}
			}
			if r.stdout != "" {
				t.Errorf("a refused command printed progress:\n%s", r.stdout)
			}
		})
	}

	t.Run("worker", func(t *testing.T) {
		h := newHarness(t)
		if r := h.run("enqueue", plan, "--request-id", "nightly"); r.code != 0 {
			t.Fatalf("enqueue: %+v", r)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan result, 1)
		go func() { done <- h.runCtx(ctx, "worker", "--poll", "100ms") }()
		var rows []struct {
			State   string `json:"state"`
			Outcome string `json:"outcome"`
			RunID   string `json:"runId"`
		}
		waitUntil(t, "the request to be finished", func() bool {
			r := h.run("queue", "--all", "--json")
			return json.Unmarshal([]byte(r.stdout), &rows) == nil && len(rows) == 1 && rows[0].State == "DONE"
		})
		cancel()
		if r := <-done; r.code != 0 {
			t.Fatalf("worker exit %d: %s", r.code, r.stderr)
		}
		if rows[0].Outcome != "REFUSED:SECRET_NOT_FOUND" {
			t.Fatalf("outcome %q, want REFUSED:SECRET_NOT_FOUND", rows[0].Outcome)
		}
		if runs := runsAndEvents(h); len(runs) != 0 {
			t.Fatalf("runs were recorded for the refused request: %v", runs)
		}
	})
}
