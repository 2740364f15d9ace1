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

-- The step ledger (issue 8). A sql step whose statements are all DML runs in one explicit transaction:
--   BEGIN; claim_fence; ledger_entry; <the step's DML>; insert_ledger; COMMIT
-- claim_fence is an UPDATE, and Snowflake holds an UPDATE's table lock until
-- COMMIT, so the ledgered steps of a warehouse run one at a time from there
-- on; every later statement starts after the previous holder committed and,
-- under READ COMMITTED, sees its ledger row. Snowflake enforces no PRIMARY
-- KEY, so insert_ledger is a conditional MERGE: zero rows inserted means the
-- attempt committed already and the transaction is rolled back.

-- name: create_step_ledger
CREATE TABLE IF NOT EXISTS dvt_step_ledger (
    run_id          VARCHAR NOT NULL,
    step_id         VARCHAR NOT NULL,
    logical_attempt BIGINT NOT NULL,
    engine_attempt  BIGINT NOT NULL,
    fence           BIGINT NOT NULL,
    result          VARCHAR NOT NULL,
    committed_at    TIMESTAMP_TZ(9) NOT NULL
);

-- name: create_run_fences
CREATE TABLE IF NOT EXISTS dvt_run_fences (
    run_id VARCHAR NOT NULL,
    fence  BIGINT NOT NULL
);

-- name: ensure_fence_row
-- Outside the transaction (autocommit): the run's fence row exists before
-- claim_fence locks it. Two first-time runners may both insert one; the
-- rows of a run are always updated together, so a duplicate is harmless.
INSERT INTO dvt_run_fences (run_id, fence)
SELECT ?, 0 WHERE NOT EXISTS (SELECT 1 FROM dvt_run_fences WHERE run_id = ?);

-- name: claim_fence
-- Zero rows updated: a runner with a higher fence committed work for the
-- run (LEASE_LOST).
UPDATE dvt_run_fences SET fence = ? WHERE run_id = ? AND fence <= ?;

-- name: ledger_entry
SELECT engine_attempt, fence, result, committed_at FROM dvt_step_ledger
WHERE run_id = ? AND step_id = ? AND logical_attempt = ?;

-- name: insert_ledger
MERGE INTO dvt_step_ledger t
USING (
    SELECT CAST(? AS VARCHAR) AS run_id, CAST(? AS VARCHAR) AS step_id, CAST(? AS BIGINT) AS logical_attempt,
           CAST(? AS BIGINT) AS engine_attempt, CAST(? AS BIGINT) AS fence, CAST(? AS VARCHAR) AS result
) s
ON t.run_id = s.run_id AND t.step_id = s.step_id AND t.logical_attempt = s.logical_attempt
WHEN NOT MATCHED THEN INSERT (run_id, step_id, logical_attempt, engine_attempt, fence, result, committed_at)
    VALUES (s.run_id, s.step_id, s.logical_attempt, s.engine_attempt, s.fence, s.result, CURRENT_TIMESTAMP());
