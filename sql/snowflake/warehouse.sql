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

-- The step ledger (issue 8). A sql step whose statements are all DML runs in
-- one explicit transaction:
--   BEGIN; claim_fence; ledger_entry; <the step's DML>; insert_ledger; COMMIT
-- claim_fence is an UPDATE of the run's own fence table (issue 16): Snowflake
-- holds an UPDATE's table lock until COMMIT, so the ledgered steps of one run
-- run one at a time from there on, and every later statement starts after the
-- previous holder committed and, under READ COMMITTED, sees its ledger row.
-- The lock is per run: a transaction a dead runner left open blocks its own
-- run only (until the taker aborts it), never the steps of other runs.
-- Snowflake enforces no PRIMARY KEY, so insert_ledger inserts only when no
-- row of the attempt exists: zero rows inserted means the attempt committed
-- already and the transaction is rolled back. It is an INSERT … SELECT, not
-- a MERGE, because a MERGE would lock dvt_step_ledger, which all runs share;
-- INSERTs do not lock each other, and the run's fence lock already
-- serialises the only writers of the run's rows.
--
-- A run's fence table is named DVT_FENCE_<hex of sha256(run id), 16 digits>
-- (in Go, where the statements below get it quoted): two runs that met on one name would share
-- a lock, never a fence, since each row is a run's. Its row is created
-- outside the transaction once per run and process; its first fence is the
-- run's in the shared dvt_run_fences of earlier versions, when it has one.

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

-- name: create_run_fence
CREATE TABLE IF NOT EXISTS {{ this }} (
    run_id VARCHAR NOT NULL,
    fence  BIGINT NOT NULL
);

-- name: ensure_fence_row
-- Outside the transaction (autocommit): the run's fence row exists before
-- claim_fence locks it. Two first-time runners may both insert one; the
-- rows of a run are always updated together, so a duplicate is harmless.
-- Binds: run id, first fence, run id.
INSERT INTO {{ this }} (run_id, fence)
SELECT ?, ? WHERE NOT EXISTS (SELECT 1 FROM {{ this }} WHERE run_id = ?);

-- name: claim_fence
-- Zero rows updated: a runner with a higher fence committed work for the
-- run, or the run has ended and its fence was closed (LEASE_LOST).
-- Binds: fence, run id, fence, run id.
UPDATE {{ this }} SET fence = ? WHERE run_id = ? AND fence <= ?
  AND NOT EXISTS (SELECT 1 FROM dvt_closed_fences WHERE run_id = ?);

-- Closing a run's fence (issue 26). A fence table per run was kept for
-- good: one table per run with a ledgered step, thousands a year. The
-- runner that stored a run's end (RunCompleted, RunFailed, RunCancelled)
-- closes its fence: close_fence records the run in dvt_closed_fences, then
-- drops the run's table. The objects dvtrun keeps in the schema are then
-- dvt_step_ledger, dvt_closed_fences and the fence tables of the runs in
-- flight (plus those of runs whose runner died before their end, which
-- `dvtrun warehouse cleanup` removes once the run has ended).
--
-- Why a dropped fence does not let a stale runner write: the dropped
-- table's row was the run's high-water fence, and a runner that meets no
-- table makes a new one whose fence starts at 0, so the table alone would
-- let any stale runner claim it again. The record in dvt_closed_fences is
-- the tombstone that outlives the table: claim_fence succeeds only when no
-- such record exists. A stale claim either
--   - ran before the record committed: it is a claim made before the run
--     was closed, which the fence alone decided, as before;
--   - started after the record committed, on the old table or on one it
--     made anew after the drop: NOT EXISTS sees the record, zero rows,
--     LEASE_LOST, nothing written;
--   - finds the table gone under a fence it had cached: the claim fails on
--     the missing table, nothing written, and the record is consulted.
-- The record is written before the table is dropped, in one request whose
-- statements run in order and stop at the first failure. A run's end is
-- final (terminal states are immutable), so a closed run needs no later
-- fence: every claim of it is refused. dvt_closed_fences is only INSERTed
-- to (never UPDATEd or MERGEd), so writers never lock each other on it.

-- name: create_closed_fences
CREATE TABLE IF NOT EXISTS dvt_closed_fences (
    run_id    VARCHAR NOT NULL,
    fence     BIGINT NOT NULL,
    closed_at TIMESTAMP_TZ(9) NOT NULL
);

-- name: close_fence
-- One request of two statements (values as hex literals: no binds in a
-- multi-statement request); {{ this }} is the run's fence table.
INSERT INTO dvt_closed_fences (run_id, fence, closed_at)
SELECT HEX_DECODE_STRING(/*:run*/), /*:fence*/, CURRENT_TIMESTAMP()
WHERE NOT EXISTS (SELECT 1 FROM dvt_closed_fences WHERE run_id = HEX_DECODE_STRING(/*:run*/));
DROP TABLE IF EXISTS {{ this }};

-- name: drop_fence
-- A closed run's table that a stale runner made anew before its claim was
-- refused.
DROP TABLE IF EXISTS {{ this }};

-- name: fence_closed
-- Whether the run's fence was closed (asked only when a claim is refused).
SELECT COUNT(*) FROM dvt_closed_fences WHERE run_id = ?;

-- name: fence_tables
-- The fence tables in the session's schema, for `dvtrun warehouse
-- cleanup` (names as stored; the Go side keeps only DVT_FENCE_ and 16 hex
-- digits).
SELECT TABLE_NAME FROM INFORMATION_SCHEMA.TABLES
WHERE TABLE_CATALOG = CURRENT_DATABASE() AND TABLE_SCHEMA = CURRENT_SCHEMA()
  AND SUBSTR(UPPER(TABLE_NAME), 1, 10) = 'DVT_FENCE_'
ORDER BY TABLE_NAME;

-- name: legacy_fence_runs
-- The runs in the shared dvt_run_fences of versions before issue 16, for
-- `dvtrun warehouse cleanup`.
SELECT DISTINCT run_id FROM dvt_run_fences ORDER BY run_id;

-- name: remove_legacy_fences
-- Once every run it names has ended: their fences closed (the tombstones
-- a stale runner of theirs meets), then the shared table dropped. One
-- request; the statements stop at the first failure.
INSERT INTO dvt_closed_fences (run_id, fence, closed_at)
SELECT run_id, MAX(fence), CURRENT_TIMESTAMP() FROM dvt_run_fences
WHERE run_id NOT IN (SELECT run_id FROM dvt_closed_fences)
GROUP BY run_id;
DROP TABLE IF EXISTS dvt_run_fences;

-- name: fence_rows
-- The run (and its fence) a fence table belongs to.
SELECT run_id, MAX(fence) FROM {{ this }} GROUP BY run_id;

-- name: legacy_fences_exist
-- Whether the table all runs shared before issue 16 is there (asked once
-- per process; a warehouse set up since never has it). UPPER: the test
-- server stores an unquoted name as written, Snowflake upper-cased.
SELECT COUNT(*) FROM INFORMATION_SCHEMA.TABLES
WHERE TABLE_CATALOG = CURRENT_DATABASE() AND TABLE_SCHEMA = CURRENT_SCHEMA() AND UPPER(TABLE_NAME) = 'DVT_RUN_FENCES';

-- name: legacy_fence
-- The run's fence in that table (a run in flight across the upgrade);
-- NULL: none.
SELECT MAX(fence) FROM dvt_run_fences WHERE run_id = ?;

-- name: raise_legacy_fence
-- Fences off a runner of an earlier version of the same run, which still
-- claims the shared table: autocommit, once per run and process, only for
-- a run that has a row there.
UPDATE dvt_run_fences SET fence = ? WHERE run_id = ? AND fence < ?;

-- name: ledger_entry
SELECT engine_attempt, fence, result, committed_at FROM dvt_step_ledger
WHERE run_id = ? AND step_id = ? AND logical_attempt = ?;

-- name: insert_ledger
INSERT INTO dvt_step_ledger (run_id, step_id, logical_attempt, engine_attempt, fence, result, committed_at)
SELECT CAST(? AS VARCHAR), CAST(? AS VARCHAR), CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS VARCHAR), CURRENT_TIMESTAMP()
WHERE NOT EXISTS (
    SELECT 1 FROM dvt_step_ledger WHERE run_id = ? AND step_id = ? AND logical_attempt = ?
);

-- name: current_schema
-- Where the fence tables are: SHOW LOCKS names a table DB.SCHEMA.TABLE.
SELECT CURRENT_DATABASE(), CURRENT_SCHEMA();
