package servicetest

import (
	"sync"
	"time"
)

// Clock is a manual engine.Clock for a service's tests: it reads the same
// until the test sets or advances it.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now implements engine.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set makes the clock read t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// Advance moves the clock d on.
func (c *Clock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }
