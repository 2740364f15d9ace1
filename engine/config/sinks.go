package config

import (
	"fmt"
	"time"
)

// Sink is one destination of outbox delivery; exactly one kind is set.
type Sink struct {
	Name        string           `yaml:"name" doc:"The sink's name, unique in the file: delivery is tracked per sink. Required."`
	Webhook     *WebhookSink     `yaml:"webhook" doc:"POST each event as JSON, signed per the Standard Webhooks convention."`
	JSONL       *JSONLSink       `yaml:"jsonl" doc:"Append each event as one JSON line to a file."`
	OpenLineage *OpenLineageSink `yaml:"openlineage" doc:"Send each run event's OpenLineage event to a URL (POST url/api/v1/lineage), or append it to a file."`
	Retry       RetryPolicy      `yaml:"retry" doc:"Redelivery: exponential backoff with jitter, then a dead letter (dvtrun outbox dead lists them, outbox retry replays them). Zero fields take the defaults."`
}

// RetryPolicy bounds a sink's redeliveries: exponential backoff from
// Backoff up to MaxBackoff (with jitter), and the dead letter after
// MaxAttempts failed attempts or once an event is older than MaxAge.
type RetryPolicy struct {
	MaxAttempts int           `yaml:"maxAttempts" doc:"Failed attempts before an event becomes a dead letter (default 10)."`
	MaxAge      time.Duration `yaml:"maxAge" doc:"Age at which an undelivered event becomes a dead letter (default 24h)."`
	Backoff     time.Duration `yaml:"backoff" doc:"First pause after a failed attempt, doubled after each (default 1s)."`
	MaxBackoff  time.Duration `yaml:"maxBackoff" doc:"Longest pause between attempts (default 5m)."`
}

// WebhookSink posts each event, signed per the Standard Webhooks
// convention with the whsec_ secret(s) read from SecretEnv.
type WebhookSink struct {
	URL       string        `yaml:"url" doc:"The endpoint, http:// or https://. Required."`
	SecretEnv string        `yaml:"secretEnv" doc:"Name of the environment variable holding the whsec_ signing secret (several, separated by spaces or commas, while rotating secrets)."`
	Timeout   time.Duration `yaml:"timeout" doc:"Bound on one request (default 10s)."`
}

// JSONLSink appends one event record per line to a file.
type JSONLSink struct {
	Path string `yaml:"path" doc:"The file events are appended to. Required."`
}

// OpenLineageSink posts OpenLineage events to URL/api/v1/lineage with the
// bearer token read from APIKeyEnv, or appends them to the file Path.
type OpenLineageSink struct {
	URL       string        `yaml:"url" doc:"The OpenLineage server's base URL (events go to url/api/v1/lineage). Exactly one of url and path."`
	APIKeyEnv string        `yaml:"apiKeyEnv" doc:"Name of the environment variable holding the bearer token (url only)."`
	Timeout   time.Duration `yaml:"timeout" doc:"Bound on one request (url only)."`
	Path      string        `yaml:"path" doc:"A file the events are appended to, one per line. Exactly one of url and path."`
	Namespace string        `yaml:"namespace" doc:"The jobs' namespace (default dvtrun)."`
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
		kinds := 0
		for _, set := range []bool{s.Webhook != nil, s.JSONL != nil, s.OpenLineage != nil} {
			if set {
				kinds++
			}
		}
		switch {
		case kinds > 1:
			return keyError(key, "sink %q sets more than one of webhook, jsonl and openlineage; give each its own sink", s.Name)
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
		case s.OpenLineage != nil:
			ol := s.OpenLineage
			switch {
			case (ol.URL == "") == (ol.Path == ""):
				return keyError(key+".openlineage", "sink %q needs exactly one of url and path", s.Name)
			case ol.Path != "" && (ol.APIKeyEnv != "" || ol.Timeout != 0):
				return keyError(key+".openlineage", "sink %q writes a file: apiKeyEnv and timeout apply to a url only", s.Name)
			case ol.Timeout < 0:
				return keyError(key+".openlineage.timeout", "must not be negative")
			}
		default:
			return keyError(key, "sink %q needs webhook, jsonl or openlineage", s.Name)
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
