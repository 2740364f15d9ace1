-- Statements of the Postgres warehouse (store/postgres/warehouse*.go), by
-- name. DDL and DML that name a relation or its columns are built in Go from
-- validated, quoted identifiers; everything with fixed text lives here.
--
-- Every step is one transaction on one session:
--   BEGIN; step_session; [claim_fence; ledger_entry;] <the step's work>;
--   [insert_ledger;] COMMIT
-- Postgres DDL is transactional, so the ledger row commits with a CREATE
-- TABLE … AS as it does with an INSERT: a step's work and its ledger row
-- take effect together or not at all, whatever the step's kind.

-- name: create_ledger
-- At open, under a transaction-level advisory lock: concurrent CREATE TABLE
-- IF NOT EXISTS of one name can fail on the catalog's unique index.
-- The step ledger (issue 8): one row per (run, step, logical attempt) whose
-- work committed, written in the step's own transaction; the primary key
-- admits one commit. result is the StepResult as JSON, fence the lease
-- fence of the runner that committed it. dvt_run_fences holds, per run,
-- the highest fence that committed work here.
SELECT pg_advisory_xact_lock(hashtext('dvtrun.warehouse.ledger'));
CREATE TABLE IF NOT EXISTS dvt_step_ledger (
    run_id          TEXT NOT NULL,
    step_id         TEXT NOT NULL,
    logical_attempt INTEGER NOT NULL,
    engine_attempt  INTEGER NOT NULL,
    fence           BIGINT NOT NULL,
    result          TEXT NOT NULL,
    committed_at    TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (run_id, step_id, logical_attempt)
);
CREATE TABLE IF NOT EXISTS dvt_run_fences (
    run_id TEXT NOT NULL PRIMARY KEY,
    fence  BIGINT NOT NULL
);

-- name: server_version
SELECT current_setting('server_version_num')::int, current_schema();

-- name: step_session
-- The step's session settings, for its transaction only (set_config's third
-- argument): application_name names the run and step in pg_stat_activity
-- and the server log (as QUERY_TAG does on Snowflake); statement_timeout is
-- what is left of the step's deadline ('' keeps the session's), so the
-- server stops the statement even when the client is gone. Also returns
-- the schema unqualified relations are built in.
SELECT set_config('application_name', $1, true),
       set_config('statement_timeout', CASE WHEN $2 = '' THEN current_setting('statement_timeout') ELSE $2 END, true),
       current_schema();

-- name: lock_relation
-- Builders of one relation (two runs, two runners of one run) take turns:
-- dropping and renaming a relation another transaction is replacing fails
-- with "tuple concurrently updated" instead of waiting. Bounded by
-- lock_timeout like any lock wait.
SELECT pg_advisory_xact_lock(hashtext('dvtrun.relation'), hashtext($1));

-- name: lock_attempt
-- Runners of one step attempt take turns: the second sees the first's
-- ledger row once it commits, instead of repeating its work.
SELECT pg_advisory_xact_lock(hashtext('dvtrun.attempt'), hashtext($1));

-- name: schema_exists
SELECT to_regnamespace($1) IS NOT NULL;

-- name: relation_kind
-- The relation's kind in schema $1: r table, p partitioned table, v view,
-- m materialized view (no row: none). Its column names and types, in
-- order, as JSON arrays of text, for replace and merge.
SELECT c.relkind::text, c.oid::bigint,
       coalesce(json_agg(a.attname::text ORDER BY a.attnum) FILTER (WHERE a.attnum > 0), '[]')::text,
       coalesce(json_agg(format_type(a.atttypid, a.atttypmod) ORDER BY a.attnum) FILTER (WHERE a.attnum > 0), '[]')::text
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE n.nspname = $1 AND c.relname = $2
GROUP BY c.relkind, c.oid;

-- name: dependent_views
-- Views (other than the relation's own rule) that read relation $1: what
-- replacing a table by swap would drop with it.
SELECT count(DISTINCT r.ev_class)
FROM pg_depend d
JOIN pg_rewrite r ON r.oid = d.objid
WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass
  AND d.refobjid = $1::oid AND r.ev_class <> $1::oid;

-- name: claim_fence_row
-- The run's fence row exists; DO NOTHING takes no lock on an existing row.
INSERT INTO dvt_run_fences (run_id, fence) VALUES ($1, $2) ON CONFLICT (run_id) DO NOTHING;

-- name: raise_fence
-- A runner with a higher fence than recorded raises it: this waits for the
-- transactions of older runners that hold the row (claim_fence), so their
-- commits come first, and from then on they are refused.
UPDATE dvt_run_fences SET fence = $2 WHERE run_id = $1 AND fence < $2;

-- name: claim_fence
-- The run's recorded fence, with a share lock held to commit: steps of one
-- runner run side by side; a successor's raise_fence waits for them. Above
-- this runner's fence: LEASE_LOST.
SELECT fence FROM dvt_run_fences WHERE run_id = $1 FOR SHARE;

-- name: ledger_entry
SELECT engine_attempt, fence, result, committed_at FROM dvt_step_ledger
WHERE run_id = $1 AND step_id = $2 AND logical_attempt = $3;

-- name: insert_ledger
INSERT INTO dvt_step_ledger (run_id, step_id, logical_attempt, engine_attempt, fence, result)
VALUES ($1, $2, $3, $4, $5, $6);
