package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/lineage"
)

// OpenLineagePath is where an OpenLineage server takes events (Marquez,
// and the HTTP transport of OpenLineage's clients).
const OpenLineagePath = "/api/v1/lineage"

// OpenLineage delivers the OpenLineage event of each run event (see
// engine/lineage): posted one per request to <url>/api/v1/lineage with a
// bearer token, or appended one per line to a file. Run events with no
// lineage event (queueing, signals, tests…) count as delivered. The mapping
// is deterministic, so an event delivered again is the same event.
type OpenLineage struct {
	mapper *lineage.Mapper
	// one of:
	url     string
	token   string
	timeout time.Duration
	client  Doer
	file    *JSONL
}

// OpenLineageOptions configures NewOpenLineage: URL or Path.
type OpenLineageOptions struct {
	Mapper *lineage.Mapper
	URL    string // the server's base URL; OpenLineagePath is appended
	// Token is the API key sent as "Authorization: Bearer <token>" (empty:
	// none).
	Token   string
	Timeout time.Duration // default DefaultWebhookTimeout
	Client  Doer          // default NewHTTPClient()
	Path    string        // a file to append to instead
}

// NewOpenLineage checks the options and opens the file, if one. Errors are
// CONFIG_INVALID and never contain the token.
func NewOpenLineage(o OpenLineageOptions) (*OpenLineage, error) {
	if o.Mapper == nil {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "an openlineage sink needs a mapper")
	}
	s := &OpenLineage{mapper: o.Mapper}
	if o.Path != "" {
		f, err := OpenJSONL(o.Path)
		if err != nil {
			return nil, err
		}
		s.file = f
		return s, nil
	}
	if !strings.HasPrefix(o.URL, "http://") && !strings.HasPrefix(o.URL, "https://") {
		return nil, engine.Errorf(engine.CodeConfigInvalid, "openlineage url %q must start with http:// or https://", o.URL)
	}
	s.url = strings.TrimRight(o.URL, "/") + OpenLineagePath
	s.token = o.Token
	s.timeout = o.Timeout
	if s.timeout <= 0 {
		s.timeout = DefaultWebhookTimeout
	}
	s.client = o.Client
	if s.client == nil {
		s.client = NewHTTPClient()
	}
	return s, nil
}

// MaxBatch implements Sink: one request per event, or a file's batch.
func (s *OpenLineage) MaxBatch() int {
	if s.file != nil {
		return jsonlBatch
	}
	return 1
}

// Deliver implements Sink.
func (s *OpenLineage) Deliver(ctx context.Context, events []engine.RunEventRecord) (int, error) {
	if s.file != nil {
		return s.deliverFile(ctx, events)
	}
	for i, e := range events {
		body, err := s.encode(ctx, e)
		if err != nil {
			return i, err
		}
		if body != nil {
			if err := s.post(ctx, body); err != nil {
				return i, err
			}
		}
	}
	return len(events), nil
}

// encode is e's OpenLineage event as JSON, nil when e has none.
func (s *OpenLineage) encode(ctx context.Context, e engine.RunEventRecord) ([]byte, error) {
	ev, err := s.mapper.Map(ctx, e)
	if err != nil || ev == nil {
		return nil, err
	}
	return json.Marshal(ev)
}

// deliverFile writes the events' lines in one write and sync: all or none.
func (s *OpenLineage) deliverFile(ctx context.Context, events []engine.RunEventRecord) (int, error) {
	var buf bytes.Buffer
	for _, e := range events {
		body, err := s.encode(ctx, e)
		if err != nil {
			return 0, err
		}
		if body != nil {
			buf.Write(body)
			buf.WriteByte('\n')
		}
	}
	if buf.Len() > 0 {
		if err := s.file.appendSynced(buf.Bytes()); err != nil {
			return 0, err
		}
	}
	return len(events), nil
}

func (s *OpenLineage) post(ctx context.Context, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "dvtrun-outbox")
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	return send(ctx, s.client, req, s.timeout)
}

// Close closes the file, if one.
func (s *OpenLineage) Close() error {
	if s.file != nil {
		return s.file.Close()
	}
	return nil
}
