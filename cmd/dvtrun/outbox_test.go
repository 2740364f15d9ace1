package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/delivery"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/storetest"
)

const hookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// hookReceiver records every webhook request; fail decides the answer.
type hookReceiver struct {
	mu       sync.Mutex
	arrivals []engine.RunEventRecord // every request, in order
	ok       []engine.RunEventRecord // answered 2xx
	badSig   int
	fail     func(n int) bool
	hold     func(n int) <-chan struct{} // a request to keep hanging, or nil
	delay    time.Duration
}

func (rc *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var e engine.RunEventRecord
	if err := json.Unmarshal(body, &e); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// The receiver's own check, from the Standard Webhooks spec.
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(hookSecret, "whsec_"))
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(r.Header.Get("webhook-id") + "." + r.Header.Get("webhook-timestamp") + "." + string(body)))
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	rc.mu.Lock()
	if r.Header.Get("webhook-signature") != want || r.Header.Get("webhook-id") != e.EventID {
		rc.badSig++
	}
	rc.arrivals = append(rc.arrivals, e)
	n := len(rc.arrivals)
	var hold <-chan struct{}
	if rc.hold != nil {
		hold = rc.hold(n)
	}
	failed := rc.fail != nil && rc.fail(n)
	rc.mu.Unlock()
	if hold != nil {
		<-hold
	}
	time.Sleep(rc.delay)
	if failed {
		http.Error(w, "not now", http.StatusServiceUnavailable)
		return
	}
	rc.mu.Lock()
	rc.ok = append(rc.ok, e)
	rc.mu.Unlock()
}

func (rc *hookReceiver) counts() (arrivals, ok []engine.RunEventRecord, badSig int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]engine.RunEventRecord(nil), rc.arrivals...), append([]engine.RunEventRecord(nil), rc.ok...), rc.badSig
}

func writeConfig(t *testing.T, dir, hookURL, timeout, retry string) string {
	t.Helper()
	path := filepath.Join(dir, "dvt.yaml")
	text := fmt.Sprintf(`sinks:
  - name: hooks
    webhook: {url: %q, secretEnv: HOOK_SECRET, timeout: %s}
    retry: %s
  - name: archive
    jsonl: {path: %q}
`, hookURL, timeout, retry, filepath.Join(dir, "events.jsonl"))
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestOutboxCommands(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	if r := h.run("run", fixture("ok", "plan.yaml")); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	runID := h.onlyRun()
	log := h.events(runID)
	// The first 3 requests fail: with 2 attempts allowed the first event
	// dies, is retried by hand, fails once more, and then gets through.
	rc := &hookReceiver{fail: func(n int) bool { return n <= 3 }}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	cfg := writeConfig(t, h.dir, srv.URL, "10s", "{maxAttempts: 2, backoff: 10ms, maxBackoff: 10ms}")
	h.env["HOOK_SECRET"] = hookSecret

	r := h.run("outbox", "deliver", "--config", cfg, "--once")
	wantError(t, r, 1, "EVENT_BUS_DELIVERY_FAILED", fmt.Sprintf("%d deliveries still pending and 0 dead", len(log)))
	if !strings.Contains(r.stdout, fmt.Sprintf("delivered %d, failed 1", len(log))) { // the whole file, none of the webhook
		t.Fatalf("stdout %q", r.stdout)
	}
	time.Sleep(50 * time.Millisecond) // past the backoff
	h.env["DVT_CONFIG"] = cfg         // --config from the environment
	r = h.run("outbox", "deliver", "--once")
	wantError(t, r, 1, "EVENT_BUS_DELIVERY_FAILED", fmt.Sprintf("%d deliveries still pending and 1 dead", len(log)-1))

	r = h.run("outbox", "dead", "--json")
	var dead []delivery.Delivery
	if err := json.Unmarshal([]byte(r.stdout), &dead); err != nil || len(dead) != 1 || dead[0].EventID != log[0].EventID || dead[0].Attempts != 2 || !strings.Contains(dead[0].LastError, "HTTP 503") {
		t.Fatalf("outbox dead: %v %q %q", err, r.stdout, r.stderr)
	}
	if r := h.run("outbox", "dead"); r.code != 0 || !strings.Contains(r.stdout, log[0].EventID) || !strings.Contains(r.stdout, "DEAD") {
		t.Fatalf("outbox dead: %+v", r)
	}
	st, err := sqlite.Open(context.Background(), h.statePath(), sqlite.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	alerts, err := st.ListAlerts(context.Background(), runID)
	st.Close()
	if err != nil || len(alerts) != 1 || alerts[0].Code != engine.CodeEventBusDeliveryFailed || !strings.Contains(alerts[0].Message, "outbox retry "+log[0].EventID) {
		t.Fatalf("alerts %+v %v", alerts, err)
	}

	if r := h.run("outbox", "retry", log[0].EventID, "--sink", "hooks"); r.code != 0 || r.stdout != "1 dead letter(s) moved back to pending\n" {
		t.Fatalf("retry: %+v", r)
	}
	wantError(t, h.run("outbox", "retry", log[0].EventID), 2, "INVALID_ARGUMENT", "has no dead letter")
	wantError(t, h.run("outbox", "deliver", "--once"), 1, "EVENT_BUS_DELIVERY_FAILED", "0 dead") // request 3 fails
	time.Sleep(50 * time.Millisecond)
	r = h.run("outbox", "deliver", "--once")
	if r.code != 0 || !strings.Contains(r.stdout, "left: 0 pending, 0 dead") {
		t.Fatalf("final --once: %+v", r)
	}
	arrivals, ok, badSig := rc.counts()
	if badSig != 0 || len(arrivals) != len(log)+3 || len(ok) != len(log) {
		t.Fatalf("%d requests (%d bad signatures), %d delivered; want %d, 0, %d", len(arrivals), badSig, len(ok), len(log)+3, len(log))
	}
	for i, e := range ok {
		if e.EventID != log[i].EventID {
			t.Fatalf("delivery %d is runSeq %d, want runSeq %d", i, e.RunSeq, log[i].RunSeq)
		}
	}
	if lines, err := delivery.ReadJSONL(filepath.Join(h.dir, "events.jsonl")); err != nil || len(lines) != len(log) {
		t.Fatalf("the file has %d records (%v), want %d", len(lines), err, len(log))
	}
	r = h.run("outbox", "list", "--state", "delivered", "--sink", "hooks", "--json")
	var rows []delivery.Delivery
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || len(rows) != len(log) {
		t.Fatalf("list: %v, %d rows", err, len(rows))
	}
	if r := h.run("outbox", "list", "--state", "pending"); r.code != 0 || !strings.Contains(r.stdout, "(none)") {
		t.Fatalf("list pending: %+v", r)
	}
}

func TestOutboxErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	if r := h.run("run", fixture("ok", "plan.yaml")); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	cfg := writeConfig(t, h.dir, "http://127.0.0.1:1/x", "20s", "{}")
	bad := filepath.Join(h.dir, "bad.yaml")
	os.WriteFile(bad, []byte("sinks: [{name: a, jsonl: {path: x}, retry: {maxAttempts: -2}}]"), 0o644)
	cases := []struct {
		name  string
		env   map[string]string
		args  []string
		exit  int
		code  string
		words []string
	}{
		{"no config", nil, []string{"outbox", "deliver", "--once"}, 2, "INVALID_ARGUMENT", []string{"--config FILE or set DVT_CONFIG"}},
		{"missing file", nil, []string{"outbox", "deliver", "--config", "nope.yaml"}, 2, "CONFIG_INVALID", []string{"nope.yaml"}},
		{"invalid file", nil, []string{"outbox", "deliver", "--config", bad}, 2, "CONFIG_INVALID", []string{"sinks[0].retry.maxAttempts"}},
		{"secret unset", nil, []string{"outbox", "deliver", "--config", cfg, "--claim-ttl", "1m"}, 2, "CONFIG_INVALID", []string{"HOOK_SECRET is empty or unset"}},
		{"secret malformed", map[string]string{"HOOK_SECRET": "hunter2-not-whsec"}, []string{"outbox", "deliver", "--config", cfg, "--claim-ttl", "1m"}, 2, "CONFIG_INVALID", []string{"HOOK_SECRET: secret 1 does not start with whsec_"}},
		{"bad state", nil, []string{"outbox", "list", "--state", "lost"}, 2, "INVALID_ARGUMENT", []string{`unknown state "lost"`}},
		{"claim shorter than requests", map[string]string{"HOOK_SECRET": hookSecret}, []string{"outbox", "deliver", "--config", cfg}, 2, "INVALID_ARGUMENT", []string{"--claim-ttl 30s must be at least twice sinks[0].webhook.timeout (20s)"}},
		{"retry nothing", nil, []string{"outbox", "retry"}, 2, "INVALID_ARGUMENT", []string{"EVENT_ID or --all-dead"}},
		{"retry both", nil, []string{"outbox", "retry", "e1", "--all-dead"}, 2, "INVALID_ARGUMENT", []string{"not both"}},
		{"unknown subcommand", nil, []string{"outbox", "flush"}, 2, "INVALID_ARGUMENT", []string{`"flush"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				h.env[k] = v
				defer delete(h.env, k)
			}
			r := h.run(tc.args...)
			wantError(t, r, tc.exit, tc.code, tc.words...)
			if strings.Contains(r.stderr, "hunter2") {
				t.Fatalf("the secret leaked: %q", r.stderr)
			}
		})
	}
	for _, sub := range []string{"deliver", "list", "dead", "retry"} {
		if r := h.run("outbox", sub, "--help"); r.code != 0 || !strings.Contains(r.stdout, "Usage: dvtrun outbox "+sub) {
			t.Errorf("outbox %s --help: %+v", sub, r)
		}
	}
	if r := h.run("outbox", "--help"); r.code != 0 || !strings.Contains(r.stdout, "dvtrun outbox retry [EVENT_ID | --all-dead]") {
		t.Errorf("outbox --help: %+v", r)
	}
}

// seedOutbox writes runs runs of 2+2*steps events straight into the store.
func seedOutbox(t *testing.T, path string, runs, steps int) map[string][]engine.RunEventRecord {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	out := map[string][]engine.RunEventRecord{}
	for range runs {
		recs := storetest.SeedRun(t, st, steps)
		out[recs[0].RunID] = recs
	}
	return out
}

// checkRunOrder: per run, the receiver's 2xx answers are in runSeq order.
func checkRunOrder(t *testing.T, ok []engine.RunEventRecord) {
	t.Helper()
	last := map[string]int64{}
	for _, e := range ok {
		if e.RunSeq <= last[e.RunID] {
			t.Fatalf("run %s: runSeq %d delivered after %d", e.RunID, e.RunSeq, last[e.RunID])
		}
		last[e.RunID] = e.RunSeq
	}
}

func startDeliverer(t *testing.T, bin string, env []string, args ...string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"outbox", "deliver"}, args...)...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, &stderr
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestOutboxDeliveryProcesses runs the real binary: two delivery processes
// on one store deliver every event exactly once, in order per run; a
// process SIGKILLed with a request in flight is replaced by another that
// delivers everything, repeating at most the in-flight event.
func TestOutboxDeliveryProcesses(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)

	t.Run("TwoProcesses", func(t *testing.T) {
		h := newHarness(t)
		runs := seedOutbox(t, h.statePath(), 20, 4) // 20 runs × 10 events
		rc := &hookReceiver{delay: time.Millisecond}
		srv := httptest.NewServer(rc)
		defer srv.Close()
		cfg := writeConfig(t, h.dir, srv.URL, "10s", "{}")
		env := append(os.Environ(), "DVT_STORE="+h.env["DVT_STORE"], "HOOK_SECRET="+hookSecret, "DVT_CONFIG="+cfg)
		a, logA := startDeliverer(t, bin, env, "--batch", "5", "--poll", "50ms")
		b, logB := startDeliverer(t, bin, env, "--batch", "5", "--poll", "50ms")
		waitUntil(t, "200 deliveries", func() bool { _, ok, _ := rc.counts(); return len(ok) >= 200 })
		time.Sleep(300 * time.Millisecond) // room for a duplicate to show up
		for _, p := range []*exec.Cmd{a, b} {
			p.Process.Signal(syscall.SIGTERM)
			if err := p.Wait(); err != nil {
				t.Fatalf("deliverer exit: %v", err)
			}
		}
		arrivals, ok, badSig := rc.counts()
		if len(arrivals) != 200 || len(ok) != 200 || badSig != 0 {
			t.Fatalf("%d requests, %d delivered, %d bad signatures; want 200, 200, 0", len(arrivals), len(ok), badSig)
		}
		seen := map[string]bool{}
		for _, e := range ok {
			if seen[e.EventID] {
				t.Fatalf("event %s delivered twice", e.EventID)
			}
			seen[e.EventID] = true
		}
		checkRunOrder(t, ok)
		for _, recs := range runs {
			for _, e := range recs {
				if !seen[e.EventID] {
					t.Fatalf("event %s never arrived", e.EventID)
				}
			}
		}
		t.Logf("delivery passes logged: process A %d, process B %d", strings.Count(logA.String(), `"msg":"delivery pass"`), strings.Count(logB.String(), `"msg":"delivery pass"`))
		if !strings.Contains(logA.String(), `"msg":"delivery started"`) {
			t.Errorf("no JSON start log: %q", logA.String())
		}
	})

	t.Run("SIGKILLMidBatch", func(t *testing.T) {
		h := newHarness(t)
		seedOutbox(t, h.statePath(), 5, 4) // 50 events
		release := make(chan struct{})
		// The 12th request hangs until the test lets it go: the process is
		// killed with that event in flight and the rest of its claim unsent.
		rc := &hookReceiver{hold: func(n int) <-chan struct{} {
			if n == 12 {
				return release
			}
			return nil
		}}
		srv := httptest.NewServer(rc)
		defer srv.Close()
		defer close(release)
		cfg := writeConfig(t, h.dir, srv.URL, "1s", "{}")
		env := append(os.Environ(), "DVT_STORE="+h.env["DVT_STORE"], "HOOK_SECRET="+hookSecret, "DVT_CONFIG="+cfg)
		a, _ := startDeliverer(t, bin, env, "--batch", "8", "--claim-ttl", "2s", "--poll", "50ms")
		waitUntil(t, "the 12th request", func() bool { all, _, _ := rc.counts(); return len(all) >= 12 })
		if err := a.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		a.Wait()
		all, _, _ := rc.counts()
		inFlight := all[11].EventID
		b, _ := startDeliverer(t, bin, env, "--batch", "8", "--claim-ttl", "2s", "--poll", "50ms")
		waitUntil(t, "every event", func() bool {
			_, ok, _ := rc.counts()
			seen := map[string]bool{}
			for _, e := range ok {
				seen[e.EventID] = true
			}
			return len(seen) == 50
		})
		time.Sleep(300 * time.Millisecond)
		b.Process.Signal(syscall.SIGTERM)
		b.Wait()
		arrivals, ok, _ := rc.counts()
		times := map[string]int{}
		for _, e := range arrivals {
			times[e.EventID]++
		}
		for id, n := range times {
			if n > 1 && id != inFlight {
				t.Fatalf("event %s arrived %d times; only the in-flight %s may repeat", id, n, inFlight)
			}
		}
		if len(times) != 50 || times[inFlight] != 2 {
			t.Fatalf("%d distinct events, the in-flight one arrived %d times; want 50 and 2", len(times), times[inFlight])
		}
		checkRunOrder(t, ok)
	})
}
