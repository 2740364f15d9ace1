package snowflake

import (
	"iter"

	"github.com/dvtrun/dvtrun/engine"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store"
)

// newProjection is the store's SQL projection (store.ProjectionSQL) over
// sql/snowflake/projection.sql, each statement one request.
func (s *Store) newProjection() (store.ProjectionSQL, error) {
	q, err := sqlfiles.ProjectionOf(sqlfiles.Snowflake)
	return store.ProjectionSQL{Queries: q, Query: s.db.QueryContext, Events: s.scanEvents, GetRun: s.GetRun, Classify: s.classify}, err
}

// scanEvents yields the events of rows (the columns of list_events) and
// then rows.Err, if any.
func (s *Store) scanEvents(rows store.Rows) iter.Seq2[engine.RunEventRecord, error] {
	return func(yield func(engine.RunEventRecord, error) bool) {
		for rows.Next() {
			r, err := scanEvent(rows)
			if err != nil {
				yield(r, s.classify("read the event log", err))
				return
			}
			if !yield(r, nil) {
				return
			}
		}
		if err := rows.Err(); err != nil {
			yield(engine.RunEventRecord{}, s.classify("read the event log", err))
		}
	}
}
