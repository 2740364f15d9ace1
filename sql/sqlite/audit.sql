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
WHERE s.run_id = ?;

-- name: audit_links
-- The hashed bytes are the row's columns (audit.EventBytesV2, or EventBytes
-- for v1 events): none stored.
SELECT run_seq, prev_hash, hash, CAST(NULL AS TEXT), payload_sha256, CAST(NULL AS TEXT)
FROM dvt_run_events WHERE run_id = ? ORDER BY run_seq;

-- name: audit_event_runs
-- The runs of the event table itself (audit verify cross-checks them with
-- dvt_runs, dvt_run_seq and the global log).
SELECT DISTINCT run_id FROM dvt_run_events ORDER BY run_id;

-- name: audit_event_run
SELECT DISTINCT run_id FROM dvt_run_events WHERE run_id = ?;

-- name: audit_registered_runs
SELECT run_id FROM dvt_runs ORDER BY run_id;

-- name: audit_registered_run
SELECT run_id FROM dvt_runs WHERE run_id = ?;

-- name: audit_log
SELECT log_index, run_id, run_seq, hash FROM dvt_audit_log WHERE log_index >= ? ORDER BY log_index;

-- name: audit_log_entry
SELECT log_index, run_id, run_seq, hash FROM dvt_audit_log WHERE run_id = ? AND run_seq = ?;

-- name: audit_assign
-- Gives every chained event not yet in the global log the next indexes,
-- in the order the store persisted them. Runs under the write lock.
INSERT INTO dvt_audit_log (log_index, run_id, run_seq, hash)
SELECT (SELECT COALESCE(MAX(log_index) + 1, 0) FROM dvt_audit_log)
         + ROW_NUMBER() OVER (ORDER BY e.persisted_at, e.run_id, e.run_seq) - 1,
       e.run_id, e.run_seq, e.hash
FROM dvt_run_events e
WHERE e.hash IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM dvt_audit_log l WHERE l.run_id = e.run_id AND l.run_seq = e.run_seq);

-- name: audit_checkpoints
SELECT tree_size, root_hash, note FROM dvt_audit_checkpoints ORDER BY tree_size;

-- name: audit_insert_checkpoint
-- Two checkpointers signing the same size sign the same root: the first
-- row stays.
INSERT INTO dvt_audit_checkpoints (tree_size, root_hash, note, created_at)
SELECT ?1, ?2, ?3, ?4 WHERE NOT EXISTS (SELECT 1 FROM dvt_audit_checkpoints WHERE tree_size = ?5)
ON CONFLICT (tree_size) DO NOTHING;

-- name: audit_checkpoints_between
-- The checkpoints of tree sizes lo..hi (the outbox's checkpoint deliveries).
SELECT tree_size, root_hash, note FROM dvt_audit_checkpoints WHERE tree_size BETWEEN ?1 AND ?2 ORDER BY tree_size;

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
              AND t.event_type IN ('RunCompleted', 'RunFailed', 'RunCancelled') AND t.persisted_at < ?1)
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
              AND t.event_type IN ('RunCompleted', 'RunFailed', 'RunCancelled') AND t.persisted_at < ?1)
  AND EXISTS (SELECT 1 FROM dvt_run_events v WHERE v.run_id = s.run_id AND v.payload IS NOT NULL AND v.payload_sha256 IS NULL);

-- name: audit_retain_next
-- The last retention ordinal, the next log index and the newest signed
-- size, read under the write lock.
SELECT (SELECT COALESCE(MAX(seq), 0) FROM dvt_audit_retention),
       (SELECT COALESCE(MAX(log_index) + 1, 0) FROM dvt_audit_log),
       (SELECT COALESCE(MAX(tree_size), 0) FROM dvt_audit_checkpoints);

-- name: audit_retain_log
-- A retention record's entry in the global log: the reserved run id
-- (audit.RetentionRunID), its ordinal, the hash of its signed note.
INSERT INTO dvt_audit_log (log_index, run_id, run_seq, hash) VALUES (?1, 'dvtrun.audit.retention', ?2, ?3);

-- name: audit_retain_insert
INSERT INTO dvt_audit_retention (run_id, removed_at, cutoff, seq, older_than, covered, note) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7);

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
-- append-only trigger lets exactly this through). "hash IS NOT NULL AND
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

-- name: audit_triggers
-- The append-only triggers present (audit doctor).
SELECT name FROM sqlite_master WHERE type = 'trigger' AND name IN (
    'dvt_run_events_no_update', 'dvt_run_events_no_delete',
    'dvt_audit_genesis_no_update', 'dvt_audit_genesis_no_delete',
    'dvt_audit_log_no_update', 'dvt_audit_log_no_delete',
    'dvt_audit_checkpoints_no_update', 'dvt_audit_checkpoints_no_delete',
    'dvt_audit_genesis_no_insert', 'dvt_audit_retention_no_insert',
    'dvt_audit_retention_no_update', 'dvt_audit_retention_no_delete',
    'dvt_run_seq_no_update', 'dvt_run_seq_no_delete', 'dvt_runs_no_update', 'dvt_runs_no_delete');
