package storetest

import (
	"sync"
	"time"
)

// Clock is a store clock of a test, advanced by hand (Backend.Advance): it
// starts at 2026-04-01 09:00 UTC and moves a microsecond on every reading,
// strictly increasing like a real clock.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock at 2026-04-01 09:00 UTC.
func NewClock() *Clock { return &Clock{t: time.Date(2026, 4, 1, 9, 0, 0, 0, time.UTC)} }

// Now reads the clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Microsecond)
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
