-- The run queue (ExecutionSemantics §3), worker heartbeats and schedule
-- cursors; the same tables as the SQLite dialect. Snowflake enforces no
-- UNIQUE key: the store keeps idem_key and schedule_name unique by writing
-- under the 'queue' lock row. Times compared by claims are the database's
-- CURRENT_TIMESTAMP().

CREATE TABLE IF NOT EXISTS dvt_run_requests (
    request_id     VARCHAR NOT NULL,
    idem_key       VARCHAR NOT NULL,
    tenant_id      VARCHAR NOT NULL,
    project_id     VARCHAR NOT NULL,
    environment_id VARCHAR NOT NULL,
    plan_id        VARCHAR NOT NULL,
    plan_version   VARCHAR NOT NULL,
    run_request_id VARCHAR NOT NULL,
    plan_path      VARCHAR NOT NULL,
    plan_sha256    VARCHAR NOT NULL,
    priority       NUMBER(38, 0) NOT NULL,
    not_before     TIMESTAMP_TZ(9) NOT NULL,
    schedule_name  VARCHAR,
    serial         NUMBER(38, 0) NOT NULL,
    state          VARCHAR NOT NULL,
    owner          VARCHAR,
    run_id         VARCHAR,
    outcome        VARCHAR,
    enqueue_seq    NUMBER(38, 0) NOT NULL,
    version        NUMBER(38, 0) NOT NULL,
    attempts       NUMBER(38, 0) NOT NULL,
    enqueued_at    TIMESTAMP_TZ(9) NOT NULL,
    claimed_at     TIMESTAMP_TZ(9),
    finished_at    TIMESTAMP_TZ(9)
);

CREATE TABLE IF NOT EXISTS dvt_workers (
    worker_id    VARCHAR NOT NULL,
    started_at   TIMESTAMP_TZ(9) NOT NULL,
    heartbeat_at TIMESTAMP_TZ(9) NOT NULL,
    expires_at   TIMESTAMP_TZ(9) NOT NULL
);

CREATE TABLE IF NOT EXISTS dvt_schedule_cursors (
    schedule_name   VARCHAR NOT NULL,
    next_tick       TIMESTAMP_TZ(9) NOT NULL,
    version         NUMBER(38, 0) NOT NULL,
    last_tick       TIMESTAMP_TZ(9),
    last_request_id VARCHAR,
    fired_total     NUMBER(38, 0) NOT NULL,
    missed_total    NUMBER(38, 0) NOT NULL,
    skipped_total   NUMBER(38, 0) NOT NULL,
    updated_at      TIMESTAMP_TZ(9) NOT NULL
);

-- Re-run safely by a process that takes over the migration lease of one
-- killed after this statement, before the version was recorded.
INSERT INTO dvt_locks (lock_name) SELECT 'queue' WHERE NOT EXISTS (SELECT 1 FROM dvt_locks WHERE lock_name = 'queue');
