-- Retention is signed evidence (issue 25): a row of dvt_audit_retention is
-- accepted by `audit verify` only with its record — run, policy, cutoff,
-- time and the checkpoint that covered the run's events — signed with the
-- audit key (note) and appended to the global log under the reserved run
-- id 'dvtrun.audit.retention' with run_seq = seq, the record's ordinal.
-- Rows made before this migration have no record: verify names them.
-- Snowflake has no triggers: the guards on dvt_audit_retention,
-- dvt_audit_genesis, dvt_run_seq and dvt_runs are grants (README and
-- docs/guides/auditing-retention.md; `dvtrun audit doctor` checks them).
-- Each statement runs on its own: every one is idempotent.
ALTER TABLE dvt_audit_retention ADD COLUMN IF NOT EXISTS seq BIGINT; -- BIGINT: NUMBER(38, 0) in Snowflake
ALTER TABLE dvt_audit_retention ADD COLUMN IF NOT EXISTS older_than VARCHAR;
ALTER TABLE dvt_audit_retention ADD COLUMN IF NOT EXISTS covered BIGINT;
ALTER TABLE dvt_audit_retention ADD COLUMN IF NOT EXISTS note VARCHAR;

-- The chain view: a payload-less event is ok only in a run whose retention
-- row has its signed record in the log below a stored checkpoint (the
-- signature itself is `audit verify`'s to check). Without event_bytes the
-- recomputed hash is NULL: ok is then false, not NULL, so `WHERE NOT ok`
-- finds the row.
CREATE OR REPLACE VIEW dvt_audit_chain AS
SELECT c.run_id, c.run_seq, c.prev_hash, c.hash, c.recomputed_hash,
       COALESCE((c.recomputed_hash = c.hash OR (c.retained AND c.payload_removed))
        AND c.prev_hash = COALESCE(c.previous_hash, REPEAT('0', 64))
        AND c.run_seq = COALESCE(c.previous_seq + 1, c.first_seq), FALSE) AS ok,
       c.retained
FROM (
    SELECT e.run_id, e.run_seq, e.prev_hash, e.hash,
           SHA2('dvtrun-chain-v1' || CHR(10) || e.run_id || CHR(10) || CAST(e.run_seq AS VARCHAR)
                || CHR(10) || e.event_bytes || CHR(10) || e.prev_hash, 256) AS recomputed_hash,
           LAG(e.hash) OVER (PARTITION BY e.run_id ORDER BY e.run_seq) AS previous_hash,
           LAG(e.run_seq) OVER (PARTITION BY e.run_id ORDER BY e.run_seq) AS previous_seq,
           COALESCE(g.first_seq, 1) AS first_seq,
           r.run_id IS NOT NULL AS retained,
           e.event_bytes IS NULL AS payload_removed
    FROM dvt_run_events e LEFT JOIN dvt_audit_genesis g ON g.run_id = e.run_id
    LEFT JOIN (SELECT r.run_id FROM dvt_audit_retention r
               JOIN dvt_audit_log l ON l.run_id = 'dvtrun.audit.retention' AND l.run_seq = r.seq
               WHERE r.note IS NOT NULL
                 AND l.log_index < (SELECT COALESCE(MAX(c.tree_size), 0) FROM dvt_audit_checkpoints c)) r
      ON r.run_id = e.run_id
    WHERE e.hash IS NOT NULL
) c;
