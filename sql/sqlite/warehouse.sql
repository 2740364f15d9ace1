-- Statements of the SQLite warehouse (store/sqlite/warehouse.go), by name.
-- The warehouse is a separate database from the state store. DDL that names
-- a relation (CREATE/DROP/ALTER) is built in Go from validated, quoted
-- identifiers; everything with fixed text lives here.

-- name: relation_type
-- SQLite identifiers are case-insensitive, so is the lookup.
SELECT type FROM sqlite_master
WHERE type IN ('table', 'view') AND name = ? COLLATE NOCASE;

-- name: schema_probe
-- Reading the schema is what surfaces "file is not a database".
SELECT count(*) FROM sqlite_master;

-- name: total_changes
-- Rows inserted, updated or deleted on this connection so far; the
-- difference around a sql step is its RowsAffected (changes() would report
-- a stale count after a DDL statement).
SELECT total_changes();
