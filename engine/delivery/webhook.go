package delivery

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// Doer sends an HTTP request (*http.Client does).
type Doer interface {
	Do(req *http.Request) (*http.Response, error)
}

// Webhook posts one event per request, its RunEventRecord JSON as the body,
// signed per the Standard Webhooks convention: webhook-id is the eventId
// (the same on every retry, so receivers can deduplicate), webhook-timestamp
// the attempt's unix seconds, webhook-signature "v1,<base64 HMAC-SHA256 of
// id.timestamp.body>" once per secret. A 2xx answer is a delivery; anything
// else, a transport error or the timeout is a failure.
type Webhook struct {
	url     string
	keys    [][]byte
	timeout time.Duration
	client  Doer
	clock   engine.Clock
}

// DefaultWebhookTimeout bounds a request when the sink sets no timeout.
const DefaultWebhookTimeout = 10 * time.Second

// WebhookOptions configures NewWebhook.
type WebhookOptions struct {
	URL string
	// Secrets is the secret variable's value: whsec_ secrets separated by
	// spaces or commas (several during a rotation). Empty: unsigned.
	Secrets string
	// SecretName names where Secrets came from, for errors (never the value).
	SecretName string
	Timeout    time.Duration // default DefaultWebhookTimeout
	Client     Doer          // default a new http.Client
	Clock      engine.Clock
}

// NewWebhook checks the URL and decodes the secrets. Errors are
// CONFIG_INVALID and never contain a secret.
func NewWebhook(o WebhookOptions) (*Webhook, error) {
	if !strings.HasPrefix(o.URL, "http://") && !strings.HasPrefix(o.URL, "https://") {
		return nil, engine.Errorf(engine.CodeConfigInvalid, "webhook url %q must start with http:// or https://", o.URL)
	}
	if o.Clock == nil {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "a webhook sink needs a clock")
	}
	keys, err := DecodeSecrets(o.Secrets)
	if err != nil {
		return nil, engine.Errorf(engine.CodeConfigInvalid, "%s: %v", o.SecretName, err)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultWebhookTimeout
	}
	if o.Client == nil {
		o.Client = NewHTTPClient()
	}
	return &Webhook{url: o.URL, keys: keys, timeout: o.Timeout, client: o.Client, clock: o.Clock}, nil
}

// NewHTTPClient is the webhook's default client: it does not follow
// redirects (a 3xx is not a delivery; a redirected POST would turn into a
// GET without the event).
func NewHTTPClient() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// DecodeSecrets splits a secret list (spaces or commas) and decodes each
// whsec_<base64> secret into its HMAC key.
func DecodeSecrets(list string) ([][]byte, error) {
	var keys [][]byte
	for i, s := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		b64, ok := strings.CutPrefix(s, "whsec_")
		if !ok {
			return nil, fmt.Errorf("secret %d does not start with whsec_", i+1)
		}
		k, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(k) == 0 {
			return nil, fmt.Errorf("secret %d is not whsec_ followed by base64", i+1)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// Sign returns the webhook-signature header value for one message: one
// "v1,<base64>" per key, separated by spaces.
func Sign(keys [][]byte, id string, timestamp int64, body []byte) string {
	sigs := make([]string, len(keys))
	for i, k := range keys {
		m := hmac.New(sha256.New, k)
		fmt.Fprintf(m, "%s.%d.", id, timestamp)
		m.Write(body)
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	}
	return strings.Join(sigs, " ")
}

// MaxBatch implements Sink: one event per request.
func (w *Webhook) MaxBatch() int { return 1 }

// Deliver implements Sink.
func (w *Webhook) Deliver(ctx context.Context, events []engine.RunEventRecord) (int, error) {
	for i, e := range events {
		if err := w.post(ctx, e); err != nil {
			return i, err
		}
	}
	return len(events), nil
}

// DeliverCheckpoints implements CheckpointSink: one checkpoint record per
// request, webhook-id its ID, the header dvtrun-record-kind "checkpoint" so a
// receiver can route it before parsing the body.
func (w *Webhook) DeliverCheckpoints(ctx context.Context, cps []CheckpointRecord) (int, error) {
	for i, c := range cps {
		body, err := json.Marshal(c)
		if err == nil {
			err = w.send(ctx, c.ID, CheckpointKind, body)
		}
		if err != nil {
			return i, err
		}
	}
	return len(cps), nil
}

func (w *Webhook) post(ctx context.Context, e engine.RunEventRecord) error {
	body, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return w.send(ctx, e.EventID, "", body)
}

// send posts one signed message; kind, when set, goes in the
// dvtrun-record-kind header (run events have none, as before).
func (w *Webhook) send(ctx context.Context, id, kind string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	ts := w.clock.Now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "dvtrun-outbox")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	if kind != "" {
		req.Header.Set("dvtrun-record-kind", kind)
	}
	if len(w.keys) > 0 {
		req.Header.Set("webhook-signature", Sign(w.keys, id, ts, body))
	}
	return send(ctx, w.client, req, w.timeout)
}

// send does req (its context bounded by timeout): a 2xx answer is a
// delivery; anything else, a transport error or the timeout is an error
// naming the URL (never a header: they may hold a secret).
func send(ctx context.Context, client Doer, req *http.Request, timeout time.Duration) error {
	u := req.URL.String()
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return fmt.Errorf("POST %s: no answer within %s", u, timeout)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the url.Error repeats the method and URL
		}
		return fmt.Errorf("POST %s: %w", u, err)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // let the connection be reused
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg := strings.Join(strings.Fields(string(snippet)), " ")
		return fmt.Errorf("POST %s: HTTP %d %s", u, resp.StatusCode, msg)
	}
	return nil
}
