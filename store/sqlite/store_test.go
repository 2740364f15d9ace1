package sqlite_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/store"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// fakeClock is the store clock of a test, advanced by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Microsecond) // strictly increasing, like a real clock
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestConformance(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	clock := &fakeClock{t: time.Date(2026, 4, 1, 9, 0, 0, 0, time.UTC)}
	storetest.Run(t, storetest.Backend{
		Open: func(t *testing.T) store.Store {
			s, err := sqlite.Open(context.Background(), path, sqlite.Options{Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Advance: clock.Advance,
		Fresh: func(t *testing.T) func(t *testing.T) store.Store {
			path := filepath.Join(t.TempDir(), "queue.db")
			return func(t *testing.T) store.Store {
				s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
		},
	})
}
