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

// bundles is the store's plan bundle table (store.BundleSQL): single
// statements with bound values, each retried as the store's writes are.
func (s *Store) bundles() (store.BundleSQL, error) {
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

// PutPlanBundle implements engine.BundleStore.
func (s *Store) PutPlanBundle(ctx context.Context, sha256 string, data []byte) error {
	b, err := s.bundles()
	if err != nil {
		return err
	}
	return b.PutPlanBundle(ctx, sha256, data)
}

// GetPlanBundle implements engine.BundleStore.
func (s *Store) GetPlanBundle(ctx context.Context, sha256 string) ([]byte, bool, error) {
	b, err := s.bundles()
	if err != nil {
		return nil, false, err
	}
	return b.GetPlanBundle(ctx, sha256)
}
