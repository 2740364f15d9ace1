package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/dvtrun/dvtrun/store"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/storetest"
)

func TestConformance(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	clock := storetest.NewClock()
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
