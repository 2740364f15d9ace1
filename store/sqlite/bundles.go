package sqlite

import (
	"context"
	"database/sql"
	"sync"

	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store"
)

var bundleQueries = sync.OnceValues(func() (map[string]string, error) {
	return sqlfiles.Queries(sqlfiles.SQLite, "bundles.sql")
})

// bundles is the store's plan bundle table (store.BundleSQL).
func (s *Store) bundles() (store.BundleSQL, error) {
	q, err := bundleQueries()
	return store.BundleSQL{
		Queries: q,
		Exec: func(ctx context.Context, query string, args ...any) error {
			s.writeMu.Lock()
			defer s.writeMu.Unlock()
			_, err := s.execWrite(ctx, func() (sql.Result, error) { return s.db.ExecContext(ctx, query, args...) })
			return classify(s.path, err)
		},
		Read:     s.db,
		Classify: func(_ string, err error) error { return classify(s.path, err) },
		Now:      func() any { return s.now() },
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
