-- dvtrun state store, Postgres dialect. Table and column names equal the
-- SQLite and Snowflake dialects': auditors query them. Timestamps are TEXT
-- in engine.TimeFormat (RFC 3339 UTC, nine fractional digits), as on
-- SQLite: Postgres's timestamptz keeps microseconds and the log keeps
-- producers' emittedAt to the nanosecond; the fixed width makes text order
-- time order, and `emitted_at::timestamptz` reads one as a time. Payloads
-- are json (not jsonb): the stored text is the appended text, byte for
-- byte, and the ->/->> operators still apply.

-- dvt_now() is the database's clock in engine.TimeFormat: claims and
-- expiries compare against it, never against a client's clock.
-- clock_timestamp(), not now(): a claim in a long transaction sees the time
-- it runs at.
CREATE FUNCTION dvt_now() RETURNS text LANGUAGE sql VOLATILE AS $$
    SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') || '000Z'
$$;

-- dvt_now_plus(seconds): the database's clock moved by a duration bound in
-- seconds (fractional), in engine.TimeFormat.
CREATE FUNCTION dvt_now_plus(seconds double precision) RETURNS text LANGUAGE sql VOLATILE AS $$
    SELECT to_char((clock_timestamp() + make_interval(secs => seconds)) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') || '000Z'
$$;

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
CREATE INDEX dvt_runs_created ON dvt_runs (created_at DESC, run_id);

-- The append authority: one row per run. An append locks it first (SELECT
-- ... FOR UPDATE), which serialises the writers of a run and only them.
-- status mirrors the run's derived status for Layer 2 transition checks.
CREATE TABLE dvt_run_seq (
    run_id   TEXT NOT NULL PRIMARY KEY,
    next_seq BIGINT NOT NULL,
    status   TEXT NOT NULL DEFAULT 'NONE'
);

-- Per-step state for Layer 2, maintained in the append transaction.
CREATE TABLE dvt_step_state (
    run_id             TEXT NOT NULL,
    step_id            TEXT NOT NULL,
    status             TEXT NOT NULL,
    logical_attempt_id BIGINT NOT NULL,
    PRIMARY KEY (run_id, step_id)
);

CREATE TABLE dvt_run_events (
    run_id             TEXT NOT NULL,
    run_seq            BIGINT NOT NULL,
    tenant_id          TEXT NOT NULL,
    project_id         TEXT NOT NULL,
    environment_id     TEXT NOT NULL,
    event_id           TEXT NOT NULL,
    event_type         TEXT NOT NULL,
    step_id            TEXT,
    plan_id            TEXT NOT NULL,
    plan_version       TEXT NOT NULL,
    logical_attempt_id BIGINT NOT NULL,
    engine_attempt_id  BIGINT NOT NULL,
    idempotency_key    TEXT NOT NULL,
    emitted_at         TEXT NOT NULL,
    persisted_at       TEXT NOT NULL,
    payload            JSON,
    PRIMARY KEY (run_id, run_seq)
);
CREATE UNIQUE INDEX dvt_run_events_idem ON dvt_run_events (run_id, idempotency_key);

-- Transactional outbox: one row per appended event, referencing it by
-- (run_id, run_seq). It does not copy the event.
CREATE TABLE dvt_outbox (
    run_id          TEXT NOT NULL,
    run_seq         BIGINT NOT NULL,
    state           TEXT NOT NULL DEFAULT 'PENDING', -- PENDING | DELIVERED | DEAD
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TEXT,
    last_error      TEXT,
    delivered_at    TEXT,
    PRIMARY KEY (run_id, run_seq)
);

-- EventIdRegistry (RunEvents §2.5.1): eventIds reserved before an append.
-- A finished run's rows are removed; from then on the event rows answer.
CREATE TABLE dvt_event_ids (
    run_id          TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    event_id        TEXT NOT NULL,
    reserved_at     TEXT NOT NULL,
    PRIMARY KEY (run_id, idempotency_key)
);

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
    payload        JSON,
    created_at     TEXT NOT NULL
);
CREATE INDEX dvt_alerts_run ON dvt_alerts (run_id, created_at);

-- Signals sent to a run by any process; the run's runner consumes them in
-- signal_seq order.
CREATE TABLE dvt_signals (
    run_id       TEXT NOT NULL,
    signal_seq   BIGINT NOT NULL,
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
