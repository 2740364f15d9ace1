package postgres

import (
	"context"

	"github.com/dvtrun/dvtrun/engine"
)

// ProjectRows runs a statement with the projection's 28 columns and
// assembles its snapshots, for tests that read the audit views the way
// ProjectSQL reads its query.
func (s *Store) ProjectRows(ctx context.Context, query string, args ...any) (map[string]engine.Snapshot, error) {
	return s.projectRows(ctx, query, args...)
}

// Listening is closed once the store's wake-up connection LISTENs (after
// the first subscription): a test that measures wake-ups starts there.
func (s *Store) Listening() <-chan struct{} { return s.wake.connected }

// Unchained makes s append without the hash chain, for the benchmark that
// measures what the chain costs.
func Unchained(s *Store) { s.unchained = true }
