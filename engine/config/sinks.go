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
