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

func TestTamperEvidence(t *testing.T) {
	storetest.RunAudit(t, storetest.AuditBackend{
		Fresh: func(t *testing.T) storetest.AuditStore {
			s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "state.db"), sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		Tamper: func(t *testing.T, s storetest.AuditStore, stmts ...string) {
			// The owner of the file can drop the triggers: what the chain
			// and the checkpoints are for.
			db := s.(*sqlite.Store).DB()
			rows, err := db.QueryContext(context.Background(), `SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE '%_no_%'`)
			if err != nil {
				t.Fatal(err)
			}
			var triggers []string
			for rows.Next() {
				var n string
				if err := rows.Scan(&n); err != nil {
					t.Fatal(err)
				}
				triggers = append(triggers, n)
			}
			rows.Close()
			for _, n := range triggers {
				stmts = append([]string{"DROP TRIGGER " + n}, stmts...)
			}
			for _, q := range stmts {
				if _, err := db.ExecContext(context.Background(), q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
		},
		Guarded: func(s storetest.AuditStore, stmt string) error {
			_, err := s.(*sqlite.Store).DB().ExecContext(context.Background(), stmt)
			return err
		},
		JSON: func(quoted string) string { return quoted },
	})
}
