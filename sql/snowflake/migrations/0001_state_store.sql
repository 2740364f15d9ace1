-- dvtrun state store, Snowflake dialect. Table and column names equal the
-- SQLite dialect's: auditors query them. Timestamps are TIMESTAMP_TZ(9)
-- written in UTC; payloads are VARIANT.
--
-- Snowflake does not enforce PRIMARY KEY or UNIQUE on standard tables, so
-- none is declared: the uniqueness the SQLite schema gets from its indexes
-- ((run_id, run_seq) and (run_id, idempotency_key) of dvt_run_events, one
-- dvt_run_seq row per run…) is kept by the store, which deduplicates in Go
-- and writes under the run's dvt_run_seq row lock. Statements are separated
-- by a semicolon at the end of a line; each runs on its own.

CREATE TABLE IF NOT EXISTS dvt_runs (
    run_id           VARCHAR NOT NULL,
    tenant_id        VARCHAR NOT NULL,
    project_id       VARCHAR NOT NULL,
    environment_id   VARCHAR NOT NULL,
    plan_id          VARCHAR NOT NULL,
    plan_version     VARCHAR NOT NULL,
    plan_sha256      VARCHAR NOT NULL,
    target_adapter   VARCHAR NOT NULL,
    provider_run_ref VARCHAR,
    run_request_id   VARCHAR,
    created_at       TIMESTAMP_TZ(9) NOT NULL
);

-- The append authority: one row per run. Updating it first serialises the
-- writers of a run. status mirrors the run's derived status for Layer 2;
-- last_persisted_at keeps persisted_at monotonic in run_seq order even when
-- writers' clocks disagree.
CREATE TABLE IF NOT EXISTS dvt_run_seq (
    run_id            VARCHAR NOT NULL,
    next_seq          NUMBER(38, 0) NOT NULL,
    status            VARCHAR NOT NULL DEFAULT 'NONE',
    last_persisted_at TIMESTAMP_TZ(9)
);

-- Per-step state for Layer 2, maintained in the append transaction.
CREATE TABLE IF NOT EXISTS dvt_step_state (
    run_id             VARCHAR NOT NULL,
    step_id            VARCHAR NOT NULL,
    status             VARCHAR NOT NULL,
    logical_attempt_id NUMBER(38, 0) NOT NULL
);

CREATE TABLE IF NOT EXISTS dvt_run_events (
    run_id             VARCHAR NOT NULL,
    run_seq            NUMBER(38, 0) NOT NULL,
    tenant_id          VARCHAR NOT NULL,
    project_id         VARCHAR NOT NULL,
    environment_id     VARCHAR NOT NULL,
    event_id           VARCHAR NOT NULL,
    event_type         VARCHAR NOT NULL,
    step_id            VARCHAR,
    plan_id            VARCHAR NOT NULL,
    plan_version       VARCHAR NOT NULL,
    logical_attempt_id NUMBER(38, 0) NOT NULL,
    engine_attempt_id  NUMBER(38, 0) NOT NULL,
    idempotency_key    VARCHAR NOT NULL,
    emitted_at         TIMESTAMP_TZ(9) NOT NULL,
    persisted_at       TIMESTAMP_TZ(9) NOT NULL,
    payload            VARIANT
);

-- Transactional outbox: one row per appended event, referencing it by
-- (run_id, run_seq). It does not copy the event.
CREATE TABLE IF NOT EXISTS dvt_outbox (
    run_id          VARCHAR NOT NULL,
    run_seq         NUMBER(38, 0) NOT NULL,
    state           VARCHAR NOT NULL DEFAULT 'PENDING',
    attempts        NUMBER(38, 0) NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMP_TZ(9),
    last_error      VARCHAR,
    delivered_at    TIMESTAMP_TZ(9)
);

-- EventIdRegistry (RunEvents §2.5.1): eventIds reserved before an append.
CREATE TABLE IF NOT EXISTS dvt_event_ids (
    run_id          VARCHAR NOT NULL,
    idempotency_key VARCHAR NOT NULL,
    event_id        VARCHAR NOT NULL,
    reserved_at     TIMESTAMP_TZ(9) NOT NULL
);

-- Alerts, idempotent on alert_key (e.g. INVALID_TRANSITION:<runId>:<eventId>).
CREATE TABLE IF NOT EXISTS dvt_alerts (
    alert_key      VARCHAR NOT NULL,
    code           VARCHAR NOT NULL,
    severity       VARCHAR NOT NULL,
    run_id         VARCHAR,
    tenant_id      VARCHAR,
    project_id     VARCHAR,
    environment_id VARCHAR,
    message        VARCHAR NOT NULL,
    payload        VARIANT,
    created_at     TIMESTAMP_TZ(9) NOT NULL
);

-- Signals sent to a run by any process, consumed in signal_seq order.
CREATE TABLE IF NOT EXISTS dvt_signals (
    run_id       VARCHAR NOT NULL,
    signal_seq   NUMBER(38, 0) NOT NULL,
    signal_id    VARCHAR NOT NULL,
    signal_type  VARCHAR NOT NULL,
    step_id      VARCHAR,
    reason       VARCHAR,
    requested_by VARCHAR,
    created_at   TIMESTAMP_TZ(9) NOT NULL
);

-- Run leases: the runner holding an unexpired lease owns the run.
CREATE TABLE IF NOT EXISTS dvt_leases (
    run_id      VARCHAR NOT NULL,
    owner       VARCHAR NOT NULL,
    acquired_at TIMESTAMP_TZ(9) NOT NULL,
    expires_at  TIMESTAMP_TZ(9) NOT NULL
);
