package servicetest

import (
	"context"
	"testing"
	"time"
)

// Ticker is a service's injected Sleep driven by the test: each sleep ends
// when the test calls Tick (or the sleep's ctx ends). A tick is taken only
// by a sleeping service, so when Tick returns, what the service did before
// it slept is done.
type Ticker chan struct{}

// NewTicker returns a Ticker.
func NewTicker() Ticker { return make(Ticker) }

// Sleep is the service's Sleep.
func (tk Ticker) Sleep(ctx context.Context, _ time.Duration) error {
	select {
	case <-tk:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Tick ends the service's current (or next) sleep; it fails t if the
// service does not sleep within a minute.
func (tk Ticker) Tick(t testing.TB) {
	t.Helper()
	select {
	case tk <- struct{}{}:
	case <-time.After(time.Minute):
		t.Fatal("the service never slept")
	}
}
