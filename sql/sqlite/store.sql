-- Statements of the SQLite state store (store/sqlite), by name. Values are
-- always bound parameters; the only SQL built in Go is the list of ?
-- placeholders of an IN (...) clause.

-- name: run_exists
SELECT 1 FROM dvt_runs WHERE run_id = ?;

-- name: insert_run
INSERT INTO dvt_runs (run_id, tenant_id, project_id, environment_id, plan_id, plan_version,
                      plan_sha256, target_adapter, provider_run_ref, run_request_id, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: insert_seq
INSERT INTO dvt_run_seq (run_id, next_seq, status) VALUES (?, 1, 'NONE');

-- name: lock_seq
-- Under BEGIN IMMEDIATE the database write lock is already ours, so no other
-- writer can touch the run's sequence row until we commit: a plain read is
-- enough here (Snowflake has no such lock and updates the row first).
SELECT s.next_seq, s.status, r.tenant_id, r.project_id, r.environment_id, r.plan_id, r.plan_version,
       s.last_hash
FROM dvt_run_seq s JOIN dvt_runs r ON r.run_id = s.run_id
WHERE s.run_id = ?;

-- name: update_seq
-- last_hash is the hash chain's head (issue 19), advanced with next_seq.
UPDATE dvt_run_seq SET next_seq = ?, status = ?, last_hash = ? WHERE run_id = ?;

-- name: existing_event
SELECT run_id, run_seq, tenant_id, project_id, environment_id, event_id, event_type, step_id,
       plan_id, plan_version, logical_attempt_id, engine_attempt_id, idempotency_key,
       emitted_at, persisted_at, payload
FROM dvt_run_events
WHERE run_id = ? AND idempotency_key = ?;

-- name: step_state
SELECT step_id, status, logical_attempt_id FROM dvt_step_state WHERE run_id = ? AND step_id = ?;

-- name: step_states
SELECT step_id, status, logical_attempt_id FROM dvt_step_state
WHERE run_id = ? AND step_id IN (/*steps*/);

-- name: upsert_step_state
INSERT INTO dvt_step_state (run_id, step_id, status, logical_attempt_id) VALUES (?, ?, ?, ?)
ON CONFLICT (run_id, step_id) DO UPDATE SET status = excluded.status,
                                            logical_attempt_id = excluded.logical_attempt_id;

-- name: insert_event
INSERT INTO dvt_run_events (run_id, run_seq, tenant_id, project_id, environment_id, event_id,
                            event_type, step_id, plan_id, plan_version, logical_attempt_id,
                            engine_attempt_id, idempotency_key, emitted_at, persisted_at, payload,
                            prev_hash, hash, payload_sha256)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (run_id, idempotency_key) DO NOTHING;

-- name: insert_outbox
INSERT INTO dvt_outbox (run_id, run_seq) VALUES (?, ?);

-- name: forget_run_reservations
DELETE FROM dvt_event_ids WHERE run_id = ?;

-- name: list_step_events
-- One step's events (the console's step page): the run's rows are read
-- by its key, only the step's are returned.
SELECT run_id, run_seq, tenant_id, project_id, environment_id, event_id, event_type, step_id,
       plan_id, plan_version, logical_attempt_id, engine_attempt_id, idempotency_key,
       emitted_at, persisted_at, payload
FROM dvt_run_events
WHERE run_id = ? AND step_id = ?
ORDER BY run_seq;

-- name: list_events
SELECT run_id, run_seq, tenant_id, project_id, environment_id, event_id, event_type, step_id,
       plan_id, plan_version, logical_attempt_id, engine_attempt_id, idempotency_key,
       emitted_at, persisted_at, payload
FROM dvt_run_events
WHERE run_id = ? AND run_seq > ?
ORDER BY run_seq
LIMIT ?;

-- name: get_run
SELECT run_id, tenant_id, project_id, environment_id, plan_id, plan_version, plan_sha256,
       target_adapter, COALESCE(provider_run_ref, '') AS provider_run_ref,
       COALESCE(run_request_id, '') AS run_request_id, created_at
FROM dvt_runs WHERE run_id = ?;

-- name: list_runs
-- The run history (store.RunFilter): every filter is a bound value, '' for
-- "any"; the time window and the keyset cursor are always bound (the store
-- binds the ends of time when a filter sets none), never OFFSET. The trigger
-- comes from the RunQueued payload (run_seq 1, through the primary key) and
-- the run's queue request (its unique key); status from dvt_run_seq, which
-- the append path keeps. Times and the first StepFailed are read for the
-- page's runs only.
WITH base AS (
    SELECT r.run_id, r.tenant_id, r.project_id, r.environment_id, r.plan_id, r.plan_version, r.plan_sha256,
           r.target_adapter, COALESCE(r.provider_run_ref, '') AS provider_run_ref,
           COALESCE(r.run_request_id, '') AS run_request_id, r.created_at, s.status,
           CASE WHEN COALESCE(json_extract(qe.payload, '$.parentRunId'), '') <> '' THEN 'retry'
                WHEN json_extract(qe.payload, '$.triggerSource') IN ('schedule', 'queue')
                THEN json_extract(qe.payload, '$.triggerSource')
                ELSE 'manual' END AS trigger_kind,
           COALESCE(json_extract(qe.payload, '$.triggeredBy'), '') AS triggered_by,
           COALESCE(json_extract(qe.payload, '$.parentRunId'), '') AS parent_run_id,
           COALESCE(rq.schedule_name,
                    CASE WHEN json_extract(qe.payload, '$.triggeredBy') LIKE 'schedule:%'
                         THEN substr(json_extract(qe.payload, '$.triggeredBy'), 10) END, '') AS schedule_name,
           COALESCE(json_extract(qe.payload, '$.target'), '') AS target,
           COALESCE(json_extract(qe.payload, '$.dataInterval.start'), '') AS interval_start,
           COALESCE(json_extract(qe.payload, '$.dataInterval.end'), '') AS interval_end,
           COALESCE(rq.enqueued_at, qe.emitted_at, r.created_at) AS queued_at
    FROM dvt_runs r
    JOIN dvt_run_seq s ON s.run_id = r.run_id
    LEFT JOIN dvt_run_events qe ON qe.run_id = r.run_id AND qe.run_seq = 1 AND qe.event_type = 'RunQueued'
    LEFT JOIN dvt_run_requests rq
      ON rq.tenant_id = r.tenant_id AND rq.project_id = r.project_id AND rq.environment_id = r.environment_id
     AND rq.plan_id = r.plan_id AND rq.plan_version = r.plan_version AND rq.run_request_id = r.run_request_id
     AND rq.run_id = r.run_id
    WHERE (? = '' OR r.tenant_id = ?) AND (? = '' OR r.project_id = ?) AND (? = '' OR r.environment_id = ?)
      AND (? = '' OR substr(r.run_id, 1, length(?)) = ?)
      AND (? = '' OR r.plan_id = ?)
      AND r.created_at >= ? AND r.created_at < ?
      AND (r.created_at < ? OR (r.created_at = ? AND r.run_id < ?))
),
page AS (
    SELECT * FROM base
    WHERE (? = '' OR status = ?) AND (? = '' OR trigger_kind = ?) AND (? = '' OR schedule_name = ?)
      AND (? = '' OR target = ?)
    ORDER BY created_at DESC, run_id DESC
    LIMIT ?
),
times AS (
    SELECT e.run_id,
           MIN(CASE WHEN e.event_type = 'RunStarted' THEN e.emitted_at END) AS started_at,
           MIN(CASE WHEN e.event_type IN ('RunCompleted', 'RunFailed', 'RunCancelled') THEN e.emitted_at END) AS ended_at,
           MIN(CASE WHEN e.event_type = 'StepFailed' THEN e.run_seq END) AS failed_seq
    -- CROSS JOIN keeps the page outermost: each of its runs' events through
    -- the primary key, never a scan of the whole log.
    FROM page p CROSS JOIN dvt_run_events e INDEXED BY dvt_run_events_outcomes ON e.run_id = p.run_id
    WHERE e.step_id IS NULL OR e.event_type = 'StepFailed'
    GROUP BY e.run_id
)
SELECT p.run_id, p.tenant_id, p.project_id, p.environment_id, p.plan_id, p.plan_version, p.plan_sha256,
       p.target_adapter, p.provider_run_ref, p.run_request_id, p.created_at,
       p.status, p.trigger_kind, p.triggered_by, p.parent_run_id, p.schedule_name, p.target,
       p.interval_start, p.interval_end, p.queued_at,
       COALESCE(t.started_at, ''), COALESCE(t.ended_at, ''),
       COALESCE(f.step_id, ''),
       COALESCE(CASE WHEN json_valid(f.payload) THEN json_extract(f.payload, '$.error.code') END, ''),
       COALESCE(CASE WHEN json_valid(f.payload) THEN json_extract(f.payload, '$.error.message') END, '')
FROM page p
LEFT JOIN times t ON t.run_id = p.run_id
LEFT JOIN dvt_run_events f ON f.run_id = p.run_id AND f.run_seq = t.failed_seq
ORDER BY p.created_at DESC, p.run_id DESC;

-- name: set_provider_ref
UPDATE dvt_runs SET provider_run_ref = ? WHERE run_id = ?;

-- name: persisted_event_id
SELECT event_id FROM dvt_run_events WHERE run_id = ? AND idempotency_key = ?;

-- name: reserve_event_id
INSERT INTO dvt_event_ids (run_id, idempotency_key, event_id, reserved_at) VALUES (?, ?, ?, ?)
ON CONFLICT (run_id, idempotency_key) DO NOTHING;

-- name: reserved_event_id
SELECT event_id FROM dvt_event_ids WHERE run_id = ? AND idempotency_key = ?;

-- name: insert_alert
INSERT INTO dvt_alerts (alert_key, code, severity, run_id, tenant_id, project_id, environment_id,
                        message, payload, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (alert_key) DO NOTHING;

-- name: list_alerts
SELECT alert_key, code, severity, COALESCE(run_id, ''), COALESCE(tenant_id, ''),
       COALESCE(project_id, ''), COALESCE(environment_id, ''), message, payload, created_at
FROM dvt_alerts
WHERE (? = '' OR run_id = ?)
ORDER BY created_at, alert_key;

-- name: signal_by_id
SELECT run_id, signal_seq, signal_id, signal_type, COALESCE(step_id, ''), COALESCE(reason, ''),
       COALESCE(requested_by, ''), created_at
FROM dvt_signals WHERE signal_id = ?;

-- name: next_signal_seq
SELECT COALESCE(MAX(signal_seq), 0) + 1 FROM dvt_signals WHERE run_id = ?;

-- name: insert_signal
INSERT INTO dvt_signals (run_id, signal_seq, signal_id, signal_type, step_id, reason, requested_by, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?);

-- name: list_signals
SELECT run_id, signal_seq, signal_id, signal_type, COALESCE(step_id, ''), COALESCE(reason, ''),
       COALESCE(requested_by, ''), created_at
FROM dvt_signals WHERE run_id = ? AND signal_seq > ? ORDER BY signal_seq;

-- name: get_lease
-- A released lease keeps its row (owner '') for its fence: it reads as none.
SELECT owner, expires_at FROM dvt_leases WHERE run_id = ? AND owner <> '';

-- name: get_fenced_lease
SELECT owner, expires_at, fence FROM dvt_leases WHERE run_id = ?;

-- name: put_lease
INSERT INTO dvt_leases (run_id, owner, acquired_at, expires_at, fence) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (run_id) DO UPDATE SET owner = excluded.owner, acquired_at = excluded.acquired_at,
                                   expires_at = excluded.expires_at, fence = excluded.fence;

-- name: release_lease
-- The row stays, ownerless and expired, so the fence keeps growing.
UPDATE dvt_leases SET owner = '', expires_at = acquired_at WHERE run_id = ? AND owner = ?;

-- name: lease_fence
-- The append's fence check, under the write lock.
SELECT owner, fence FROM dvt_leases WHERE run_id = ?;

-- name: renew_lease
-- A pulse's renewal (store.Store's Pulse): only the lease this owner holds
-- with this fence, expired or not; a released lease has owner ''.
UPDATE dvt_leases SET expires_at = ? WHERE run_id = ? AND owner = ? AND owner <> '' AND fence = ?;

-- name: count_outbox
SELECT COUNT(*) FROM dvt_outbox WHERE run_id = ?;


-- name: schema_tables
-- The migrations' bookkeeping (store/sqlite migrate): a database without
-- any table is a store whose creation never finished. The warehouse's own
-- tables (step ledger, run fences) do not count: store and warehouse may
-- be one file, and either may open it first.
SELECT COUNT(*) FROM sqlite_master
WHERE type = 'table' AND name NOT IN ('dvt_step_ledger', 'dvt_run_fences');

-- name: schema_versioned
SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'dvt_schema_version';

-- name: schema_versions
SELECT version FROM dvt_schema_version;

-- name: create_schema_version
CREATE TABLE IF NOT EXISTS dvt_schema_version (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL);

-- name: insert_schema_version
INSERT INTO dvt_schema_version (version, name, applied_at) VALUES (?, ?, ?);
