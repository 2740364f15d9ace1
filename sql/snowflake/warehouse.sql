-- Statements of the Snowflake warehouse (store/snowflake/warehouse*.go), by
-- name. DDL and DML that name a relation or its columns are built in Go from
-- validated, quoted identifiers; everything with fixed text lives here.

-- name: relation_type
-- 'BASE TABLE', 'VIEW', … for a relation of the session's current database
-- and schema (INFORMATION_SCHEMA.TABLES lists tables and views; the name is
-- as stored: upper case for an unquoted one).
SELECT TABLE_TYPE FROM INFORMATION_SCHEMA.TABLES
WHERE TABLE_CATALOG = CURRENT_DATABASE() AND TABLE_SCHEMA = CURRENT_SCHEMA() AND TABLE_NAME = ?;
