package postgres_test

import (
	"context"
	"testing"

	"github.com/dvtrun/dvtrun/store"
	"github.com/dvtrun/dvtrun/store/postgres"
	"github.com/dvtrun/dvtrun/store/postgres/pgtest"
	"github.com/dvtrun/dvtrun/store/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

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
	clock := storetest.NewClock()
	storetest.Run(t, storetest.Backend{
		Open:    func(t *testing.T) store.Store { return openStore(t, dsn, postgres.Options{Now: clock.Now}) },
		Advance: clock.Advance,
		Fresh: func(t *testing.T) func(t *testing.T) store.Store {
			dsn := pgtest.DSN(t)
			return func(t *testing.T) store.Store { return openStore(t, dsn, postgres.Options{}) }
		},
	})
}
