-- The tamper-evident log's statements (store.AuditSQL, issue 19). Same
-- names in every dialect.

-- name: audit_runs
-- Every run with its sequence row, where its chain starts and when
-- retention removed its payloads ('' if it did not; migration 0550) and
-- its chain head (last_hash), which verify compares with the chain.
SELECT s.run_id, s.status, s.next_seq, COALESCE(g.first_seq, 1), COALESCE(r.removed_at, ''), COALESCE(s.last_hash, '')
FROM dvt_run_seq s LEFT JOIN dvt_audit_genesis g ON g.run_id = s.run_id
LEFT JOIN dvt_audit_retention r ON r.run_id = s.run_id
ORDER BY s.run_id;

-- name: audit_run
SELECT s.run_id, s.status, s.next_seq, COALESCE(g.first_seq, 1), COALESCE(r.removed_at, ''), COALESCE(s.last_hash, '')
FROM dvt_run_seq s LEFT JOIN dvt_audit_genesis g ON g.run_id = s.run_id
LEFT JOIN dvt_audit_retention r ON r.run_id = s.run_id
WHERE s.run_id = $1;

-- name: audit_links
-- The hashed bytes are the row's columns (audit.EventBytesV2, or EventBytes
-- for v1 events): none stored.
SELECT run_seq, prev_hash, hash, CAST(NULL AS TEXT), payload_sha256, CAST(NULL AS TEXT)
FROM dvt_run_events WHERE run_id = $1 ORDER BY run_seq;

-- name: audit_event_runs
-- The runs of the event table itself (audit verify cross-checks them with
-- dvt_runs, dvt_run_seq and the global log).
SELECT DISTINCT run_id FROM dvt_run_events ORDER BY run_id;

-- name: audit_event_run
SELECT DISTINCT run_id FROM dvt_run_events WHERE run_id = $1;

-- name: audit_registered_runs
SELECT run_id FROM dvt_runs ORDER BY run_id;

-- name: audit_registered_run
SELECT run_id FROM dvt_runs WHERE run_id = $1;

-- name: audit_log
SELECT log_index, run_id, run_seq, hash FROM dvt_audit_log WHERE log_index >= $1 ORDER BY log_index;

-- name: audit_log_entry
SELECT log_index, run_id, run_seq, hash FROM dvt_audit_log WHERE run_id = $1 AND run_seq = $2;

-- name: audit_lock
-- Serialises the checkpointers for the length of the transaction (appends
-- never take it). An advisory lock, not LOCK TABLE: that would need UPDATE
-- or DELETE on dvt_audit_log, which README's role for dvtrun does not have.
SELECT pg_advisory_xact_lock(hashtext('dvtrun/audit'));

-- name: audit_assign
-- Gives every chained event not yet in the global log the next indexes,
-- in the order the store persisted them. Runs under audit_lock.
INSERT INTO dvt_audit_log (log_index, run_id, run_seq, hash)
SELECT (SELECT COALESCE(MAX(log_index) + 1, 0) FROM dvt_audit_log)
         + ROW_NUMBER() OVER (ORDER BY e.persisted_at, e.run_id, e.run_seq) - 1,
       e.run_id, e.run_seq, e.hash
FROM dvt_run_events e
WHERE e.hash IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM dvt_audit_log l WHERE l.run_id = e.run_id AND l.run_seq = e.run_seq);

-- name: audit_checkpoints
SELECT tree_size, root_hash, note FROM dvt_audit_checkpoints ORDER BY tree_size;

-- name: audit_checkpoints_between
-- The checkpoints of tree sizes lo..hi (the outbox's checkpoint deliveries).
SELECT tree_size, root_hash, note FROM dvt_audit_checkpoints WHERE tree_size BETWEEN $1 AND $2 ORDER BY tree_size;

-- name: audit_retain_candidates
-- The runs retention may record (issue 25): ended, the terminal event
-- persisted before the cutoff, not recorded yet, and every event chained
-- and in the log below the newest signed checkpoint (so its leaf hashes
-- are signed before its payloads go), and no event holding its payload in
-- the v1 form (payload_sha256 NULL: its hash covers the payload, so it is
-- never removed; audit.PayloadRemovable). Arg: cutoff (time as stored text).
SELECT s.run_id FROM dvt_run_seq s
WHERE s.status IN ('COMPLETED', 'FAILED', 'CANCELLED')
  AND NOT EXISTS (SELECT 1 FROM dvt_audit_retention r WHERE r.run_id = s.run_id)
  AND EXISTS (SELECT 1 FROM dvt_run_events t WHERE t.run_id = s.run_id
              AND t.event_type IN ('RunCompleted', 'RunFailed', 'RunCancelled') AND t.persisted_at < $1)
  AND NOT EXISTS (SELECT 1 FROM dvt_run_events e WHERE e.run_id = s.run_id AND (e.hash IS NULL OR NOT EXISTS (
        SELECT 1 FROM dvt_audit_log l WHERE l.run_id = e.run_id AND l.run_seq = e.run_seq
          AND l.log_index < (SELECT COALESCE(MAX(c.tree_size), 0) FROM dvt_audit_checkpoints c))))
  AND NOT EXISTS (SELECT 1 FROM dvt_run_events v WHERE v.run_id = s.run_id AND v.payload IS NOT NULL AND v.payload_sha256 IS NULL)
ORDER BY s.run_id;

-- name: audit_retain_v1
-- How many runs retention skips because they hold v1 events with their
-- payloads (ended before the cutoff, not recorded): reported, never
-- recorded. Arg: cutoff, as audit_retain_candidates.
SELECT COUNT(*) FROM dvt_run_seq s
WHERE s.status IN ('COMPLETED', 'FAILED', 'CANCELLED')
  AND NOT EXISTS (SELECT 1 FROM dvt_audit_retention r WHERE r.run_id = s.run_id)
  AND EXISTS (SELECT 1 FROM dvt_run_events t WHERE t.run_id = s.run_id
              AND t.event_type IN ('RunCompleted', 'RunFailed', 'RunCancelled') AND t.persisted_at < $1)
  AND EXISTS (SELECT 1 FROM dvt_run_events v WHERE v.run_id = s.run_id AND v.payload IS NOT NULL AND v.payload_sha256 IS NULL);

-- name: audit_retain_next
-- The last retention ordinal, the next log index and the newest signed
-- size, read under audit_lock.
SELECT (SELECT COALESCE(MAX(seq), 0) FROM dvt_audit_retention),
       (SELECT COALESCE(MAX(log_index) + 1, 0) FROM dvt_audit_log),
       (SELECT COALESCE(MAX(tree_size), 0) FROM dvt_audit_checkpoints);

-- name: audit_retain_log
-- A retention record's entry in the global log: the reserved run id
-- (audit.RetentionRunID), its ordinal, the hash of its signed note.
INSERT INTO dvt_audit_log (log_index, run_id, run_seq, hash) VALUES ($1, 'dvtrun.audit.retention', $2, $3);

-- name: audit_retain_insert
INSERT INTO dvt_audit_retention (run_id, removed_at, cutoff, seq, older_than, covered, note) VALUES ($1, $2, $3, $4, $5, $6, $7);

-- name: audit_retain_runs
-- How many runs audit_retain_remove will touch.
SELECT COUNT(DISTINCT e.run_id) FROM dvt_run_events e
WHERE e.payload IS NOT NULL AND e.hash IS NOT NULL AND e.payload_sha256 IS NOT NULL AND e.run_id IN (
    SELECT r.run_id FROM dvt_audit_retention r
    JOIN dvt_audit_log l ON l.run_id = 'dvtrun.audit.retention' AND l.run_seq = r.seq
    WHERE r.note IS NOT NULL AND l.log_index < (SELECT COALESCE(MAX(c.tree_size), 0) FROM dvt_audit_checkpoints c));

-- name: audit_retain_remove
-- Removes the payloads of the v2 events of the runs whose signed retention
-- record a checkpoint covers; hash, prev_hash and payload_sha256 stay (the
-- row guard lets exactly this through). "hash IS NOT NULL AND
-- payload_sha256 IS NOT NULL" is audit.PayloadRemovable: a v1 event's
-- payload is never removed.
UPDATE dvt_run_events SET payload = NULL
WHERE payload IS NOT NULL AND hash IS NOT NULL AND payload_sha256 IS NOT NULL AND run_id IN (
    SELECT r.run_id FROM dvt_audit_retention r
    JOIN dvt_audit_log l ON l.run_id = 'dvtrun.audit.retention' AND l.run_seq = r.seq
    WHERE r.note IS NOT NULL AND l.log_index < (SELECT COALESCE(MAX(c.tree_size), 0) FROM dvt_audit_checkpoints c));

-- name: audit_retentions
SELECT run_id, COALESCE(seq, 0), removed_at, cutoff, COALESCE(older_than, ''), COALESCE(covered, 0), COALESCE(note, '')
FROM dvt_audit_retention ORDER BY seq, run_id;

-- name: audit_latest_checkpoint
SELECT tree_size, root_hash, note FROM dvt_audit_checkpoints ORDER BY tree_size DESC LIMIT 1;

-- name: audit_insert_checkpoint
-- Two checkpointers signing the same size sign the same root: the first
-- row stays.
INSERT INTO dvt_audit_checkpoints (tree_size, root_hash, note, created_at)
SELECT $1, $2, $3, $4 WHERE NOT EXISTS (SELECT 1 FROM dvt_audit_checkpoints WHERE tree_size = $5)
ON CONFLICT (tree_size) DO NOTHING;

-- name: audit_chain_view
-- The body of the dvt_audit_chain view (migration 0500).
SELECT c.run_id, c.run_seq, c.prev_hash, c.hash, c.recomputed_hash,
       c.recomputed_hash = c.hash
         AND c.prev_hash = COALESCE(c.previous_hash, repeat('0', 64))
         AND c.run_seq = COALESCE(c.previous_seq + 1, c.first_seq) AS ok
FROM (
    SELECT e.run_id, e.run_seq, e.prev_hash, e.hash,
           encode(sha256(convert_to('dvtrun-chain-v1' || chr(10) || e.run_id || chr(10) || e.run_seq::text || chr(10)
               || octet_length(e.event_id) || ':' || e.event_id
               || octet_length(e.event_type) || ':' || e.event_type
               || COALESCE(octet_length(e.step_id) || ':' || e.step_id, '-')
               || octet_length(e.tenant_id) || ':' || e.tenant_id
               || octet_length(e.project_id) || ':' || e.project_id
               || octet_length(e.environment_id) || ':' || e.environment_id
               || octet_length(e.plan_id) || ':' || e.plan_id
               || octet_length(e.plan_version) || ':' || e.plan_version
               || octet_length(e.logical_attempt_id::text) || ':' || e.logical_attempt_id
               || octet_length(e.engine_attempt_id::text) || ':' || e.engine_attempt_id
               || octet_length(e.idempotency_key) || ':' || e.idempotency_key
               || octet_length(e.emitted_at) || ':' || e.emitted_at
               || octet_length(e.persisted_at) || ':' || e.persisted_at
               || COALESCE(octet_length(e.payload::text) || ':' || e.payload::text, '-')
               || chr(10) || e.prev_hash, 'UTF8')), 'hex') AS recomputed_hash,
           LAG(e.hash) OVER w AS previous_hash,
           LAG(e.run_seq) OVER w AS previous_seq,
           COALESCE(g.first_seq, 1) AS first_seq
    FROM dvt_run_events e LEFT JOIN dvt_audit_genesis g ON g.run_id = e.run_id
    WHERE e.hash IS NOT NULL
    WINDOW w AS (PARTITION BY e.run_id ORDER BY e.run_seq)
) c

-- name: audit_chain_view_retention
-- The body of the dvt_audit_chain view since migration 0550: an event whose
-- payload retention removed (its run in dvt_audit_retention) cannot be
-- rehashed; it is ok when its links hold, and retained says why.
SELECT c.run_id, c.run_seq, c.prev_hash, c.hash, c.recomputed_hash,
       (c.recomputed_hash = c.hash OR (c.retained AND c.payload_removed))
         AND c.prev_hash = COALESCE(c.previous_hash, repeat('0', 64))
         AND c.run_seq = COALESCE(c.previous_seq + 1, c.first_seq) AS ok,
       c.retained
FROM (
    SELECT e.run_id, e.run_seq, e.prev_hash, e.hash,
           encode(sha256(convert_to('dvtrun-chain-v1' || chr(10) || e.run_id || chr(10) || e.run_seq::text || chr(10)
               || octet_length(e.event_id) || ':' || e.event_id
               || octet_length(e.event_type) || ':' || e.event_type
               || COALESCE(octet_length(e.step_id) || ':' || e.step_id, '-')
               || octet_length(e.tenant_id) || ':' || e.tenant_id
               || octet_length(e.project_id) || ':' || e.project_id
               || octet_length(e.environment_id) || ':' || e.environment_id
               || octet_length(e.plan_id) || ':' || e.plan_id
               || octet_length(e.plan_version) || ':' || e.plan_version
               || octet_length(e.logical_attempt_id::text) || ':' || e.logical_attempt_id
               || octet_length(e.engine_attempt_id::text) || ':' || e.engine_attempt_id
               || octet_length(e.idempotency_key) || ':' || e.idempotency_key
               || octet_length(e.emitted_at) || ':' || e.emitted_at
               || octet_length(e.persisted_at) || ':' || e.persisted_at
               || COALESCE(octet_length(e.payload::text) || ':' || e.payload::text, '-')
               || chr(10) || e.prev_hash, 'UTF8')), 'hex') AS recomputed_hash,
           LAG(e.hash) OVER w AS previous_hash,
           LAG(e.run_seq) OVER w AS previous_seq,
           COALESCE(g.first_seq, 1) AS first_seq,
           r.run_id IS NOT NULL AS retained,
           e.payload IS NULL AS payload_removed
    FROM dvt_run_events e LEFT JOIN dvt_audit_genesis g ON g.run_id = e.run_id
    LEFT JOIN dvt_audit_retention r ON r.run_id = e.run_id
    WHERE e.hash IS NOT NULL
    WINDOW w AS (PARTITION BY e.run_id ORDER BY e.run_seq)
) c

-- name: audit_chain_view_signed_retention
-- The body of the dvt_audit_chain view since migration 0810 (issue 25):
-- each chained event's hash recomputed from its columns in the v2 form (the
-- payload as its digest, payload_sha256) or, for events chained before v2,
-- the v1 form; a v2 payload checked against its digest; the links as
-- before. A v2 event whose payload is gone is ok only in a run whose
-- retention row has its signed record in the global log below a stored
-- checkpoint (the signature itself is `audit verify`'s to check); a bare
-- row in dvt_audit_retention makes nothing ok, and a v1 event without its
-- payload never is (its hash covers the payload). chain_form says which
-- form matched (NULL: neither); ok is never NULL.
SELECT c.run_id, c.run_seq, c.prev_hash, c.hash,
       CASE WHEN c.v2_hash = c.hash THEN c.v2_hash ELSE c.v1_hash END AS recomputed_hash,
       COALESCE((c.v2_hash = c.hash OR c.v1_hash = c.hash)
         AND c.prev_hash = COALESCE(c.previous_hash, repeat('0', 64))
         AND c.run_seq = COALESCE(c.previous_seq + 1, c.first_seq)
         AND (c.v2_hash <> c.hash
              OR (c.payload_sha256 IS NULL AND c.payload IS NULL)
              OR (c.payload_sha256 IS NOT NULL AND c.payload IS NULL AND c.retained)
              OR encode(sha256(convert_to(c.payload, 'UTF8')), 'hex') = c.payload_sha256), FALSE) AS ok,
       c.retained,
       CASE WHEN c.v2_hash = c.hash THEN 'v2' WHEN c.v1_hash = c.hash THEN 'v1' END AS chain_form
FROM (
    SELECT e.run_id, e.run_seq, e.prev_hash, e.hash, e.payload_sha256, e.payload::text AS payload,
           encode(sha256(convert_to('dvtrun-chain-v1' || chr(10) || e.run_id || chr(10) || e.run_seq::text || chr(10)
               || octet_length(e.event_id) || ':' || e.event_id
               || octet_length(e.event_type) || ':' || e.event_type
               || COALESCE(octet_length(e.step_id) || ':' || e.step_id, '-')
               || octet_length(e.tenant_id) || ':' || e.tenant_id
               || octet_length(e.project_id) || ':' || e.project_id
               || octet_length(e.environment_id) || ':' || e.environment_id
               || octet_length(e.plan_id) || ':' || e.plan_id
               || octet_length(e.plan_version) || ':' || e.plan_version
               || octet_length(e.logical_attempt_id::text) || ':' || e.logical_attempt_id
               || octet_length(e.engine_attempt_id::text) || ':' || e.engine_attempt_id
               || octet_length(e.idempotency_key) || ':' || e.idempotency_key
               || octet_length(e.emitted_at) || ':' || e.emitted_at
               || octet_length(e.persisted_at) || ':' || e.persisted_at
               || COALESCE(octet_length(e.payload::text) || ':' || e.payload::text, '-')
               || chr(10) || e.prev_hash, 'UTF8')), 'hex') AS v1_hash,
           encode(sha256(convert_to('dvtrun-chain-v2' || chr(10) || e.run_id || chr(10) || e.run_seq::text || chr(10)
               || octet_length(e.event_id) || ':' || e.event_id
               || octet_length(e.event_type) || ':' || e.event_type
               || COALESCE(octet_length(e.step_id) || ':' || e.step_id, '-')
               || octet_length(e.tenant_id) || ':' || e.tenant_id
               || octet_length(e.project_id) || ':' || e.project_id
               || octet_length(e.environment_id) || ':' || e.environment_id
               || octet_length(e.plan_id) || ':' || e.plan_id
               || octet_length(e.plan_version) || ':' || e.plan_version
               || octet_length(e.logical_attempt_id::text) || ':' || e.logical_attempt_id
               || octet_length(e.engine_attempt_id::text) || ':' || e.engine_attempt_id
               || octet_length(e.idempotency_key) || ':' || e.idempotency_key
               || octet_length(e.emitted_at) || ':' || e.emitted_at
               || octet_length(e.persisted_at) || ':' || e.persisted_at
               || COALESCE(octet_length(e.payload_sha256) || ':' || e.payload_sha256, '-')
               || chr(10) || e.prev_hash, 'UTF8')), 'hex') AS v2_hash,
           LAG(e.hash) OVER w AS previous_hash,
           LAG(e.run_seq) OVER w AS previous_seq,
           COALESCE(g.first_seq, 1) AS first_seq,
           r.run_id IS NOT NULL AS retained
    FROM dvt_run_events e LEFT JOIN dvt_audit_genesis g ON g.run_id = e.run_id
    LEFT JOIN (SELECT DISTINCT r.run_id FROM dvt_audit_retention r
               JOIN dvt_audit_log l ON l.run_id = 'dvtrun.audit.retention' AND l.run_seq = r.seq
               WHERE r.note IS NOT NULL
                 AND l.log_index < (SELECT COALESCE(MAX(c.tree_size), 0) FROM dvt_audit_checkpoints c)) r
      ON r.run_id = e.run_id
    WHERE e.hash IS NOT NULL
    WINDOW w AS (PARTITION BY e.run_id ORDER BY e.run_seq)
) c

-- name: audit_guards
-- What this connection may do to the append-only tables (audit doctor):
-- per table, its owner, whether the current user owns it (an owner can
-- disable the triggers), holds UPDATE, DELETE or TRUNCATE, and how many of
-- its append-only triggers are enabled (migrations 0500, 0550, 0810; the
-- expected count per table is in store/postgres/audit.go).
SELECT t.tablename, t.tableowner, t.tableowner = current_user,
       has_table_privilege(current_user, t.tablename, 'UPDATE'),
       has_table_privilege(current_user, t.tablename, 'DELETE'),
       has_table_privilege(current_user, t.tablename, 'TRUNCATE'),
       (SELECT COUNT(*) FROM pg_trigger g
        WHERE g.tgrelid = t.tablename::regclass AND NOT g.tgisinternal AND g.tgenabled <> 'D'
          AND g.tgfoid IN ('dvt_append_only'::regproc, 'dvt_run_events_guard'::regproc,
                           'dvt_audit_retention_insert'::regproc, 'dvt_run_seq_guard'::regproc, 'dvt_runs_guard'::regproc))
FROM pg_tables t
WHERE t.schemaname = current_schema()
  AND t.tablename IN ('dvt_run_events', 'dvt_audit_genesis', 'dvt_audit_log', 'dvt_audit_checkpoints',
                      'dvt_audit_retention', 'dvt_run_seq', 'dvt_runs')
ORDER BY t.tablename;
