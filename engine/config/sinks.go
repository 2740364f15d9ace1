package config

import (
	"fmt"
	"time"
)

// Sink is one destination of outbox delivery; exactly one kind is set.
type Sink struct {
	Name    string       `yaml:"name"`
	Webhook *WebhookSink `yaml:"webhook"`
	JSONL   *JSONLSink   `yaml:"jsonl"`
	// Retry is the sink's delivery policy; zero fields take the defaults
	// (10 attempts, 24h, 1s doubling up to 5m).
	Retry RetryPolicy `yaml:"retry"`
}

// RetryPolicy bounds a sink's redeliveries: exponential backoff from
// Backoff up to MaxBackoff (with jitter), and the dead letter after
// MaxAttempts failed attempts or once an event is older than MaxAge.
type RetryPolicy struct {
	MaxAttempts int           `yaml:"maxAttempts"`
	MaxAge      time.Duration `yaml:"maxAge"`
	Backoff     time.Duration `yaml:"backoff"`
	MaxBackoff  time.Duration `yaml:"maxBackoff"`
}

// WebhookSink posts each event, signed per the Standard Webhooks
// convention with the whsec_ secret(s) read from SecretEnv.
type WebhookSink struct {
	URL       string        `yaml:"url"`
	SecretEnv string        `yaml:"secretEnv"`
	Timeout   time.Duration `yaml:"timeout"`
}

// JSONLSink appends one event record per line to a file.
type JSONLSink struct {
	Path string `yaml:"path"`
}

func validateSinks(sinks []Sink) error {
	seen := map[string]bool{}
	for i, s := range sinks {
		key := fmt.Sprintf("sinks[%d]", i)
		if s.Name == "" {
			return keyError(key+".name", "is required")
		}
		if seen[s.Name] {
			return keyError(key+".name", "%q is used by an earlier sink", s.Name)
		}
		seen[s.Name] = true
		if err := s.Retry.validate(key + ".retry"); err != nil {
			return err
		}
		switch {
		case s.Webhook != nil && s.JSONL != nil:
			return keyError(key, "sink %q sets both webhook and jsonl; give each its own sink", s.Name)
		case s.Webhook != nil:
			if s.Webhook.URL == "" {
				return keyError(key+".webhook.url", "is required")
			}
			if s.Webhook.Timeout < 0 {
				return keyError(key+".webhook.timeout", "must not be negative")
			}
		case s.JSONL != nil:
			if s.JSONL.Path == "" {
				return keyError(key+".jsonl.path", "is required")
			}
		default:
			return keyError(key, "sink %q needs webhook or jsonl", s.Name)
		}
	}
	return nil
}

func (p RetryPolicy) validate(key string) error {
	switch {
	case p.MaxAttempts < 0:
		return keyError(key+".maxAttempts", "must not be negative")
	case p.MaxAge < 0:
		return keyError(key+".maxAge", "must not be negative")
	case p.Backoff < 0:
		return keyError(key+".backoff", "must not be negative")
	case p.MaxBackoff < 0:
		return keyError(key+".maxBackoff", "must not be negative")
	case p.MaxBackoff > 0 && p.Backoff > p.MaxBackoff:
		return keyError(key+".backoff", "%s exceeds maxBackoff %s", p.Backoff, p.MaxBackoff)
	}
	return nil
}
