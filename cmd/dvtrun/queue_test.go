package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine/queue"
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

// TestListingsFollowTargets reproduces issue 27's first finding: a prod
// schedule backfilled from the default target (dev) made `queue` say "The
// run queue is empty" and `runs` show nothing. Each listing now names the
// target and environment it shows, and the others (on stderr, never in
// --json), and says where the other targets' requests and runs are. And
// (the second finding) `schedule list` counts the backfill and the
// trigger, with the last tick and the last run's state.
func TestListingsFollowTargets(t *testing.T) {
	h := newHarness(t)
	_, sub := targetsProject(t, h, `schedules:
  - {name: nightly, cron: "0 3 * * *", timezone: UTC, plan: ../ok/plan.yaml, target: prod}
`)
	if err := os.CopyFS(filepath.Join(h.dir, "ok"), os.DirFS(fixture("ok"))); err != nil {
		t.Fatal(err)
	}
	t.Chdir(sub)
	if r := h.run("schedule", "backfill", "nightly", "--from", "2026-03-01T00:00:00Z", "--to", "2026-03-03T23:00:00Z"); r.code != 0 || !strings.Contains(r.stdout, "3 newly enqueued") {
		t.Fatalf("backfill: %+v", r)
	}
	r := h.run("queue")
	if r.code != 0 || !strings.Contains(r.stdout, "The run queue of target dev is empty.") ||
		!strings.Contains(r.stderr, "target dev (environment development); other targets: prod (dvtrun queue --target NAME)") ||
		!strings.Contains(r.stderr, "3 request(s) of target prod (environment production) are in this store: dvtrun queue --target prod") {
		t.Fatalf("queue on dev: %+v", r)
	}
	r = h.run("queue", "--target", "prod")
	if r.code != 0 || strings.Count(r.stdout, "PENDING") != 3 || !strings.Contains(r.stderr, "target prod (environment production); other targets: dev") {
		t.Fatalf("queue on prod: %+v", r)
	}
	r = h.run("queue", "--target", "prod", "--json")
	var rows []queue.Request
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || len(rows) != 3 {
		t.Fatalf("queue --json: %v\n%s", err, r.stdout)
	}
	if r := h.run("schedule", "trigger", "nightly"); r.code != 0 {
		t.Fatalf("trigger: %+v", r)
	}
	workUntilDone(t, h, "--target", "prod")

	r = h.run("runs")
	if r.code != 0 || !strings.Contains(r.stderr, "target prod (environment production) has runs in this store: dvtrun runs --target prod") ||
		!strings.Contains(r.stderr, "other targets: prod (dvtrun runs --target NAME)") {
		t.Fatalf("runs on dev: %+v", r)
	}
	r = h.run("runs", "--target", "prod")
	if r.code != 0 || strings.Count(r.stdout, "COMPLETED") != 4 || !strings.Contains(r.stderr, "target prod (environment production)") {
		t.Fatalf("runs on prod: %+v", r)
	}

	r = h.run("schedule", "list")
	if r.code != 0 {
		t.Fatalf("schedule list: %+v", r)
	}
	var line string
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "nightly ") {
			line = l
		}
	}
	if f := strings.Fields(line); len(f) < 4 || f[len(f)-3] != "4" || !strings.Contains(line, "DONE COMPLETED") || !strings.Contains(line, "2026-") {
		t.Fatalf("schedule list does not show the fired count, last tick and last run:\n%s", r.stdout)
	}
	r = h.run("schedule", "list", "--json")
	var sched []struct {
		LastTick  time.Time `json:"lastTick"`
		LastState string    `json:"lastState"`
		Fired     int64     `json:"fired"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &sched); err != nil || len(sched) != 1 || sched[0].Fired != 4 || sched[0].LastState != "DONE COMPLETED" || sched[0].LastTick.IsZero() {
		t.Fatalf("schedule list --json: %v %+v\n%s", err, sched, r.stdout)
	}

	// The console of the default target (dev) offers prod by a plain link;
	// picking it shows prod's runs, queue and schedule on every page.
	c := consoleClient(t, h, "ui")
	if body := c.get(t, "/runs"); !strings.Contains(body, "No runs match") || !strings.Contains(body, `href="/target?name=prod&amp;to=/runs"`) ||
		!strings.Contains(body, `<strong aria-current="true" title="environment development">dev</strong>`) {
		t.Fatalf("dev's console:\n%s", body)
	}
	if body := c.get(t, "/target?name=prod&to=/runs"); strings.Count(body, "✓ COMPLETED") < 4 || !strings.Contains(body, `<strong aria-current="true" title="environment production">prod</strong>`) {
		t.Fatalf("prod's runs after picking prod:\n%s", body)
	}
	if body := c.get(t, "/schedules"); !strings.Contains(body, "DONE COMPLETED") || !strings.Contains(body, "<td>4</td>") {
		t.Fatalf("prod's schedules page does not show the fired count and the last run:\n%s", body)
	}
	if body := c.get(t, "/queue"); !strings.Contains(body, `<strong aria-current="true" title="environment production">prod</strong>`) || !strings.Contains(body, "acme/shop/production") && !strings.Contains(body, "/production</span>") {
		t.Fatalf("prod's queue page does not keep prod:\n%s", body)
	}
	// A console started on prod shows prod first.
	if body := consoleClient(t, h, "--target", "prod", "ui").get(t, "/runs"); strings.Count(body, "✓ COMPLETED") < 4 {
		t.Fatalf("ui --target prod:\n%s", body)
	}
}

// consoleTestClient is a browser's view of a `dvtrun ui` started for a
// test: it keeps cookies (the picked target) and follows redirects.
type consoleTestClient struct {
	base   string
	client *http.Client
}

// consoleClient starts `dvtrun ARGS --listen ADDR` until the test ends.
func consoleClient(t *testing.T, h *harness, args ...string) consoleTestClient {
	t.Helper()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result, 1)
	go func() { done <- h.runCtx(ctx, append(args, "--listen", addr)...) }()
	t.Cleanup(func() {
		cancel()
		if r := <-done; r.code != 0 {
			t.Errorf("%v: %+v", args, r)
		}
	})
	waitServing(t, "http://"+addr+"/runs")
	jar, _ := cookiejar.New(nil)
	return consoleTestClient{base: "http://" + addr, client: &http.Client{Jar: jar}}
}

func (c consoleTestClient) get(t *testing.T, path string) string {
	t.Helper()
	res, err := c.client.Get(c.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("GET %s: %d\n%s", path, res.StatusCode, b)
	}
	return string(b)
}

// TestConsoleOfTargetsOnTwoStores: targets whose runs are in different
// state stores are each shown by the console, picked from any page.
func TestConsoleOfTargetsOnTwoStores(t *testing.T) {
	h := newHarness(t)
	if err := os.CopyFS(filepath.Join(h.dir, "ok"), os.DirFS(fixture("ok"))); err != nil {
		t.Fatal(err)
	}
	cfg := h.writeConfig(`target: dev
targets:
  dev:  {store: "sqlite:dev-state.db", warehouse: "sqlite:dev.db"}
  prod: {store: "sqlite:prod-state.db", warehouse: "sqlite:prod.db"}
  qa:   {store: "sqlite:qa-state.db", warehouse: "sqlite:qa.db"}
schedules:
  - {name: nightly, cron: "0 3 * * *", plan: ok/plan.yaml, target: prod}
`)
	if r := h.run("--config", cfg, "run", filepath.Join(h.dir, "ok", "plan.yaml")); r.code != 0 {
		t.Fatalf("run on dev: %+v", r)
	}
	if r := h.run("--config", cfg, "--target", "prod", "schedule", "trigger", "nightly"); r.code != 0 {
		t.Fatalf("trigger on prod: %+v", r)
	}
	workUntilDone(t, h, "--config", cfg, "--target", "prod")
	c := consoleClient(t, h, "--config", cfg, "ui")
	if body := c.get(t, "/runs"); strings.Count(body, "✓ COMPLETED") != 1 || !strings.Contains(body, `href="/target?name=prod&amp;to=/runs"`) {
		t.Fatalf("dev's console:\n%s", body)
	}
	// qa has no store yet: listed, not a link, saying why.
	if body := c.get(t, "/schedules"); !strings.Contains(body, `<s title="`) || !strings.Contains(body, "qa-state.db") {
		t.Fatalf("qa is not listed as unavailable:\n%s", body)
	}
	body := c.get(t, "/target?name=prod&to=/schedules")
	if !strings.Contains(body, "nightly") || !strings.Contains(body, "DONE COMPLETED") || !strings.Contains(body, "<td>1</td>") {
		t.Fatalf("prod's schedules:\n%s", body)
	}
	if body := c.get(t, "/runs"); strings.Count(body, "✓ COMPLETED") != 1 || !strings.Contains(body, "schedule:nightly") {
		t.Fatalf("prod's runs:\n%s", body)
	}
	// An unknown or unavailable target is not picked.
	res, err := c.client.Get(c.base + "/target?name=qa")
	if err != nil || res.StatusCode != 404 {
		t.Fatalf("picking qa: %v %v", res, err)
	}
	res.Body.Close()
}
