package postgres

import (
	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store"
)

// newProjection is the store's SQL projection (store.ProjectionSQL) over
// sql/postgres/projection.sql.
func (s *Store) newProjection() (store.ProjectionSQL, error) {
	q, err := sqlfiles.ProjectionOf(sqlfiles.Postgres)
	return store.ProjectionSQL{Queries: q, Query: s.query, Events: s.scanEvents, GetRun: s.GetRun,
		Classify: func(_ string, err error) error { return s.classify(err) }}, err
}
