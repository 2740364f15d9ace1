package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func (h *harness) writeConfig(text string) string {
	h.t.Helper()
	p := filepath.Join(h.dir, "dvtrun.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		h.t.Fatal(err)
	}
	return p
}

func TestEnqueueAndQueue(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	plan := fixture("ok", "plan.yaml")
	r := h.run("enqueue", plan, "--request-id", "nightly-1", "--priority", "3")
	if r.code != 0 || !strings.Contains(r.stdout, "Enqueued request") || !strings.Contains(r.stdout, "runRequestId nightly-1") {
		t.Fatalf("enqueue: %+v", r)
	}
	r = h.run("enqueue", plan, "--request-id", "nightly-1", "--json")
	var again struct {
		RequestID  string `json:"requestId"`
		Created    bool   `json:"created"`
		PlanSHA256 string `json:"planSha256"`
		PlanPath   string `json:"planPath"`
		Priority   int    `json:"priority"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &again) != nil || again.Created || again.Priority != 3 || len(again.PlanSHA256) != 64 || again.PlanPath != plan {
		t.Fatalf("second enqueue: %+v %+v", r, again)
	}
	if r := h.run("enqueue", plan, "--request-id", "nightly-1"); !strings.Contains(r.stdout, "Already enqueued") {
		t.Fatalf("second enqueue says so: %q", r.stdout)
	}
	r = h.run("queue", "--json")
	var rows []struct {
		RequestID  string  `json:"requestId"`
		State      string  `json:"state"`
		AgeSeconds float64 `json:"ageSeconds"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rows) != nil || len(rows) != 1 || rows[0].State != "PENDING" || rows[0].RequestID != again.RequestID {
		t.Fatalf("queue --json: %+v", r)
	}
	if r := h.run("queue"); r.code != 0 || !strings.Contains(r.stdout, "PENDING") || !strings.Contains(r.stdout, "nightly-1") {
		t.Fatalf("queue: %+v", r)
	}
	// Another environment sees nothing.
	if r := h.run("--environment", "prod", "queue"); !strings.Contains(r.stdout, "empty") {
		t.Fatalf("queue of another environment: %q", r.stdout)
	}
	wantError(t, h.run("--environment", "prod", "queue", "cancel", again.RequestID), 2, "RUN_NOT_FOUND")
	if r := h.run("queue", "cancel", again.RequestID); r.code != 0 || !strings.Contains(r.stdout, "Cancelled") {
		t.Fatalf("cancel: %+v", r)
	}
	if r := h.run("queue"); !strings.Contains(r.stdout, "empty") {
		t.Fatalf("after cancel: %q", r.stdout)
	}
	if r := h.run("queue", "--all"); !strings.Contains(r.stdout, "CANCELLED") {
		t.Fatalf("queue --all: %q", r.stdout)
	}
	wantError(t, h.run("queue", "cancel", "no-such"), 2, "RUN_NOT_FOUND")
	wantError(t, h.run("enqueue", plan, "--not-before", "tomorrow"), 2, "INVALID_ARGUMENT", "--not-before")
	wantError(t, h.run("enqueue", fixture("cycle", "plan.yaml")), 2, "PLAN_INVALID")
}

func TestEnqueueRejectedWhenFull(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	cfg := h.writeConfig("limits: {maxConcurrentRuns: 1, policy: REJECT, retryAfter: 45s}\n")
	plan := fixture("ok", "plan.yaml")
	if r := h.run("enqueue", plan, "--config", cfg); r.code != 0 {
		t.Fatalf("first: %+v", r)
	}
	wantError(t, h.run("enqueue", plan, "--config", cfg), 75, "RUN_QUEUE_FULL", "retry after 45s")
	h.env["DVT_CONFIG"] = cfg
	wantError(t, h.run("enqueue", plan), 75, "RUN_QUEUE_FULL")
	h.env["DVT_CONFIG"] = h.writeConfig("limits: {policy: DROP}\n")
	wantError(t, h.run("enqueue", plan), 2, "CONFIG_INVALID", "limits.policy")
}

func TestScheduleCommands(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	abs, _ := filepath.Abs(fixture("ok", "plan.yaml"))
	cfg := h.writeConfig(`schedules:
  - name: nightly
    cron: "0 2 * * *"
    timezone: Europe/Berlin
    plan: ` + abs + `
    overlap: buffer_one
`)
	r := h.run("schedule", "list", "--config", cfg)
	if r.code != 0 || !strings.Contains(r.stdout, "nightly") || !strings.Contains(r.stdout, "Europe/Berlin") || !strings.Contains(r.stdout, "buffer_one") {
		t.Fatalf("list: %+v", r)
	}
	r = h.run("schedule", "backfill", "nightly", "--config", cfg, "--from", "2026-03-01T00:00:00Z", "--to", "2026-03-03T23:00:00Z")
	if r.code != 0 || !strings.Contains(r.stdout, "3 tick(s)") || !strings.Contains(r.stdout, "3 newly enqueued") {
		t.Fatalf("backfill: %+v", r)
	}
	r = h.run("schedule", "backfill", "nightly", "--config", cfg, "--from", "2026-03-01T00:00:00Z", "--to", "2026-03-03T23:00:00Z")
	if !strings.Contains(r.stdout, "0 newly enqueued, 3 already requested") {
		t.Fatalf("second backfill: %+v", r)
	}
	if r := h.run("schedule", "trigger", "nightly", "--config", cfg); r.code != 0 || !strings.Contains(r.stdout, "schedule:nightly:trigger:") {
		t.Fatalf("trigger: %+v", r)
	}
	r = h.run("queue", "--json")
	var rows []struct {
		Schedule     string `json:"schedule"`
		RunRequestID string `json:"runRequestId"`
	}
	if json.Unmarshal([]byte(r.stdout), &rows) != nil || len(rows) != 4 || rows[0].RunRequestID != "schedule:nightly:2026-03-01T01:00:00Z" || rows[3].Schedule != "nightly" {
		t.Fatalf("queue after backfill and trigger: %s", r.stdout)
	}
	wantError(t, h.run("schedule", "trigger", "weekly", "--config", cfg), 2, "INVALID_ARGUMENT", `"weekly"`)
	wantError(t, h.run("schedule", "explode"), 2, "INVALID_ARGUMENT")
	wantError(t, h.run("schedule", "backfill", "nightly", "--config", cfg, "--from", "x"), 2, "INVALID_ARGUMENT", "--from")
	wantError(t, h.run("worker", "--http", "no-port"), 2, "INVALID_ARGUMENT", "--http")
}
