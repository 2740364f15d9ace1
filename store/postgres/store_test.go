package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/store"
	"github.com/dvtrun/dvtrun/store/postgres"
	"github.com/dvtrun/dvtrun/store/postgres/pgtest"
	"github.com/dvtrun/dvtrun/store/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

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

func openStore(t *testing.T, dsn string, opts postgres.Options) store.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), dsn, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	dsn := pgtest.DSN(t)
	clock := &fakeClock{t: time.Date(2026, 4, 1, 9, 0, 0, 0, time.UTC)}
	storetest.Run(t, storetest.Backend{
		Open:    func(t *testing.T) store.Store { return openStore(t, dsn, postgres.Options{Now: clock.Now}) },
		Advance: clock.Advance,
		Fresh: func(t *testing.T) func(t *testing.T) store.Store {
			dsn := pgtest.DSN(t)
			return func(t *testing.T) store.Store { return openStore(t, dsn, postgres.Options{}) }
		},
	})
}
