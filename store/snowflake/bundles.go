package snowflake

import (
	"context"
	"sync"

	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store"
)

var bundleQueries = sync.OnceValues(func() (map[string]string, error) {
	return sqlfiles.Queries(sqlfiles.Snowflake, "bundles.sql")
})

// newBundles is the store's plan bundle table (store.BundleSQL): single
// statements with bound values, each retried as the store's writes are.
func (s *Store) newBundles() (store.BundleSQL, error) {
	q, err := bundleQueries()
	return store.BundleSQL{
		Queries: q,
		Exec: func(ctx context.Context, query string, args ...any) error {
			return s.withRetry(ctx, func() error {
				_, err := s.db.ExecContext(ctx, query, args...)
				return s.classify("store plan bundle", err)
			})
		},
		Read:     s.db,
		Classify: s.classify,
		Now:      func() any { return tsText(s.now()) },
	}, err
}
