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

-- name: create_step_ledger
-- The step ledger (issue 8): one row per (run, step, logical attempt) whose
-- work committed, written in the step's own transaction; the primary key
-- admits one commit. result is the StepResult as JSON, fence the lease
-- fence of the runner that committed it.
CREATE TABLE IF NOT EXISTS dvt_step_ledger (
    run_id          TEXT NOT NULL,
    step_id         TEXT NOT NULL,
    logical_attempt INTEGER NOT NULL,
    engine_attempt  INTEGER NOT NULL,
    fence           INTEGER NOT NULL,
    result          TEXT NOT NULL,
    committed_at    TEXT NOT NULL,
    PRIMARY KEY (run_id, step_id, logical_attempt)
);

-- name: create_run_fences
-- The highest lease fence that committed work for a run in this warehouse:
-- a runner that was taken over cannot commit after its successor did.
CREATE TABLE IF NOT EXISTS dvt_run_fences (
    run_id TEXT NOT NULL PRIMARY KEY,
    fence  INTEGER NOT NULL
);

-- name: claim_fence
-- No row changed: a higher fence has committed for the run (LEASE_LOST).
INSERT INTO dvt_run_fences (run_id, fence) VALUES (?, ?)
ON CONFLICT (run_id) DO UPDATE SET fence = excluded.fence WHERE excluded.fence >= dvt_run_fences.fence;

-- name: ledger_exists
SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'dvt_step_ledger';

-- name: ledger_entry
SELECT engine_attempt, fence, result, committed_at FROM dvt_step_ledger
WHERE run_id = ? AND step_id = ? AND logical_attempt = ?;

-- name: insert_ledger
INSERT INTO dvt_step_ledger (run_id, step_id, logical_attempt, engine_attempt, fence, result, committed_at)
VALUES (?, ?, ?, ?, ?, ?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));
