package sftest

import (
	"net/http"
	"strings"
	"sync"
)

// CountingTransport is an http.RoundTripper for gosnowflake's
// Config.Transporter that counts the HTTP round trips a client makes, by
// kind, so tests assert what an operation costs on the network rather than
// which SQL it sends. The zero value uses http.DefaultTransport.
type CountingTransport struct {
	Base http.RoundTripper

	mu     sync.Mutex
	counts map[string]int64
}

// Kinds of round trips, from the request path.
const (
	TripQuery  = "query"  // /queries/v1/query-request
	TripResult = "result" // GET /queries/<id>/result
	TripLogin  = "login"  // /session/v1/login-request
	TripOther  = "other"  // heartbeat, token renewal, close, abort, telemetry
)

// RoundTrip implements http.RoundTripper.
func (c *CountingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	kind := TripOther
	switch p := r.URL.Path; {
	case p == "/queries/v1/query-request":
		kind = TripQuery
	case strings.HasPrefix(p, "/queries/") && strings.HasSuffix(p, "/result"):
		kind = TripResult
	case p == "/session/v1/login-request":
		kind = TripLogin
	}
	c.mu.Lock()
	if c.counts == nil {
		c.counts = map[string]int64{}
	}
	c.counts[kind]++
	c.mu.Unlock()
	base := c.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}

// Count returns the round trips of the given kinds so far; no kinds means
// all of them.
func (c *CountingTransport) Count(kinds ...string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	if len(kinds) == 0 {
		for _, v := range c.counts {
			n += v
		}
	}
	for _, k := range kinds {
		n += c.counts[k]
	}
	return n
}

// Reset sets every count to zero.
func (c *CountingTransport) Reset() {
	c.mu.Lock()
	c.counts = nil
	c.mu.Unlock()
}
