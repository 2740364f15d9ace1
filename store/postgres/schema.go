package postgres

import (
	"context"
	"database/sql"

	sqlfiles "github.com/dvtrun/dvtrun/sql"
)

// createSearchPathSchema creates the schema the session's search_path names
// first when it does not exist (sql/postgres/schema.sql), so that a store
// or a warehouse given a schema of its own (search_path=dvt_state) builds
// there from the first command. Store and warehouse opening at once queue
// on an advisory lock. The role needs CREATE on the database for it, as
// the warehouse does for the schemas of qualified relations.
func createSearchPathSchema(ctx context.Context, db *sql.DB) error {
	q, err := sqlfiles.Queries(sqlfiles.Postgres, "schema.sql")
	if err != nil {
		return err
	}
	var name sql.NullString
	if err := db.QueryRowContext(ctx, q["missing_schema"]).Scan(&name); err != nil || !name.Valid {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	if _, err := tx.ExecContext(ctx, q["schema_lock"]); err != nil {
		return err
	}
	// A quoted identifier, never text spliced unquoted (quoteIdent).
	if _, err := tx.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+quoteIdent(name.String)); err != nil {
		return err
	}
	return tx.Commit()
}
