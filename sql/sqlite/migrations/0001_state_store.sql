-- dvtrun state store, SQLite dialect. Table and column names are part of the
-- product: auditors query them. Timestamps are TEXT in engine.TimeFormat
-- (RFC 3339 UTC, nine fractional digits) so text order is time order.

CREATE TABLE dvt_runs (
    run_id           TEXT NOT NULL PRIMARY KEY,
    tenant_id        TEXT NOT NULL,
    project_id       TEXT NOT NULL,
    environment_id   TEXT NOT NULL,
    plan_id          TEXT NOT NULL,
    plan_version     TEXT NOT NULL,
    plan_sha256      TEXT NOT NULL,
    target_adapter   TEXT NOT NULL,
    provider_run_ref TEXT,
    run_request_id   TEXT,
    created_at       TEXT NOT NULL
);
CREATE INDEX dvt_runs_scope ON dvt_runs (tenant_id, project_id, environment_id, created_at);

-- The append authority: one row per run. Updating it first serialises the
-- writers of a run. status mirrors the run's derived status for Layer 2
-- transition checks at append time.
CREATE TABLE dvt_run_seq (
    run_id   TEXT NOT NULL PRIMARY KEY,
    next_seq INTEGER NOT NULL,
    status   TEXT NOT NULL DEFAULT 'NONE'
) WITHOUT ROWID;

-- Per-step state for Layer 2, maintained in the append transaction.
CREATE TABLE dvt_step_state (
    run_id             TEXT NOT NULL,
    step_id            TEXT NOT NULL,
    status             TEXT NOT NULL,
    logical_attempt_id INTEGER NOT NULL,
    PRIMARY KEY (run_id, step_id)
) WITHOUT ROWID;

CREATE TABLE dvt_run_events (
    run_id             TEXT NOT NULL,
    run_seq            INTEGER NOT NULL,
    tenant_id          TEXT NOT NULL,
    project_id         TEXT NOT NULL,
    environment_id     TEXT NOT NULL,
    event_id           TEXT NOT NULL,
    event_type         TEXT NOT NULL,
    step_id            TEXT,
    plan_id            TEXT NOT NULL,
    plan_version       TEXT NOT NULL,
    logical_attempt_id INTEGER NOT NULL,
    engine_attempt_id  INTEGER NOT NULL,
    idempotency_key    TEXT NOT NULL,
    emitted_at         TEXT NOT NULL,
    persisted_at       TEXT NOT NULL,
    payload            TEXT,
    PRIMARY KEY (run_id, run_seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX dvt_run_events_idem ON dvt_run_events (run_id, idempotency_key);

-- Transactional outbox: one row per appended event, referencing it by
-- (run_id, run_seq). It does not copy the event.
CREATE TABLE dvt_outbox (
    run_id          TEXT NOT NULL,
    run_seq         INTEGER NOT NULL,
    state           TEXT NOT NULL DEFAULT 'PENDING', -- PENDING | DELIVERED | DEAD
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TEXT,
    last_error      TEXT,
    delivered_at    TEXT,
    PRIMARY KEY (run_id, run_seq)
) WITHOUT ROWID;

-- EventIdRegistry (RunEvents §2.5.1): eventIds reserved before an append.
-- A row is removed when its event is persisted; from then on the event row
-- itself answers for the key.
CREATE TABLE dvt_event_ids (
    run_id          TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    event_id        TEXT NOT NULL,
    reserved_at     TEXT NOT NULL,
    PRIMARY KEY (run_id, idempotency_key)
) WITHOUT ROWID;

-- Alerts, idempotent on alert_key (e.g. INVALID_TRANSITION:<runId>:<eventId>).
CREATE TABLE dvt_alerts (
    alert_key      TEXT NOT NULL PRIMARY KEY,
    code           TEXT NOT NULL,
    severity       TEXT NOT NULL,
    run_id         TEXT,
    tenant_id      TEXT,
    project_id     TEXT,
    environment_id TEXT,
    message        TEXT NOT NULL,
    payload        TEXT,
    created_at     TEXT NOT NULL
);
CREATE INDEX dvt_alerts_run ON dvt_alerts (run_id, created_at);

-- Signals sent to a run by any process; the run's runner consumes them in
-- signal_seq order.
CREATE TABLE dvt_signals (
    run_id       TEXT NOT NULL,
    signal_seq   INTEGER NOT NULL,
    signal_id    TEXT NOT NULL UNIQUE,
    signal_type  TEXT NOT NULL, -- PAUSE | RESUME | CANCEL | RETRY_STEP
    step_id      TEXT,
    reason       TEXT,
    requested_by TEXT,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (run_id, signal_seq)
);

-- Run leases: the runner holding an unexpired lease owns the run.
CREATE TABLE dvt_leases (
    run_id       TEXT NOT NULL PRIMARY KEY,
    owner        TEXT NOT NULL,
    acquired_at  TEXT NOT NULL,
    expires_at   TEXT NOT NULL
);
