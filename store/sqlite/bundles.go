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

// newBundles is the store's plan bundle table (store.BundleSQL).
func (s *Store) newBundles() (store.BundleSQL, error) {
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
