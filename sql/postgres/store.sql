-- Statements of the Postgres state store (store/postgres), by name. Values
-- are always bound parameters; lists are bound as arrays (= ANY($n)), so no
-- SQL is built in Go at all.

-- name: run_exists
SELECT 1 FROM dvt_runs WHERE run_id = $1;

-- name: insert_run
-- The run's row and its sequence row in one statement.
WITH r AS (
    INSERT INTO dvt_runs (run_id, tenant_id, project_id, environment_id, plan_id, plan_version,
                          plan_sha256, target_adapter, provider_run_ref, run_request_id, created_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
    ON CONFLICT (run_id) DO NOTHING
    RETURNING run_id
)
INSERT INTO dvt_run_seq (run_id, next_seq, status) SELECT run_id, 1, 'NONE' FROM r;

-- name: lock_seq
-- The append authority: the run's sequence row, locked until commit. Only
-- the writers of this run wait on it, and AcquireFencedLease takes it too,
-- so a takeover and a stale runner's append never interleave.
SELECT s.next_seq, s.status, r.tenant_id, r.project_id, r.environment_id, r.plan_id, r.plan_version,
       s.last_hash
FROM dvt_run_seq s JOIN dvt_runs r ON r.run_id = s.run_id
WHERE s.run_id = $1
FOR UPDATE OF s;

-- name: lease_fence
-- The fenced append's check, a statement of its own after lock_seq: under
-- READ COMMITTED it sees a takeover committed while the lock was awaited.
SELECT owner, fence FROM dvt_leases WHERE run_id = $1;

-- name: lock_lease
-- AcquireFencedLease's locks: the run's sequence row (the appends' lock;
-- none for a run never bootstrapped) and, for leases without a row yet, a
-- transaction lock on the run id that concurrent acquirers queue on.
SELECT pg_advisory_xact_lock(hashtext('dvtrun/lease/' || $1)),
       EXISTS (SELECT 1 FROM (SELECT 1 FROM dvt_run_seq WHERE run_id = $1 FOR UPDATE) x);

-- name: existing_events
-- The stored events of an append's keys: they come back as Deduped. One
-- probe of the (run_id, idempotency_key) index per key, whatever the
-- statistics say: the LIMIT keeps the planner from flattening the lateral
-- subquery into a join, which, on statistics that think a run is a few
-- dozen events, read the whole run (19 ms at a run's 10,000th event).
SELECT e.run_id, e.run_seq, e.tenant_id, e.project_id, e.environment_id, e.event_id, e.event_type, e.step_id,
       e.plan_id, e.plan_version, e.logical_attempt_id, e.engine_attempt_id, e.idempotency_key,
       e.emitted_at, e.persisted_at, e.payload::text
FROM unnest($2::text[]) AS k (key)
CROSS JOIN LATERAL (
    SELECT * FROM dvt_run_events x WHERE x.run_id = $1 AND x.idempotency_key = k.key LIMIT 1
) e;

-- name: step_states
-- One primary-key probe per step, as existing_events probes its keys.
SELECT s.step_id, s.status, s.logical_attempt_id
FROM unnest($2::text[]) AS k (step_id)
CROSS JOIN LATERAL (
    SELECT * FROM dvt_step_state x WHERE x.run_id = $1 AND x.step_id = k.step_id LIMIT 1
) s;

-- name: insert_events
-- The new events of an append: one statement for the whole batch, the
-- columns bound as arrays.
INSERT INTO dvt_run_events (run_id, run_seq, tenant_id, project_id, environment_id, event_id,
                            event_type, step_id, plan_id, plan_version, logical_attempt_id,
                            engine_attempt_id, idempotency_key, emitted_at, persisted_at, payload,
                            prev_hash, hash, payload_sha256)
SELECT $1, e.run_seq, $2, $3, $4, e.event_id, e.event_type, e.step_id, $5, $6,
       e.logical_attempt_id, e.engine_attempt_id, e.idempotency_key, e.emitted_at, $7,
       e.payload::json, e.prev_hash, e.hash, e.payload_sha256
FROM unnest($8::bigint[], $9::text[], $10::text[], $11::text[], $12::bigint[], $13::bigint[],
            $14::text[], $15::text[], $16::text[], $17::text[], $18::text[], $19::text[])
     AS e (run_seq, event_id, event_type, step_id, logical_attempt_id, engine_attempt_id,
           idempotency_key, emitted_at, payload, prev_hash, hash, payload_sha256);

-- name: insert_outbox
-- Their outbox rows, and the run's wake-up (store/postgres/wake.go):
-- NOTIFY dvt_events, the run id, sent at commit, once per transaction.
INSERT INTO dvt_outbox (run_id, run_seq)
SELECT $1, s.run_seq FROM unnest($2::bigint[]) AS s (run_seq)
CROSS JOIN (SELECT pg_notify('dvt_events', $1)) AS wake;

-- name: update_seq
-- last_hash is the hash chain's head (issue 19), advanced with next_seq.
UPDATE dvt_run_seq SET next_seq = $1, status = $2, last_hash = $3 WHERE run_id = $4;

-- name: upsert_step_states
INSERT INTO dvt_step_state (run_id, step_id, status, logical_attempt_id)
SELECT $1, s.step_id, s.status, s.attempt
FROM unnest($2::text[], $3::text[], $4::bigint[]) AS s (step_id, status, attempt)
ON CONFLICT (run_id, step_id) DO UPDATE SET status = excluded.status,
                                            logical_attempt_id = excluded.logical_attempt_id;

-- name: forget_run_reservations
DELETE FROM dvt_event_ids WHERE run_id = $1;

-- name: list_step_events
-- One step's events (the console's step page): the run's rows are read
-- by its key, only the step's are returned.
SELECT run_id, run_seq, tenant_id, project_id, environment_id, event_id, event_type, step_id,
       plan_id, plan_version, logical_attempt_id, engine_attempt_id, idempotency_key,
       emitted_at, persisted_at, payload::text
FROM dvt_run_events
WHERE run_id = $1 AND step_id = $2
ORDER BY run_seq;

-- name: list_events
SELECT run_id, run_seq, tenant_id, project_id, environment_id, event_id, event_type, step_id,
       plan_id, plan_version, logical_attempt_id, engine_attempt_id, idempotency_key,
       emitted_at, persisted_at, payload::text
FROM dvt_run_events
WHERE run_id = $1 AND run_seq > $2
ORDER BY run_seq
LIMIT $3;

-- name: get_run
SELECT run_id, tenant_id, project_id, environment_id, plan_id, plan_version, plan_sha256,
       target_adapter, COALESCE(provider_run_ref, '') AS provider_run_ref,
       COALESCE(run_request_id, '') AS run_request_id, created_at
FROM dvt_runs WHERE run_id = $1;

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
           CASE WHEN COALESCE((qe.payload ->> 'parentRunId'), '') <> '' THEN 'retry'
                WHEN (qe.payload ->> 'triggerSource') IN ('schedule', 'queue')
                THEN (qe.payload ->> 'triggerSource')
                ELSE 'manual' END AS trigger_kind,
           COALESCE((qe.payload ->> 'triggeredBy'), '') AS triggered_by,
           COALESCE((qe.payload ->> 'parentRunId'), '') AS parent_run_id,
           COALESCE(rq.schedule_name,
                    CASE WHEN (qe.payload ->> 'triggeredBy') LIKE 'schedule:%'
                         THEN substr((qe.payload ->> 'triggeredBy'), 10) END, '') AS schedule_name,
           COALESCE((qe.payload ->> 'target'), '') AS target,
           COALESCE((qe.payload -> 'dataInterval' ->> 'start'), '') AS interval_start,
           COALESCE((qe.payload -> 'dataInterval' ->> 'end'), '') AS interval_end,
           COALESCE(rq.enqueued_at, qe.emitted_at, r.created_at) AS queued_at
    FROM dvt_runs r
    JOIN dvt_run_seq s ON s.run_id = r.run_id
    LEFT JOIN dvt_run_events qe ON qe.run_id = r.run_id AND qe.run_seq = 1 AND qe.event_type = 'RunQueued'
    LEFT JOIN dvt_run_requests rq
      ON rq.tenant_id = r.tenant_id AND rq.project_id = r.project_id AND rq.environment_id = r.environment_id
     AND rq.plan_id = r.plan_id AND rq.plan_version = r.plan_version AND rq.run_request_id = r.run_request_id
     AND rq.run_id = r.run_id
    WHERE ($1 = '' OR r.tenant_id = $2) AND ($3 = '' OR r.project_id = $4) AND ($5 = '' OR r.environment_id = $6)
      AND ($7 = '' OR substr(r.run_id, 1, length($8)) = $9)
      AND ($10 = '' OR r.plan_id = $11)
      AND r.created_at >= $12 AND r.created_at < $13
      AND (r.created_at < $14 OR (r.created_at = $15 AND r.run_id < $16))
),
page AS (
    SELECT * FROM base
    WHERE ($17 = '' OR status = $18) AND ($19 = '' OR trigger_kind = $20) AND ($21 = '' OR schedule_name = $22)
      AND ($23 = '' OR target = $24)
    ORDER BY created_at DESC, run_id DESC
    LIMIT $25
),
times AS (
    SELECT e.run_id,
           MIN(CASE WHEN e.event_type = 'RunStarted' THEN e.emitted_at END) AS started_at,
           MIN(CASE WHEN e.event_type IN ('RunCompleted', 'RunFailed', 'RunCancelled') THEN e.emitted_at END) AS ended_at,
           MIN(CASE WHEN e.event_type = 'StepFailed' THEN e.run_seq END) AS failed_seq
    -- Each of the page's runs' outcome events through the partial index
    -- dvt_run_events_outcomes, never a scan of the whole log.
    FROM page p JOIN dvt_run_events e ON e.run_id = p.run_id
    WHERE e.step_id IS NULL OR e.event_type = 'StepFailed'
    GROUP BY e.run_id
)
SELECT p.run_id, p.tenant_id, p.project_id, p.environment_id, p.plan_id, p.plan_version, p.plan_sha256,
       p.target_adapter, p.provider_run_ref, p.run_request_id, p.created_at,
       p.status, p.trigger_kind, p.triggered_by, p.parent_run_id, p.schedule_name, p.target,
       p.interval_start, p.interval_end, p.queued_at,
       COALESCE(t.started_at, ''), COALESCE(t.ended_at, ''),
       COALESCE(f.step_id, ''),
       COALESCE(f.payload -> 'error' ->> 'code', ''),
       COALESCE(f.payload -> 'error' ->> 'message', '')
FROM page p
LEFT JOIN times t ON t.run_id = p.run_id
LEFT JOIN dvt_run_events f ON f.run_id = p.run_id AND f.run_seq = t.failed_seq
ORDER BY p.created_at DESC, p.run_id DESC;

-- name: set_provider_ref
UPDATE dvt_runs SET provider_run_ref = $1 WHERE run_id = $2;

-- name: reserved_event_ids
-- BootstrapRun: the keys of its events reserved before it.
SELECT idempotency_key, event_id FROM dvt_event_ids
WHERE run_id = $1 AND idempotency_key = ANY($2::text[]);

-- name: reserve_event_ids
-- ReserveEventIDs in one statement: a key's persisted event answers first,
-- then an earlier reservation; any other key is bound to its candidate. A
-- key another transaction reserves meanwhile is neither read nor inserted
-- here (ON CONFLICT waits for it, then skips): the caller reads those back
-- with reserved_event_ids.
WITH c (key, candidate) AS (SELECT * FROM unnest($2::text[], $3::text[])),
persisted AS (
    SELECT e.idempotency_key AS key, e.event_id FROM dvt_run_events e
    WHERE e.run_id = $1 AND e.idempotency_key IN (SELECT key FROM c)
),
reserved AS (
    SELECT r.idempotency_key AS key, r.event_id FROM dvt_event_ids r
    WHERE r.run_id = $1 AND r.idempotency_key IN (SELECT key FROM c)
      AND r.idempotency_key NOT IN (SELECT key FROM persisted)
),
ins AS (
    INSERT INTO dvt_event_ids (run_id, idempotency_key, event_id, reserved_at)
    SELECT $1, c.key, c.candidate, $4 FROM c
    WHERE c.key NOT IN (SELECT key FROM persisted) AND c.key NOT IN (SELECT key FROM reserved)
    ON CONFLICT (run_id, idempotency_key) DO NOTHING
    RETURNING idempotency_key AS key, event_id
)
SELECT key, event_id FROM persisted
UNION ALL SELECT key, event_id FROM reserved
UNION ALL SELECT key, event_id FROM ins;

-- name: insert_alert
INSERT INTO dvt_alerts (alert_key, code, severity, run_id, tenant_id, project_id, environment_id,
                        message, payload, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::json, $10)
ON CONFLICT (alert_key) DO NOTHING;

-- name: list_alerts
SELECT alert_key, code, severity, COALESCE(run_id, ''), COALESCE(tenant_id, ''),
       COALESCE(project_id, ''), COALESCE(environment_id, ''), message, payload::text, created_at
FROM dvt_alerts
WHERE ($1 = '' OR run_id = $1)
ORDER BY created_at, alert_key;

-- name: signal_by_id
SELECT run_id, signal_seq, signal_id, signal_type, COALESCE(step_id, ''), COALESCE(reason, ''),
       COALESCE(requested_by, ''), created_at
FROM dvt_signals WHERE signal_id = $1;

-- name: lock_signals
-- A run's signal writers queue on its sequence row (the append authority):
-- signal_seq is then MAX + 1 without a race. No row: the run does not exist.
SELECT 1 FROM dvt_run_seq WHERE run_id = $1 FOR UPDATE;

-- name: next_signal_seq
SELECT COALESCE(MAX(signal_seq), 0) + 1 FROM dvt_signals WHERE run_id = $1;

-- name: insert_signal
INSERT INTO dvt_signals (run_id, signal_seq, signal_id, signal_type, step_id, reason, requested_by, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (signal_id) DO NOTHING;

-- name: list_signals
SELECT run_id, signal_seq, signal_id, signal_type, COALESCE(step_id, ''), COALESCE(reason, ''),
       COALESCE(requested_by, ''), created_at
FROM dvt_signals WHERE run_id = $1 AND signal_seq > $2 ORDER BY signal_seq;

-- name: pulse_signals
-- A pulse's signals: every asked run's past its cursor, by run then seq.
SELECT s.run_id, s.signal_seq, s.signal_id, s.signal_type, COALESCE(s.step_id, ''), COALESCE(s.reason, ''),
       COALESCE(s.requested_by, ''), s.created_at
FROM dvt_signals s
JOIN unnest($1::text[], $2::bigint[]) AS a (run_id, after_seq) ON a.run_id = s.run_id
WHERE s.signal_seq > a.after_seq
ORDER BY s.run_id, s.signal_seq;

-- name: get_lease
-- A released lease keeps its row (owner '') for its fence: it reads as none.
SELECT owner, expires_at FROM dvt_leases WHERE run_id = $1 AND owner <> '';

-- name: get_fenced_lease
SELECT owner, expires_at, fence FROM dvt_leases WHERE run_id = $1;

-- name: put_lease
INSERT INTO dvt_leases (run_id, owner, acquired_at, expires_at, fence) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (run_id) DO UPDATE SET owner = excluded.owner, acquired_at = excluded.acquired_at,
                                   expires_at = excluded.expires_at, fence = excluded.fence;

-- name: release_lease
-- The row stays, ownerless and expired, so the fence keeps growing.
UPDATE dvt_leases SET owner = '', expires_at = acquired_at WHERE run_id = $1 AND owner = $2;

-- name: renew_leases
-- A pulse's renewals and reads in one statement: only a lease this owner
-- holds with the asked fence, expired or not, is renewed (a released lease
-- has owner ''); every asked run's lease row comes back as it stands after.
WITH a (run_id, fence) AS (SELECT * FROM unnest($3::text[], $4::bigint[])),
renewed AS (
    UPDATE dvt_leases l SET expires_at = $1
    FROM a
    WHERE l.run_id = a.run_id AND l.owner = $2 AND l.owner <> '' AND l.fence = a.fence
    RETURNING l.run_id, l.owner, l.expires_at, l.fence
)
SELECT run_id, owner, expires_at, fence FROM renewed
UNION ALL
SELECT l.run_id, l.owner, l.expires_at, l.fence FROM dvt_leases l JOIN a ON a.run_id = l.run_id
WHERE l.run_id NOT IN (SELECT run_id FROM renewed);

-- name: count_outbox
SELECT COUNT(*) FROM dvt_outbox WHERE run_id = $1;

-- name: schema_tables
-- The migrations' bookkeeping (store/postgres migrate): a schema without
-- any table is a store not created yet. The warehouse's own tables do not
-- count (store and warehouse may share a schema, and either may open it
-- first, at the same moment too): a schema holding only the step ledger,
-- the run fences or a table being built (dvt_tmp__…) is not someone
-- else's. The pattern escapes _, which LIKE reads as any character.
SELECT COUNT(*) FROM information_schema.tables
WHERE table_schema = current_schema()
  AND table_name NOT IN ('dvt_step_ledger', 'dvt_run_fences')
  AND table_name NOT LIKE 'dvt\_tmp\_\_%';

-- name: schema_versioned
SELECT COUNT(*) FROM information_schema.tables
WHERE table_schema = current_schema() AND table_name = 'dvt_schema_version';

-- name: schema_versions
SELECT version FROM dvt_schema_version;

-- name: migration_lock
-- Concurrent migrators queue here, for the length of the transaction.
SELECT pg_advisory_xact_lock(hashtext('dvtrun/migrate'));

-- name: create_schema_version
CREATE TABLE IF NOT EXISTS dvt_schema_version (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL);

-- name: insert_schema_version
INSERT INTO dvt_schema_version (version, name, applied_at) VALUES ($1, $2, $3);
