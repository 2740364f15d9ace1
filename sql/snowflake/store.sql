-- Statements of the Snowflake state store (store/snowflake), by name.
--
-- Single statements bind their values (?). Statements that travel together
-- in one multi-statement request cannot bind (gosnowflake and Snowflake do
-- not support it), so their values are rendered by store/snowflake/script.go
-- into the /*:name*/ slots as hex string literals ('6162…', read back with
-- HEX_DECODE_STRING), decimal integers or NULL — nothing a value contains can
-- end its literal. /*rows*/ takes rows of such literals. Scripting blocks
-- (append_block, bootstrap_block, reserve_event_ids, acquire_lease_block)
-- are single statements that take no binds either: the same literals.

-- name: create_locks
-- The table is created with its 'migrate' row in one statement: a row
-- inserted separately could be inserted twice by two processes at once
-- (nothing enforces uniqueness), and two lock rows are two locks.
CREATE TABLE IF NOT EXISTS dvt_locks AS
SELECT CAST('migrate' AS VARCHAR) AS lock_name, CAST(NULL AS VARCHAR) AS owner,
       CAST(NULL AS TIMESTAMP_TZ(9)) AS expires_at;

-- name: acquire_migrate_lock
-- The migration lease: free, or expired by the database's clock (the one
-- clock every process shares), it is taken for ttl ms. Args: owner, ttl_ms.
UPDATE dvt_locks SET owner = ?,
       expires_at = DATEADD(millisecond, CAST(? AS NUMBER(38, 0)), CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9)))
WHERE lock_name = 'migrate' AND (owner IS NULL OR expires_at < CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9)));

-- name: renew_migrate_lock
-- Extends the lease while its owner migrates; no row means it was taken
-- over. Args: ttl_ms, owner.
UPDATE dvt_locks
SET expires_at = DATEADD(millisecond, CAST(? AS NUMBER(38, 0)), CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9)))
WHERE lock_name = 'migrate' AND owner = ?;

-- name: migrate_lock_holder
-- Who holds the migration lease and until when, for the progress line.
SELECT COALESCE(owner, ''), expires_at FROM dvt_locks WHERE lock_name = 'migrate';

-- name: release_migrate_lock
UPDATE dvt_locks SET owner = NULL, expires_at = NULL WHERE lock_name = 'migrate' AND owner = ?;

-- name: database_time
SELECT CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9));

-- name: create_schema_version
CREATE TABLE IF NOT EXISTS dvt_schema_version (
    version    NUMBER(38, 0) NOT NULL,
    name       VARCHAR NOT NULL,
    applied_at TIMESTAMP_TZ(9) NOT NULL
);

-- name: schema_versions
SELECT version FROM dvt_schema_version ORDER BY version;

-- name: insert_schema_version
INSERT INTO dvt_schema_version (version, name, applied_at) SELECT ?, ?, CAST(? AS TIMESTAMP_TZ(9));

-- name: begin
BEGIN;

-- name: commit
COMMIT;

-- name: rollback
ROLLBACK;

-- name: lock_run
-- Writing the run's sequence row first is what serialises the writers of a
-- run (Snowflake: the table lock of an UPDATE is held until COMMIT).
UPDATE dvt_run_seq SET next_seq = next_seq WHERE run_id = HEX_DECODE_STRING(/*:run_id*/);

-- name: append_block
-- One request per append (issue 11): a Snowflake Scripting block, executed
-- as one statement, decides under the run's lock whether the writes the
-- client planned still apply, writes them, and answers with what the client
-- needs in every case. The client plans from the run state it cached after
-- its last write (next_seq, status, step states); next_seq only grows and
-- every write advances it, so "next_seq is what I expect and none of my new
-- keys is stored" means the plan is still right. Outcomes, in the 'O' row:
--   APPLIED    the planned writes (the writes slot: update_seq, merge_events,
--              insert_outbox, merge_steps, … rendered by the client) are
--              committed; 'M' rows hold the stored metadata (eventId,
--              runSeq, persistedAt) of the new events;
--   DUPLICATE  every key of the batch is stored already (a retried append):
--              nothing is written, 'E' rows hold the stored records;
--   STALE      someone else wrote (or the client has no cached state): the
--              answer carries the run's row ('R', with the hash chain's head
--              in step_id), the stored records of the
--              batch's keys ('E') and every step state ('S'); the client
--              plans again and sends one more block;
--   NOT_FOUND  the run has no sequence row.
-- Values are hex literals and integers (script.go): a block is one statement
-- and takes no client binds. A failure rolls the transaction back in the
-- handler and reaches the client with its own code.
EXECUTE IMMEDIATE $$
DECLARE
  run_rows INTEGER DEFAULT 0;
  seq_ok INTEGER DEFAULT 0;
  stored_all INTEGER DEFAULT 0;
  stored_new INTEGER DEFAULT 0;
  fence_ok INTEGER DEFAULT 0;
  outcome VARCHAR DEFAULT 'STALE';
  res RESULTSET;
BEGIN
  BEGIN TRANSACTION;
  -- Writing the run's sequence row first serialises the writers of a run.
  UPDATE dvt_run_seq SET next_seq = next_seq WHERE run_id = HEX_DECODE_STRING(/*:run_id*/);
  -- One statement for the whole decision: each statement of a block is a
  -- query job of its own in Snowflake. fence_ok is the lease fence (issue
  -- 8): a fenced append (fenced = 1) writes only while the run's lease still
  -- has the caller's owner and fence, else the outcome is LEASE_LOST.
  SELECT COUNT(*),
         COALESCE(SUM(CASE WHEN next_seq = /*:expected_seq*/ THEN 1 ELSE 0 END), 0),
         (SELECT COUNT(DISTINCT idempotency_key) FROM dvt_run_events
          WHERE run_id = HEX_DECODE_STRING(/*:run_id*/)
            AND idempotency_key IN (SELECT HEX_DECODE_STRING(k.key_hex) FROM (VALUES /*:keys*/) AS k (key_hex))),
         (SELECT COUNT(*) FROM dvt_run_events
          WHERE run_id = HEX_DECODE_STRING(/*:run_id*/)
            AND idempotency_key IN (SELECT HEX_DECODE_STRING(k.key_hex) FROM (VALUES /*:new_keys*/) AS k (key_hex))),
         (SELECT COUNT(*) FROM dvt_leases
          WHERE run_id = HEX_DECODE_STRING(/*:run_id*/) AND owner = HEX_DECODE_STRING(/*:lease_owner*/)
            AND owner <> '' AND fence = /*:lease_fence*/)
    INTO :run_rows, :seq_ok, :stored_all, :stored_new, :fence_ok
    FROM dvt_run_seq WHERE run_id = HEX_DECODE_STRING(/*:run_id*/);
  IF (run_rows = 0) THEN
    outcome := 'NOT_FOUND';
  ELSEIF (/*:fenced*/ = 1 AND fence_ok = 0) THEN
    outcome := 'LEASE_LOST';
  ELSEIF (stored_all = /*:nkeys*/) THEN
    outcome := 'DUPLICATE';
  ELSEIF (seq_ok = 1 AND stored_new = 0) THEN
    /*writes*/
    outcome := 'APPLIED';
  END IF;
  IF (outcome = 'APPLIED') THEN
    -- The client planned the records: their stored metadata is enough.
    res := (
      SELECT 'O' AS kind, NULL AS run_seq, NULL AS tenant_id, NULL AS project_id, NULL AS environment_id,
             NULL AS event_id, :outcome AS event_type, NULL AS step_id, NULL AS plan_id, NULL AS plan_version,
             NULL AS logical_attempt_id, NULL AS engine_attempt_id, NULL AS idempotency_key,
             NULL AS emitted_at, NULL AS persisted_at, CAST(NULL AS VARCHAR) AS payload
      UNION ALL
      SELECT 'M', run_seq, NULL, NULL, NULL, event_id, NULL, NULL, NULL, NULL, NULL, NULL,
             idempotency_key, NULL, persisted_at, NULL
      FROM dvt_run_events
      WHERE run_id = HEX_DECODE_STRING(/*:run_id*/)
        AND idempotency_key IN (SELECT HEX_DECODE_STRING(k.key_hex) FROM (VALUES /*:new_keys*/) AS k (key_hex))
    );
  ELSE
    res := (
      SELECT 'R' AS kind, s.next_seq AS run_seq, r.tenant_id, r.project_id, r.environment_id,
             NULL AS event_id, s.status AS event_type, s.last_hash AS step_id, r.plan_id, r.plan_version,
             NULL AS logical_attempt_id, NULL AS engine_attempt_id, NULL AS idempotency_key,
             NULL AS emitted_at, s.last_persisted_at AS persisted_at, NULL AS payload
      FROM dvt_run_seq s JOIN dvt_runs r ON r.run_id = s.run_id
      WHERE s.run_id = HEX_DECODE_STRING(/*:run_id*/)
      UNION ALL
      SELECT 'O', NULL, NULL, NULL, NULL, NULL, :outcome, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL
      UNION ALL
      SELECT 'E', run_seq, tenant_id, project_id, environment_id, event_id, event_type, step_id,
             plan_id, plan_version, logical_attempt_id, engine_attempt_id, idempotency_key,
             emitted_at, persisted_at, payload
      FROM dvt_run_events
      WHERE run_id = HEX_DECODE_STRING(/*:run_id*/)
        AND idempotency_key IN (SELECT HEX_DECODE_STRING(k.key_hex) FROM (VALUES /*:keys*/) AS k (key_hex))
      UNION ALL
      SELECT 'S', NULL, NULL, NULL, NULL, NULL, status, step_id, NULL, NULL,
             logical_attempt_id, NULL, NULL, NULL, NULL, NULL
      FROM dvt_step_state
      WHERE run_id = HEX_DECODE_STRING(/*:run_id*/) AND :outcome = 'STALE'
    );
  END IF;
  COMMIT;
  RETURN TABLE(res);
EXCEPTION
  WHEN OTHER THEN
    ROLLBACK;
    RAISE;
END;
$$;

-- name: bootstrap_block
-- A run's first write in one request: under the 'bootstrap' lock row
-- (UPDATEs of one table wait for each other, which serialises bootstraps of
-- one run id) the run must not exist; then the client's writes (insert_run,
-- insert_seq, merge_events, insert_outbox, merge_steps) are committed.
-- The events' eventIds are bound in the EventIdRegistry in the same
-- transaction (RunEvents 2.5.1): a persisted event is its key's binding
-- (reserve_event_ids answers it first), and a key already reserved in
-- dvt_event_ids keeps its reserved eventId, so the block writes only when
-- none of the planned ids (the key_ids pairs) differs from a reservation.
-- Outcomes in the 'O' row: APPLIED ('M' rows: the new events' stored
-- metadata), EXISTS (nothing written) or RESERVED (nothing written; 'K' rows
-- hold the reserved ids of the batch's keys, the client plans again with
-- them).
EXECUTE IMMEDIATE $$
DECLARE
  run_rows INTEGER DEFAULT 0;
  rebind INTEGER DEFAULT 0;
  outcome VARCHAR DEFAULT 'EXISTS';
  res RESULTSET;
BEGIN
  BEGIN TRANSACTION;
  UPDATE dvt_locks SET owner = owner WHERE lock_name = 'bootstrap';
  SELECT COUNT(*),
         (SELECT COUNT(*) FROM dvt_event_ids reserved
          JOIN (VALUES /*:key_ids*/) AS k (key_hex, id_hex) ON reserved.idempotency_key = HEX_DECODE_STRING(k.key_hex)
          WHERE reserved.run_id = HEX_DECODE_STRING(/*:run_id*/) AND reserved.event_id <> HEX_DECODE_STRING(k.id_hex))
    INTO :run_rows, :rebind
    FROM dvt_runs WHERE run_id = HEX_DECODE_STRING(/*:run_id*/);
  IF (run_rows = 0 AND rebind = 0) THEN
    /*writes*/
    outcome := 'APPLIED';
  ELSEIF (run_rows = 0) THEN
    outcome := 'RESERVED';
  END IF;
  res := (
    SELECT 'O' AS kind, NULL AS run_seq, NULL AS tenant_id, NULL AS project_id, NULL AS environment_id,
           NULL AS event_id, :outcome AS event_type, NULL AS step_id, NULL AS plan_id, NULL AS plan_version,
           NULL AS logical_attempt_id, NULL AS engine_attempt_id, NULL AS idempotency_key,
           NULL AS emitted_at, NULL AS persisted_at, CAST(NULL AS VARCHAR) AS payload
    UNION ALL
    SELECT 'M', run_seq, NULL, NULL, NULL, event_id, NULL, NULL, NULL, NULL, NULL, NULL,
           idempotency_key, NULL, persisted_at, NULL
    FROM dvt_run_events
    WHERE run_id = HEX_DECODE_STRING(/*:run_id*/) AND :outcome = 'APPLIED'
    UNION ALL
    SELECT 'K', NULL, NULL, NULL, NULL, event_id, NULL, NULL, NULL, NULL, NULL, NULL,
           idempotency_key, NULL, NULL, NULL
    FROM dvt_event_ids
    WHERE run_id = HEX_DECODE_STRING(/*:run_id*/) AND :outcome = 'RESERVED'
      AND idempotency_key IN (SELECT HEX_DECODE_STRING(k.key_hex) FROM (VALUES /*:key_ids*/) AS k (key_hex, id_hex))
  );
  COMMIT;
  RETURN TABLE(res);
EXCEPTION
  WHEN OTHER THEN
    ROLLBACK;
    RAISE;
END;
$$;

-- name: insert_run
INSERT INTO dvt_runs (run_id, tenant_id, project_id, environment_id, plan_id, plan_version,
                      plan_sha256, target_adapter, provider_run_ref, run_request_id, created_at)
SELECT HEX_DECODE_STRING(/*:run_id*/), HEX_DECODE_STRING(/*:tenant_id*/),
       HEX_DECODE_STRING(/*:project_id*/), HEX_DECODE_STRING(/*:environment_id*/),
       HEX_DECODE_STRING(/*:plan_id*/), HEX_DECODE_STRING(/*:plan_version*/),
       HEX_DECODE_STRING(/*:plan_sha256*/), HEX_DECODE_STRING(/*:target_adapter*/),
       HEX_DECODE_STRING(/*:provider_run_ref*/), HEX_DECODE_STRING(/*:run_request_id*/),
       CAST(HEX_DECODE_STRING(/*:created_at*/) AS TIMESTAMP_TZ(9));

-- name: insert_seq
INSERT INTO dvt_run_seq (run_id, next_seq, status, last_persisted_at, last_hash)
SELECT HEX_DECODE_STRING(/*:run_id*/), /*:next_seq*/, HEX_DECODE_STRING(/*:status*/),
       CAST(HEX_DECODE_STRING(/*:persisted_at*/) AS TIMESTAMP_TZ(9)), HEX_DECODE_STRING(/*:last_hash*/);

-- name: update_seq
-- last_hash is the hash chain's head (issue 19), advanced with next_seq.
UPDATE dvt_run_seq
SET next_seq = /*:next_seq*/, status = HEX_DECODE_STRING(/*:status*/),
    last_persisted_at = CAST(HEX_DECODE_STRING(/*:persisted_at*/) AS TIMESTAMP_TZ(9)),
    last_hash = HEX_DECODE_STRING(/*:last_hash*/)
WHERE run_id = HEX_DECODE_STRING(/*:run_id*/);

-- name: merge_events
-- The batch is deduplicated in Go and its keys checked under the run's lock,
-- so WHEN NOT MATCHED is a second guard: a source holding two rows of one key
-- would insert both, which is why the Go side folds repeats first.
MERGE INTO dvt_run_events t
USING (
    SELECT HEX_DECODE_STRING(v.run_id) AS run_id, v.run_seq,
           HEX_DECODE_STRING(v.tenant_id) AS tenant_id, HEX_DECODE_STRING(v.project_id) AS project_id,
           HEX_DECODE_STRING(v.environment_id) AS environment_id, HEX_DECODE_STRING(v.event_id) AS event_id,
           HEX_DECODE_STRING(v.event_type) AS event_type, HEX_DECODE_STRING(v.step_id) AS step_id,
           HEX_DECODE_STRING(v.plan_id) AS plan_id, HEX_DECODE_STRING(v.plan_version) AS plan_version,
           v.logical_attempt_id, v.engine_attempt_id,
           HEX_DECODE_STRING(v.idempotency_key) AS idempotency_key,
           CAST(HEX_DECODE_STRING(v.emitted_at) AS TIMESTAMP_TZ(9)) AS emitted_at,
           CAST(HEX_DECODE_STRING(v.persisted_at) AS TIMESTAMP_TZ(9)) AS persisted_at,
           PARSE_JSON(HEX_DECODE_STRING(v.payload)) AS payload,
           HEX_DECODE_STRING(v.prev_hash) AS prev_hash, HEX_DECODE_STRING(v.hash) AS hash,
           HEX_DECODE_STRING(v.event_bytes) AS event_bytes,
           HEX_DECODE_STRING(v.payload_sha256) AS payload_sha256,
           HEX_DECODE_STRING(v.payload) AS payload_text
    FROM (VALUES /*rows*/) AS v (run_id, run_seq, tenant_id, project_id, environment_id, event_id,
                                 event_type, step_id, plan_id, plan_version, logical_attempt_id,
                                 engine_attempt_id, idempotency_key, emitted_at, persisted_at, payload,
                                 prev_hash, hash, event_bytes, payload_sha256)
) s
ON t.run_id = s.run_id AND t.idempotency_key = s.idempotency_key
WHEN NOT MATCHED THEN INSERT
    (run_id, run_seq, tenant_id, project_id, environment_id, event_id, event_type, step_id,
     plan_id, plan_version, logical_attempt_id, engine_attempt_id, idempotency_key,
     emitted_at, persisted_at, payload, prev_hash, hash, event_bytes, payload_sha256, payload_text)
VALUES (s.run_id, s.run_seq, s.tenant_id, s.project_id, s.environment_id, s.event_id, s.event_type,
        s.step_id, s.plan_id, s.plan_version, s.logical_attempt_id, s.engine_attempt_id,
        s.idempotency_key, s.emitted_at, s.persisted_at, s.payload, s.prev_hash, s.hash, s.event_bytes,
        s.payload_sha256, s.payload_text);

-- name: insert_outbox
-- Enqueues what the MERGE stored in this transaction, by reference.
INSERT INTO dvt_outbox (run_id, run_seq)
SELECT run_id, run_seq FROM dvt_run_events
WHERE run_id = HEX_DECODE_STRING(/*:run_id*/) AND run_seq >= /*:first_seq*/ AND run_seq < /*:next_seq*/;

-- name: merge_steps
MERGE INTO dvt_step_state t
USING (
    SELECT HEX_DECODE_STRING(v.run_id) AS run_id, HEX_DECODE_STRING(v.step_id) AS step_id,
           HEX_DECODE_STRING(v.status) AS status, v.logical_attempt_id
    FROM (VALUES /*rows*/) AS v (run_id, step_id, status, logical_attempt_id)
) s
ON t.run_id = s.run_id AND t.step_id = s.step_id
WHEN MATCHED THEN UPDATE SET status = s.status, logical_attempt_id = s.logical_attempt_id
WHEN NOT MATCHED THEN INSERT (run_id, step_id, status, logical_attempt_id)
    VALUES (s.run_id, s.step_id, s.status, s.logical_attempt_id);

-- name: forget_run_reservations
DELETE FROM dvt_event_ids WHERE run_id = HEX_DECODE_STRING(/*:run_id*/);

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
ORDER BY run_seq;

-- name: list_events_limit
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
-- The run history (store.RunFilter), as sql/sqlite/store.sql's list_runs:
-- every filter is a bound value, '' for "any"; the time window and the
-- keyset cursor are always bound, never OFFSET. The trigger comes from the
-- RunQueued payload (run_seq 1) and the run's queue request; status from
-- dvt_run_seq, which the append path keeps. Times and the first StepFailed
-- are read for the page's runs only. Binds are numbered (:N, the order of
-- store.RunFilter.HistoryArgs) so that their order never depends on how
-- the statement is planned.
WITH base AS (
    SELECT r.run_id, r.tenant_id, r.project_id, r.environment_id, r.plan_id, r.plan_version, r.plan_sha256,
           r.target_adapter, COALESCE(r.provider_run_ref, '') AS provider_run_ref,
           COALESCE(r.run_request_id, '') AS run_request_id, r.created_at, s.status,
           CASE WHEN COALESCE(qe.payload:parentRunId::string, '') <> '' THEN 'retry'
                WHEN qe.payload:triggerSource::string IN ('schedule', 'queue') THEN qe.payload:triggerSource::string
                ELSE 'manual' END AS trigger_kind,
           COALESCE(qe.payload:triggeredBy::string, '') AS triggered_by,
           COALESCE(qe.payload:parentRunId::string, '') AS parent_run_id,
           COALESCE(rq.schedule_name,
                    CASE WHEN qe.payload:triggeredBy::string LIKE 'schedule:%'
                         THEN SUBSTR(qe.payload:triggeredBy::string, 10) END, '') AS schedule_name,
           COALESCE(qe.payload:target::string, '') AS target,
           COALESCE(qe.payload:dataInterval:start::string, '') AS interval_start,
           COALESCE(qe.payload:dataInterval:end::string, '') AS interval_end,
           COALESCE(rq.enqueued_at, qe.emitted_at, r.created_at) AS queued_at
    FROM dvt_runs r
    JOIN dvt_run_seq s ON s.run_id = r.run_id
    LEFT JOIN dvt_run_events qe ON qe.run_id = r.run_id AND qe.run_seq = 1 AND qe.event_type = 'RunQueued'
    LEFT JOIN dvt_run_requests rq
      ON rq.tenant_id = r.tenant_id AND rq.project_id = r.project_id AND rq.environment_id = r.environment_id
     AND rq.plan_id = r.plan_id AND rq.plan_version = r.plan_version AND rq.run_request_id = r.run_request_id
     AND rq.run_id = r.run_id
    WHERE (:1 = '' OR r.tenant_id = :2) AND (:3 = '' OR r.project_id = :4) AND (:5 = '' OR r.environment_id = :6)
      AND (:7 = '' OR SUBSTR(r.run_id, 1, LENGTH(:8)) = :9)
      AND (:10 = '' OR r.plan_id = :11)
      AND r.created_at >= CAST(:12 AS TIMESTAMP_TZ(9)) AND r.created_at < CAST(:13 AS TIMESTAMP_TZ(9))
      AND (r.created_at < CAST(:14 AS TIMESTAMP_TZ(9)) OR (r.created_at = CAST(:15 AS TIMESTAMP_TZ(9)) AND r.run_id < :16))
),
page AS (
    SELECT * FROM base
    WHERE (:17 = '' OR status = :18) AND (:19 = '' OR trigger_kind = :20) AND (:21 = '' OR schedule_name = :22)
      AND (:23 = '' OR target = :24)
    ORDER BY created_at DESC, run_id DESC
    LIMIT :25
),
times AS (
    SELECT e.run_id,
           MIN(CASE WHEN e.event_type = 'RunStarted' THEN e.emitted_at END) AS started_at,
           MIN(CASE WHEN e.event_type IN ('RunCompleted', 'RunFailed', 'RunCancelled') THEN e.emitted_at END) AS ended_at,
           MIN(CASE WHEN e.event_type = 'StepFailed' THEN e.run_seq END) AS failed_seq
    FROM dvt_run_events e JOIN page p ON p.run_id = e.run_id
    WHERE e.step_id IS NULL OR e.event_type = 'StepFailed'
    GROUP BY e.run_id
)
SELECT p.run_id, p.tenant_id, p.project_id, p.environment_id, p.plan_id, p.plan_version, p.plan_sha256,
       p.target_adapter, p.provider_run_ref, p.run_request_id, p.created_at,
       p.status, p.trigger_kind, p.triggered_by, p.parent_run_id, p.schedule_name, p.target,
       p.interval_start, p.interval_end, p.queued_at, t.started_at, t.ended_at,
       COALESCE(f.step_id, ''),
       COALESCE(f.payload:error:code::string, ''),
       COALESCE(f.payload:error:message::string, '')
FROM page p
LEFT JOIN times t ON t.run_id = p.run_id
LEFT JOIN dvt_run_events f ON f.run_id = p.run_id AND f.run_seq = t.failed_seq
ORDER BY p.created_at DESC, p.run_id DESC;

-- name: set_provider_ref
UPDATE dvt_runs SET provider_run_ref = ? WHERE run_id = ?;

-- name: reserve_event_ids
-- One request: the MERGE binds the candidates whose keys are free (it holds
-- the table lock, so two producers reserving one key at once bind it once;
-- the source holds each key once, it comes from a Go map), then the block
-- returns what each key is bound to, a persisted event first. Values are hex
-- literals (script.go): a block takes no binds.
EXECUTE IMMEDIATE $$
DECLARE
  res RESULTSET;
BEGIN
  MERGE INTO dvt_event_ids t
  USING (
      SELECT HEX_DECODE_STRING(v.run_id) AS run_id, HEX_DECODE_STRING(v.idempotency_key) AS idempotency_key,
             HEX_DECODE_STRING(v.event_id) AS event_id,
             CAST(HEX_DECODE_STRING(v.reserved_at) AS TIMESTAMP_TZ(9)) AS reserved_at
      FROM (VALUES /*rows*/) AS v (run_id, idempotency_key, event_id, reserved_at)
  ) s
  ON t.run_id = s.run_id AND t.idempotency_key = s.idempotency_key
  WHEN NOT MATCHED THEN INSERT (run_id, idempotency_key, event_id, reserved_at)
      VALUES (s.run_id, s.idempotency_key, s.event_id, s.reserved_at);
  res := (
    SELECT idempotency_key, event_id, 0 AS pref FROM dvt_run_events
    WHERE run_id = HEX_DECODE_STRING(/*:run_id*/)
      AND idempotency_key IN (SELECT HEX_DECODE_STRING(k.key_hex) FROM (VALUES /*:keys*/) AS k (key_hex))
    UNION ALL
    SELECT idempotency_key, event_id, 1 AS pref FROM dvt_event_ids
    WHERE run_id = HEX_DECODE_STRING(/*:run_id*/)
      AND idempotency_key IN (SELECT HEX_DECODE_STRING(k.key_hex) FROM (VALUES /*:keys*/) AS k (key_hex))
    ORDER BY pref
  );
  RETURN TABLE(res);
END;
$$;

-- name: insert_alert
MERGE INTO dvt_alerts t
USING (
    SELECT CAST(? AS VARCHAR) AS alert_key, CAST(? AS VARCHAR) AS code, CAST(? AS VARCHAR) AS severity,
           CAST(? AS VARCHAR) AS run_id, CAST(? AS VARCHAR) AS tenant_id, CAST(? AS VARCHAR) AS project_id,
           CAST(? AS VARCHAR) AS environment_id, CAST(? AS VARCHAR) AS message,
           PARSE_JSON(CAST(? AS VARCHAR)) AS payload, CAST(? AS TIMESTAMP_TZ(9)) AS created_at
) s
ON t.alert_key = s.alert_key
WHEN NOT MATCHED THEN INSERT (alert_key, code, severity, run_id, tenant_id, project_id, environment_id,
                              message, payload, created_at)
    VALUES (s.alert_key, s.code, s.severity, s.run_id, s.tenant_id, s.project_id, s.environment_id,
            s.message, s.payload, s.created_at);

-- name: list_alerts
SELECT alert_key, code, severity, COALESCE(run_id, ''), COALESCE(tenant_id, ''),
       COALESCE(project_id, ''), COALESCE(environment_id, ''), message, payload, created_at
FROM dvt_alerts
WHERE (? = '' OR run_id = ?)
ORDER BY created_at, alert_key;

-- name: pulse_block
-- store.Store's Pulse in one request (issue 11): a process renews the leases
-- of all its runs and fetches their new signals at once. One UPDATE (the
-- fewer UPDATEs, the less Snowflake's per-table serialisation costs) renews
-- only the rows this owner still holds with the fence it asked for —
-- expired or not; a released lease has owner '' — so a renewal can never
-- extend a lease that passed to someone else; the fence is left alone.
-- Then one query answers the asked runs' lease rows as stored ('L': fence
-- in seq, owner in label, expires_at in stamp) and their signals after each
-- run's cursor ('G'), ordered by run then seq. /*:runs*/ holds a row per
-- asked run: (run id, fence, after_signal). /*:expires_at*/ is now+ttl by
-- the store's clock (Options.Now), or NULL when the database's clock
-- decides: CURRENT_TIMESTAMP plus /*:ttl_ms*/. Values are hex literals and
-- integers (script.go): a block takes no binds.
EXECUTE IMMEDIATE $$
DECLARE
  res RESULTSET;
BEGIN
  -- UPDATE … FROM as documented (UPDATE: the target is named, not aliased).
  UPDATE dvt_leases
  SET expires_at = COALESCE(CAST(HEX_DECODE_STRING(/*:expires_at*/) AS TIMESTAMP_TZ(9)),
                            DATEADD(millisecond, /*:ttl_ms*/, CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9))))
  FROM (SELECT HEX_DECODE_STRING(v.run_id) AS run_id, v.fence
        FROM (VALUES /*:runs*/) AS v (run_id, fence, after_signal)) asked
  WHERE dvt_leases.run_id = asked.run_id AND dvt_leases.fence = asked.fence
    AND dvt_leases.owner = HEX_DECODE_STRING(/*:owner*/) AND dvt_leases.owner <> '';
  res := (
    SELECT 'L' AS kind, lease.run_id, lease.fence AS seq, lease.owner AS label, NULL AS signal_type,
           NULL AS step_id, NULL AS reason, NULL AS requested_by, lease.expires_at AS stamp
    FROM dvt_leases lease
    WHERE lease.run_id IN (SELECT HEX_DECODE_STRING(v.run_id)
                           FROM (VALUES /*:runs*/) AS v (run_id, fence, after_signal))
    UNION ALL
    SELECT 'G', sig.run_id, sig.signal_seq, sig.signal_id, sig.signal_type, COALESCE(sig.step_id, ''),
           COALESCE(sig.reason, ''), COALESCE(sig.requested_by, ''), sig.created_at
    FROM dvt_signals sig
    JOIN (SELECT HEX_DECODE_STRING(v.run_id) AS run_id, v.after_signal
          FROM (VALUES /*:runs*/) AS v (run_id, fence, after_signal)) asked
      ON sig.run_id = asked.run_id AND sig.signal_seq > asked.after_signal
    ORDER BY kind, run_id, seq
  );
  RETURN TABLE(res);
END;
$$;

-- name: send_signal_block
-- A signal in one request (no transaction spans requests, issue 16): under
-- the run's lock, a signal already sent with this id is kept, else it is
-- stored with the run's next signal_seq if the run exists. Answers the
-- stored signal ('S' row), or nothing when the run does not exist.
EXECUTE IMMEDIATE $$
DECLARE
  sent INTEGER DEFAULT 0;
  runs INTEGER DEFAULT 0;
  res RESULTSET;
BEGIN
  BEGIN TRANSACTION;
  UPDATE dvt_run_seq SET next_seq = next_seq WHERE run_id = HEX_DECODE_STRING(/*:run_id*/);
  SELECT COUNT(*) INTO :sent FROM dvt_signals WHERE signal_id = HEX_DECODE_STRING(/*:signal_id*/);
  SELECT COUNT(*) INTO :runs FROM dvt_runs WHERE run_id = HEX_DECODE_STRING(/*:run_id*/);
  IF (sent = 0 AND runs > 0) THEN
    INSERT INTO dvt_signals (run_id, signal_seq, signal_id, signal_type, step_id, reason, requested_by, created_at)
    SELECT HEX_DECODE_STRING(/*:run_id*/),
           (SELECT COALESCE(MAX(signal_seq), 0) + 1 FROM dvt_signals WHERE run_id = HEX_DECODE_STRING(/*:run_id*/)),
           HEX_DECODE_STRING(/*:signal_id*/), HEX_DECODE_STRING(/*:signal_type*/), HEX_DECODE_STRING(/*:step_id*/),
           HEX_DECODE_STRING(/*:reason*/), HEX_DECODE_STRING(/*:requested_by*/),
           CAST(HEX_DECODE_STRING(/*:created_at*/) AS TIMESTAMP_TZ(9));
  END IF;
  res := (
    SELECT 'S' AS kind, run_id, signal_seq, signal_type, COALESCE(step_id, '') AS step_id,
           COALESCE(reason, '') AS reason, COALESCE(requested_by, '') AS requested_by, created_at
    FROM dvt_signals WHERE signal_id = HEX_DECODE_STRING(/*:signal_id*/)
  );
  COMMIT;
  RETURN TABLE(res);
EXCEPTION
  WHEN OTHER THEN
    ROLLBACK;
    RAISE;
END;
$$;

-- name: list_signals
SELECT run_id, signal_seq, signal_id, signal_type, COALESCE(step_id, ''), COALESCE(reason, ''),
       COALESCE(requested_by, ''), created_at
FROM dvt_signals WHERE run_id = ? AND signal_seq > ? ORDER BY signal_seq;

-- name: acquire_lease_block
-- AcquireFencedLease in one request (issue 11): under the run's lock (the
-- lock every append takes first, so a takeover and a stale runner's append
-- are serialised) one statement reads the clock and the lease and decides:
-- held is 1 when another owner's lease has not expired, next_fence is the
-- fence the caller gets (kept on a renewal by the owner, one more for a new
-- owner: a takeover, an acquire after a release, the first acquire). The
-- clock is the client's (now_at and expires_at, when the store has
-- Options.Now) or the database's, the one clock every runner of a run
-- shares: then the lease expires ttl_ms after it, as pulse_block renews
-- it. The answer is one row, the outcome (ACQUIRED or LEASE_HELD) with the
-- lease as stored: the caller's, or the holder's. Values are hex literals
-- and integers (script.go).
EXECUTE IMMEDIATE $$
DECLARE
  at_now TIMESTAMP_TZ(9);
  held INTEGER DEFAULT 0;
  next_fence INTEGER DEFAULT 1;
  outcome VARCHAR DEFAULT 'LEASE_HELD';
  res RESULTSET;
BEGIN
  BEGIN TRANSACTION;
  UPDATE dvt_run_seq SET next_seq = next_seq WHERE run_id = HEX_DECODE_STRING(/*:run_id*/);
  SELECT MAX(clock.at_now),
         COALESCE(MAX(CASE WHEN lease.owner <> HEX_DECODE_STRING(/*:owner*/) AND lease.expires_at > clock.at_now
                           THEN 1 ELSE 0 END), 0),
         COALESCE(MAX(lease.fence + CASE WHEN lease.owner = HEX_DECODE_STRING(/*:owner*/) THEN 0 ELSE 1 END), 1)
    INTO :at_now, :held, :next_fence
    FROM (SELECT COALESCE(CAST(HEX_DECODE_STRING(/*:now_at*/) AS TIMESTAMP_TZ(9)),
                          CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9))) AS at_now) clock
    LEFT JOIN dvt_leases lease ON lease.run_id = HEX_DECODE_STRING(/*:run_id*/);
  IF (held = 0) THEN
    MERGE INTO dvt_leases t
    USING (
        SELECT HEX_DECODE_STRING(/*:run_id*/) AS run_id, HEX_DECODE_STRING(/*:owner*/) AS owner,
               :at_now AS now_at,
               COALESCE(CAST(HEX_DECODE_STRING(/*:expires_at*/) AS TIMESTAMP_TZ(9)),
                        DATEADD(millisecond, /*:ttl_ms*/, :at_now)) AS expires_at,
               :next_fence AS fence
    ) s
    ON t.run_id = s.run_id
    WHEN MATCHED THEN
        UPDATE SET owner = s.owner, acquired_at = s.now_at, expires_at = s.expires_at, fence = s.fence
    WHEN NOT MATCHED THEN INSERT (run_id, owner, acquired_at, expires_at, fence)
        VALUES (s.run_id, s.owner, s.now_at, s.expires_at, s.fence);
    outcome := 'ACQUIRED';
  END IF;
  res := (
    SELECT :outcome AS outcome, owner, expires_at, fence
    FROM dvt_leases WHERE run_id = HEX_DECODE_STRING(/*:run_id*/)
  );
  COMMIT;
  RETURN TABLE(res);
EXCEPTION
  WHEN OTHER THEN
    ROLLBACK;
    RAISE;
END;
$$;

-- name: get_lease
-- A released lease keeps its row (owner '') for its fence: it reads as none.
SELECT owner, expires_at FROM dvt_leases WHERE run_id = ? AND owner <> '';

-- name: release_lease
-- The row stays, ownerless and expired, so the fence keeps growing.
UPDATE dvt_leases SET owner = '', expires_at = acquired_at WHERE run_id = ? AND owner = ?;

-- name: count_outbox
SELECT COUNT(*) FROM dvt_outbox WHERE run_id = ?;
