-- The tamper-evident log's statements (store.AuditSQL, issue 19). Same
-- names in every dialect.

-- name: audit_runs
-- Every run with its sequence row, where its chain starts and when
-- retention removed its payloads ('' if it did not; migration 0550).
SELECT s.run_id, s.status, s.next_seq, COALESCE(g.first_seq, 1), COALESCE(r.removed_at, '')
FROM dvt_run_seq s LEFT JOIN dvt_audit_genesis g ON g.run_id = s.run_id
LEFT JOIN dvt_audit_retention r ON r.run_id = s.run_id
ORDER BY s.run_id;

-- name: audit_run
SELECT s.run_id, s.status, s.next_seq, COALESCE(g.first_seq, 1), COALESCE(r.removed_at, '')
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

-- name: audit_retain_mark
-- Records for retention every ended run whose terminal event was persisted
-- before the cutoff and whose every event is chained and covered by the
-- newest signed checkpoint (so its leaf hashes are signed before its
-- payloads go). Args: removed_at, cutoff, cutoff (times as stored text).
INSERT INTO dvt_audit_retention (run_id, removed_at, cutoff)
SELECT s.run_id, ?1, ?2 FROM dvt_run_seq s
WHERE s.status IN ('COMPLETED', 'FAILED', 'CANCELLED')
  AND NOT EXISTS (SELECT 1 FROM dvt_audit_retention r WHERE r.run_id = s.run_id)
  AND EXISTS (SELECT 1 FROM dvt_run_events t WHERE t.run_id = s.run_id
              AND t.event_type IN ('RunCompleted', 'RunFailed', 'RunCancelled') AND t.persisted_at < ?3)
  AND NOT EXISTS (SELECT 1 FROM dvt_run_events e WHERE e.run_id = s.run_id AND (e.hash IS NULL OR NOT EXISTS (
        SELECT 1 FROM dvt_audit_log l WHERE l.run_id = e.run_id AND l.run_seq = e.run_seq
          AND l.log_index < (SELECT COALESCE(MAX(c.tree_size), 0) FROM dvt_audit_checkpoints c))));

-- name: audit_retain_remove
-- Removes the payloads of the runs recorded for retention; hash and
-- prev_hash stay (the append-only trigger lets exactly this through).
UPDATE dvt_run_events SET payload = NULL
WHERE run_id IN (SELECT run_id FROM dvt_audit_retention) AND payload IS NOT NULL;

-- name: audit_latest_checkpoint
SELECT tree_size, root_hash, note FROM dvt_audit_checkpoints ORDER BY tree_size DESC LIMIT 1;

-- name: audit_triggers
-- The append-only triggers present (audit doctor).
SELECT name FROM sqlite_master WHERE type = 'trigger' AND name IN (
    'dvt_run_events_no_update', 'dvt_run_events_no_delete',
    'dvt_audit_genesis_no_update', 'dvt_audit_genesis_no_delete',
    'dvt_audit_log_no_update', 'dvt_audit_log_no_delete',
    'dvt_audit_checkpoints_no_update', 'dvt_audit_checkpoints_no_delete');
