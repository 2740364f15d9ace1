package config

import (
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

func TestSinkRetryPolicy(t *testing.T) {
	c, err := Parse([]byte(`
sinks:
  - name: archive
    jsonl: {path: events.jsonl}
    retry: {maxAttempts: 3, maxAge: 1h, backoff: 2s, maxBackoff: 1m}
  - name: defaults
    jsonl: {path: other.jsonl}
`), "dvt.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Sinks[0].Retry; r.MaxAttempts != 3 || r.MaxAge != time.Hour || r.Backoff != 2*time.Second || r.MaxBackoff != time.Minute {
		t.Errorf("retry = %+v", r)
	}
	if r := c.Sinks[1].Retry; r != (RetryPolicy{}) {
		t.Errorf("unset retry = %+v, want zero (the delivery defaults)", r)
	}
	cases := []struct{ name, text, want string }{
		{"negative attempts", "sinks: [{name: a, jsonl: {path: x}, retry: {maxAttempts: -1}}]", "sinks[0].retry.maxAttempts: must not be negative"},
		{"negative age", "sinks: [{name: a, jsonl: {path: x}, retry: {maxAge: -1s}}]", "sinks[0].retry.maxAge: must not be negative"},
		{"backoff over cap", "sinks: [{name: a, jsonl: {path: x}, retry: {backoff: 10m, maxBackoff: 1m}}]", "sinks[0].retry.backoff: 10m0s exceeds maxBackoff 1m0s"},
		{"unknown retry key", "sinks: [{name: a, jsonl: {path: x}, retry: {attempts: 3}}]", "field attempts not found"},
		{"bad duration", "sinks: [{name: a, jsonl: {path: x}, retry: {maxAge: forever}}]", "forever"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.text), "dvt.yaml")
			if engine.CodeOf(err) != engine.CodeConfigInvalid || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want CONFIG_INVALID %q", err, tc.want)
			}
		})
	}
}
