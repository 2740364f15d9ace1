-- Statements of the Snowflake warehouse (store/snowflake/warehouse*.go), by
-- name. DDL and DML that name a relation or its columns are built in Go from
-- validated, quoted identifiers; everything with fixed text lives here.

-- name: relation_columns
-- A relation of the session's current database and schema: its type
-- ('BASE TABLE', 'VIEW', …) and its columns in order, one row per column
-- (INFORMATION_SCHEMA.TABLES lists tables and views, COLUMNS their columns;
-- names as stored: upper case for an unquoted one). No row: no relation.
SELECT t.TABLE_TYPE, c.COLUMN_NAME
FROM INFORMATION_SCHEMA.TABLES AS t
JOIN INFORMATION_SCHEMA.COLUMNS AS c
  ON c.TABLE_CATALOG = t.TABLE_CATALOG AND c.TABLE_SCHEMA = t.TABLE_SCHEMA AND c.TABLE_NAME = t.TABLE_NAME
WHERE t.TABLE_CATALOG = CURRENT_DATABASE() AND t.TABLE_SCHEMA = CURRENT_SCHEMA() AND t.TABLE_NAME = ?
ORDER BY c.ORDINAL_POSITION;
