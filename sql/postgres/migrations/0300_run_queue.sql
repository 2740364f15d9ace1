-- The run queue (ExecutionSemantics §3), worker heartbeats and schedule
-- cursors. Times compared by claims (not_before, expires_at) are written by
-- the database's own clock in engine.TimeFormat, so text order is time order.

CREATE TABLE dvt_run_requests (
    request_id     TEXT NOT NULL PRIMARY KEY,
    idem_key       TEXT NOT NULL, -- SHA256(tenant|project|environment|planId|planVersion|runRequestId)
    tenant_id      TEXT NOT NULL,
    project_id     TEXT NOT NULL,
    environment_id TEXT NOT NULL,
    plan_id        TEXT NOT NULL,
    plan_version   TEXT NOT NULL,
    run_request_id TEXT NOT NULL,
    plan_path      TEXT NOT NULL,
    plan_sha256    TEXT NOT NULL,
    priority       INTEGER NOT NULL DEFAULT 0,
    not_before     TEXT NOT NULL,
    schedule_name  TEXT,
    serial         INTEGER NOT NULL DEFAULT 0,
    state          TEXT NOT NULL, -- PENDING | CLAIMED | RUNNING | DONE | CANCELLED
    owner          TEXT,
    run_id         TEXT,
    outcome        TEXT,
    enqueue_seq    BIGINT  NOT NULL,
    version        BIGINT  NOT NULL DEFAULT 1,
    attempts       INTEGER NOT NULL DEFAULT 0,
    enqueued_at    TEXT NOT NULL,
    claimed_at     TEXT,
    finished_at    TEXT
);
CREATE UNIQUE INDEX dvt_run_requests_key ON dvt_run_requests (tenant_id, project_id, environment_id, plan_id, plan_version, run_request_id);
CREATE UNIQUE INDEX dvt_run_requests_idem ON dvt_run_requests (idem_key);
CREATE INDEX dvt_run_requests_state ON dvt_run_requests (state, priority, enqueue_seq);

-- One heartbeat row per worker process; a claim is live while its owner's
-- row has not expired.
CREATE TABLE dvt_workers (
    worker_id    TEXT NOT NULL PRIMARY KEY,
    started_at   TEXT NOT NULL,
    heartbeat_at TEXT NOT NULL,
    expires_at   TEXT NOT NULL
);

-- One cursor per schedule: the next tick to fire. Replicas advance it with
-- UPDATE ... WHERE version = ?; the winner enqueues the tick's request in
-- the same transaction.
CREATE TABLE dvt_schedule_cursors (
    schedule_name   TEXT NOT NULL PRIMARY KEY,
    next_tick       TEXT NOT NULL,
    version         INTEGER NOT NULL,
    last_tick       TEXT,
    last_request_id TEXT,
    fired_total     INTEGER NOT NULL DEFAULT 0,
    missed_total    INTEGER NOT NULL DEFAULT 0,
    skipped_total   INTEGER NOT NULL DEFAULT 0,
    updated_at      TEXT NOT NULL
);
