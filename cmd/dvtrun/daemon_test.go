package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// serve runs an enqueued plan and reports it on /metrics; /livez and
// /readyz answer; cancelling (SIGTERM in main) ends it with exit 0 and JSON
// logs on stderr.
func TestServeRunsTheQueueAndServesMetrics(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	if r := h.run("enqueue", fixture("ok", "plan.yaml")); r.code != 0 {
		t.Fatalf("enqueue: %+v", r)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() { done <- h.runCtx(ctx, "serve", "--poll", "100ms", "--http", addr) }()
	var metrics string
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(metrics, `dvtrun_queue_requests{state="DONE"} 1`) {
		if time.Now().After(deadline) {
			t.Fatalf("the request never finished; /metrics:\n%s", metrics)
		}
		time.Sleep(100 * time.Millisecond)
		_, metrics = get("http://" + addr + "/metrics")
	}
	for _, want := range []string{
		`dvtrun_runs{status="COMPLETED"} 1`, "dvtrun_worker_claims_total 1", "dvtrun_worker_takeovers_total 0",
		`dvtrun_schedule_ticks_total{outcome="fired"} 0`, "dvtrun_queue_oldest_pending_age_seconds 0",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, metrics)
		}
	}
	if !regexp.MustCompile(`dvtrun_store_append_latency_seconds_count [1-9]`).MatchString(metrics) {
		t.Errorf("no append latency:\n%s", metrics)
	}
	if !regexp.MustCompile(`dvtrun_pulse_requests_total\{outcome="ok"\} [1-9]`).MatchString(metrics) {
		t.Errorf("no pulse request counted for the run:\n%s", metrics)
	}
	for _, path := range []string{"/livez", "/readyz"} {
		if code, _ := get("http://" + addr + path); code != http.StatusOK {
			t.Errorf("%s: %d", path, code)
		}
	}
	cancel()
	r := <-done
	if r.code != 0 {
		t.Fatalf("serve exited %d: %s", r.code, r.stderr)
	}
	for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		if !strings.HasPrefix(line, `{"time":`) {
			t.Errorf("stderr line is not a JSON log record: %q", line)
		}
	}
	if !strings.Contains(r.stderr, `"msg":"run finished"`) || !strings.Contains(r.stderr, `"msg":"stopped"`) {
		t.Errorf("logs:\n%s", r.stderr)
	}
}

// A request records its plan bundle's sha256 and the store keeps the
// bundle: a worker runs what was enqueued even once a file of it changed on
// disk. A request whose bundle is not stored (enqueued before bundles were)
// is run from its plan path, and refused when a file of it changed, with
// the reason in the outcome.
func TestWorkerRunsTheEnqueuedPlanBundle(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		forget      bool // drop the stored bundle, as a request from before bundles has none
		wantOutcome string
		wantRows    int // customers loaded by the seed
	}{
		{"stored bundle", false, "COMPLETED", 3},
		{"no stored bundle", true, "REFUSED:PLAN_HASH_MISMATCH", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			dir := filepath.Join(h.dir, "plan")
			if err := os.CopyFS(dir, os.DirFS(fixture("ok"))); err != nil {
				t.Fatal(err)
			}
			if r := h.run("enqueue", filepath.Join(dir, "plan.yaml"), "--request-id", "before-edit"); r.code != 0 {
				t.Fatalf("enqueue: %+v", r)
			}
			if tc.forget {
				db, err := sql.Open("sqlite", h.statePath())
				if err != nil {
					t.Fatal(err)
				}
				if _, err := db.Exec("DELETE FROM dvt_plan_bundles"); err != nil {
					t.Fatal(err)
				}
				db.Close()
			}
			// A seed file of the bundle changes after the request was made.
			f, err := os.OpenFile(filepath.Join(dir, "customers.csv"), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString("99,Zed,NZ\n")
			f.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan result, 1)
			go func() { done <- h.runCtx(ctx, "worker", "--poll", "100ms") }()
			var rows []struct {
				State   string `json:"state"`
				Outcome string `json:"outcome"`
				RunID   string `json:"runId"`
			}
			waitUntil(t, "the request to finish", func() bool {
				r := h.run("queue", "--all", "--json")
				return json.Unmarshal([]byte(r.stdout), &rows) == nil && len(rows) == 1 && rows[0].State == "DONE"
			})
			cancel()
			if r := <-done; r.code != 0 {
				t.Fatalf("worker exit %d: %s", r.code, r.stderr)
			}
			if rows[0].Outcome != tc.wantOutcome {
				t.Fatalf("outcome %q, want %q", rows[0].Outcome, tc.wantOutcome)
			}
			recorded := strings.Contains(h.run("runs", "--json").stdout, rows[0].RunID) && rows[0].RunID != ""
			if recorded != (tc.wantRows > 0) {
				t.Fatalf("run %s recorded: %v", rows[0].RunID, recorded)
			}
			if tc.wantRows > 0 {
				// The seed as enqueued: the row added on disk since is not loaded.
				if n := h.rowsPerStep("SELECT 'n', count(*) FROM customers")["n"]; n != tc.wantRows {
					t.Fatalf("the seed loaded %d rows, want the %d enqueued", n, tc.wantRows)
				}
			}
		})
	}
}

// The worker takes --threads, --lease-ttl and --secrets-file as run does,
// and refuses the same out-of-range values before it touches the store.
func TestWorkerRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"worker", "--threads", "0"}, "--threads must be at least 1"},
		{[]string{"serve", "--lease-ttl", "500ms"}, "--lease-ttl must be at least 1s"},
		{[]string{"worker", "--slots", "0"}, "--slots must be at least 1"},
		{[]string{"serve", "--grace", "-1s"}, "--grace must not be negative"},
		{[]string{"run", "--threads", "0", fixture("slow", "plan.yaml")}, "--threads must be at least 1"},
		{[]string{"run", "--engine", "conductor", fixture("slow", "plan.yaml")}, `--engine "conductor": want local or temporal`},
		{[]string{"worker", "--engine", "nomad"}, `--engine "nomad": want local or temporal`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			h := newHarness(t)
			// A daemon that accepted the flags would run until cancelled.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			wantError(t, h.runCtx(ctx, tc.args...), 2, "INVALID_ARGUMENT", tc.msg)
			if _, err := os.Stat(h.statePath()); !os.IsNotExist(err) {
				t.Errorf("the refused command created the state store (stat: %v)", err)
			}
		})
	}
}

// A daemon waiting for a lock another process holds says so in its JSON
// log, as a record like every other line it writes, not as a bare line of
// text among them.
func TestDaemonLogsLockWaitsAsJSON(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	if r := h.run("run", fixture("ok", "plan.yaml")); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	db, err := sql.Open("sqlite", h.statePath())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Another process's write transaction on the state store.
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(ctx)
	done := make(chan result, 1)
	var mu sync.Mutex
	var errText strings.Builder
	stderr := &lockedWriter{mu: &mu, b: &errText}
	logged := func(msg string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return strings.Contains(errText.String(), msg)
		}
	}
	go func() {
		var out bytes.Buffer
		code := run(wctx, []string{"worker", "--poll", "100ms", "--lock-wait", "30s"}, &out, stderr, func(k string) string { return h.env[k] })
		mu.Lock()
		defer mu.Unlock()
		done <- result{code, out.String(), errText.String()}
	}()
	// The first progress report comes after 1s of waiting.
	waitUntil(t, "the worker's lock-wait record", logged("waiting for the lock on state store"))
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the worker to start once the lock is gone", logged(`"msg":"started"`))
	stopWorker()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("the worker did not stop within a minute of its cancellation")
	}
	if r.code != 0 {
		t.Fatalf("worker exit %d: %s", r.code, r.stderr)
	}
	waits := 0
	for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("worker's stderr line is not JSON: %q", line)
		}
		if msg, _ := rec["msg"].(string); strings.Contains(msg, "waiting for the lock on state store") {
			waits++
		}
	}
	if waits == 0 {
		t.Fatalf("no lock-wait record in the worker's log:\n%s", r.stderr)
	}
}

// A daemon's worker logs a failed run at ERROR with its failing steps and
// first error, and /metrics has run durations by plan and status and, per
// configured schedule, when its newest COMPLETED run ended (read from the
// store: any replica's run counts).
func TestDaemonReportsFailuresAndScheduleSuccess(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	abs, _ := filepath.Abs(fixture("ok", "plan.yaml"))
	cfg := h.writeConfig(`schedules:
  - {name: nightly, cron: "0 2 * * *", timezone: UTC, plan: ` + abs + `}
  - {name: never, cron: "0 3 * * *", timezone: UTC, plan: ` + abs + `}
`)
	if r := h.run("schedule", "trigger", "nightly", "--config", cfg); r.code != 0 {
		t.Fatalf("trigger: %+v", r)
	}
	if r := h.run("enqueue", fixture("failing", "plan.yaml")); r.code != 0 {
		t.Fatalf("enqueue: %+v", r)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() { done <- h.runCtx(ctx, "serve", "--config", cfg, "--poll", "100ms", "--http", addr) }()
	var metrics string
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(metrics, `dvtrun_queue_requests{state="DONE"} 2`) {
		if time.Now().After(deadline) {
			t.Fatalf("the requests never finished; /metrics:\n%s", metrics)
		}
		time.Sleep(100 * time.Millisecond)
		_, metrics = get("http://" + addr + "/metrics")
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^dvt_schedule_last_success_timestamp_seconds\{schedule="nightly"\} 1[0-9]{9}$`),
		regexp.MustCompile(`(?m)^dvtrun_run_duration_seconds_count\{plan="cli_ok",status="COMPLETED"\} 1$`),
		regexp.MustCompile(`(?m)^dvtrun_run_duration_seconds_bucket\{plan="cli_failing",status="FAILED",le="\+Inf"\} 1$`),
	} {
		if !want.MatchString(metrics) {
			t.Errorf("/metrics lacks %s:\n%s", want, metrics)
		}
	}
	if strings.Contains(metrics, `schedule="never"`) {
		t.Errorf("a schedule with no successful run has a last-success time:\n%s", metrics)
	}
	cancel()
	r := <-done
	var failed struct {
		Level       string   `json:"level"`
		Msg         string   `json:"msg"`
		Plan        string   `json:"plan"`
		FailedSteps []string `json:"failedSteps"`
		Code, Error string
	}
	for _, line := range strings.Split(r.stderr, "\n") {
		if strings.Contains(line, `"msg":"run failed"`) {
			if err := json.Unmarshal([]byte(line), &failed); err != nil {
				t.Fatalf("%v: %s", err, line)
			}
		}
	}
	if failed.Level != "ERROR" || failed.Plan != "cli_failing" || len(failed.FailedSteps) != 1 || failed.FailedSteps[0] != "model.broken" ||
		!strings.Contains(failed.Error, "no_such_table") {
		t.Fatalf("no ERROR record naming model.broken and its error: %+v\n%s", failed, r.stderr)
	}
}
