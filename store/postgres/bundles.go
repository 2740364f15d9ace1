package postgres

import (
	"context"
	"sync"

	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store"
)

var bundleQueries = sync.OnceValues(func() (map[string]string, error) {
	return sqlfiles.Queries(sqlfiles.Postgres, "bundles.sql")
})

// newBundles is the store's plan bundle table (store.BundleSQL).
func (s *Store) newBundles() (store.BundleSQL, error) {
	q, err := bundleQueries()
	return store.BundleSQL{
		Queries: q,
		Exec: func(ctx context.Context, query string, args ...any) error {
			_, err := s.exec(ctx, query, args...) // idempotent: ON CONFLICT DO NOTHING
			return err
		},
		Read:     s.db,
		Classify: func(_ string, err error) error { return s.classify(err) },
		Now:      func() any { return s.now() },
	}, err
}
