package delivery_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/delivery"
)

// verifySignature is a receiver's check written from the Standard Webhooks
// specification, independently of delivery.Sign: the signed content is
// "<webhook-id>.<webhook-timestamp>.<body>", the key is the base64 part of
// the whsec_ secret, the header holds space-delimited "v1,<base64
// HMAC-SHA256>" entries of which one must match, and the timestamp must lie
// within the tolerance of the receiver's clock.
func verifySignature(secret string, h http.Header, body []byte, now time.Time) error {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("timestamp %q: %v", ts, err)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return fmt.Errorf("timestamp %s outside the tolerance", ts)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + string(body)))
	want := mac.Sum(nil)
	for _, entry := range strings.Split(sigs, " ") {
		version, b64, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("no signature matches")
}

// The reference vector published with the Standard Webhooks libraries.
func TestSignMatchesTheStandardWebhooksVector(t *testing.T) {
	keys, err := delivery.DecodeSecrets("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := delivery.Sign(keys, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature %s, want %s", got, want)
	}
}

const (
	secretA = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	secretB = "whsec_c2Vjb25kIHNlY3JldCBmb3Igcm90YXRpb24="
)

func TestWebhookRequest(t *testing.T) {
	cases := []struct {
		name, secrets string
		verifyWith    []string // each must verify on its own
		unsigned      bool
	}{
		{"one secret", secretA, []string{secretA}, false},
		{"rotation, space", secretA + " " + secretB, []string{secretA, secretB}, false},
		{"rotation, comma", secretB + "," + secretA, []string{secretA, secretB}, false},
		{"no secret", "", nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got *http.Request
			var body []byte
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ = io.ReadAll(r.Body)
				got = r
				w.WriteHeader(http.StatusNoContent)
			}))
			defer srv.Close()
			now := time.Now()
			wh, err := delivery.NewWebhook(delivery.WebhookOptions{URL: srv.URL, Secrets: tc.secrets, SecretName: "DVT_WEBHOOK_SECRET", Clock: engine.ClockFunc(func() time.Time { return now })})
			if err != nil {
				t.Fatal(err)
			}
			ev := record("run-1", 3)
			if n, err := wh.Deliver(context.Background(), []engine.RunEventRecord{ev}); n != 1 || err != nil {
				t.Fatalf("Deliver = %d, %v", n, err)
			}
			if got.Header.Get("webhook-id") != ev.EventID || got.Header.Get("webhook-timestamp") != strconv.FormatInt(now.Unix(), 10) ||
				got.Header.Get("Content-Type") != "application/json" || got.Method != http.MethodPost {
				t.Fatalf("request %s headers %v", got.Method, got.Header)
			}
			var back engine.RunEventRecord
			if err := json.Unmarshal(body, &back); err != nil || back.EventID != ev.EventID || back.RunSeq != 3 || back.RunID != "run-1" {
				t.Fatalf("body %s (%v)", body, err)
			}
			if tc.unsigned != (got.Header.Get("webhook-signature") == "") {
				t.Fatalf("signature header %q", got.Header.Get("webhook-signature"))
			}
			for _, s := range tc.verifyWith {
				if err := verifySignature(s, got.Header, body, now); err != nil {
					t.Fatalf("verify with %s…: %v", s[:10], err)
				}
			}
			if !tc.unsigned {
				if err := verifySignature(secretA, got.Header, append(body, ' '), now); err == nil {
					t.Fatal("a changed body verified")
				}
				if err := verifySignature("whsec_"+base64.StdEncoding.EncodeToString([]byte("other")), got.Header, body, now); err == nil {
					t.Fatal("another secret verified")
				}
			}
		})
	}
}

func TestWebhookFailures(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/500":
			http.Error(w, "database\nis down", http.StatusInternalServerError)
		case "/302":
			w.Header().Set("Location", "/elsewhere-that-404s")
			w.WriteHeader(http.StatusFound)
		case "/slow":
			<-block
		}
	}))
	defer srv.Close()
	defer close(block)
	cases := []struct{ path, want string }{
		{"/500", "HTTP 500 database is down"},
		{"/302", "HTTP 302"},
		{"/slow", "no answer within 50ms"},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			wh, err := delivery.NewWebhook(delivery.WebhookOptions{URL: srv.URL + tc.path, Secrets: secretA, Timeout: 50 * time.Millisecond, Clock: engine.ClockFunc(time.Now)})
			if err != nil {
				t.Fatal(err)
			}
			n, err := wh.Deliver(context.Background(), []engine.RunEventRecord{record("r", 1), record("r", 2)})
			if n != 0 || err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "MfKQ9r8") {
				t.Fatalf("Deliver = %d, %v; want 0 and %q", n, err, tc.want)
			}
		})
	}
}

func TestWebhookConfigErrors(t *testing.T) {
	cases := []struct{ name, url, secrets, want string }{
		{"no scheme", "example.test/x", "", "must start with http"},
		{"not whsec", "http://x", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "DVT_S: secret 1 does not start with whsec_"},
		{"bad base64", "http://x", secretA + " whsec_***", "DVT_S: secret 2 is not whsec_ followed by base64"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := delivery.NewWebhook(delivery.WebhookOptions{URL: tc.url, Secrets: tc.secrets, SecretName: "DVT_S", Clock: engine.ClockFunc(time.Now)})
			if engine.CodeOf(err) != engine.CodeConfigInvalid || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "MfKQ9r8") {
				t.Fatalf("err %v, want CONFIG_INVALID %q without the secret", err, tc.want)
			}
		})
	}
}

var seqMu sync.Mutex

func record(runID string, seq int64) engine.RunEventRecord {
	seqMu.Lock()
	defer seqMu.Unlock()
	return engine.RunEventRecord{
		RunEventWrite: engine.RunEventWrite{EventID: fmt.Sprintf("%s-e%d", runID, seq), EventType: engine.StepStarted, RunID: runID, StepID: "model.a",
			TenantID: "t", ProjectID: "p", EnvironmentID: "e", PlanID: "plan", PlanVersion: "1", LogicalAttemptID: 1, EngineAttemptID: 1,
			IdempotencyKey: "k", EmittedAt: time.Date(2026, 4, 1, 8, 0, 0, 0, time.UTC)},
		RunSeq: seq, PersistedAt: time.Date(2026, 4, 1, 8, 0, 1, 0, time.UTC),
	}
}
