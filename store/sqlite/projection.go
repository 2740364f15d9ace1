package sqlite

import (
	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store"
)

// newProjection is the store's SQL projection (store.ProjectionSQL) over
// sql/sqlite/projection.sql.
func (s *Store) newProjection() (store.ProjectionSQL, error) {
	q, err := sqlfiles.ProjectionOf(sqlfiles.SQLite)
	return store.ProjectionSQL{Queries: q, Query: s.db.QueryContext, Events: s.scanEvents, GetRun: s.GetRun,
		Classify: func(_ string, err error) error { return classify(s.path, err) }}, err
}
