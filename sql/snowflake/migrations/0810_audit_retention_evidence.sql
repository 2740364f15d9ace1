-- Retention is signed evidence (issue 25): a row of dvt_audit_retention is
-- accepted by `audit verify` only with its record — run, policy, cutoff,
-- time and the checkpoint that covered the run's events — signed with the
-- audit key (note) and appended to the global log under the reserved run
-- id 'dvtrun.audit.retention' with run_seq = seq, the record's ordinal.
-- Rows made before this migration have no record: verify names them.
-- Snowflake has no triggers: the guards on dvt_audit_retention,
-- dvt_audit_genesis, dvt_run_seq and dvt_runs are grants (README and
-- docs/guides/auditing.md; `dvtrun audit doctor` checks them).
-- Each statement runs on its own: every one is idempotent.
ALTER TABLE dvt_audit_retention ADD COLUMN IF NOT EXISTS seq BIGINT; -- BIGINT: NUMBER(38, 0) in Snowflake
ALTER TABLE dvt_audit_retention ADD COLUMN IF NOT EXISTS older_than VARCHAR;
ALTER TABLE dvt_audit_retention ADD COLUMN IF NOT EXISTS covered BIGINT;
ALTER TABLE dvt_audit_retention ADD COLUMN IF NOT EXISTS note VARCHAR;

-- The chain view recomputes each chained event from event_bytes in the v2
-- form (migration 0800: the payload as its digest) or v1 (chain_form says
-- which; that event_bytes say what the columns say is audit verify's
-- check) and a v2 payload_text against its digest. A v2 event without its
-- payload is ok only in a run whose retention row has its signed record in
-- the log below a stored checkpoint (the signature itself is `audit
-- verify`'s to check); a v1 event without its payload never is. ok is
-- never NULL, so `WHERE NOT ok` finds every bad row.
CREATE OR REPLACE VIEW dvt_audit_chain AS
SELECT c.run_id, c.run_seq, c.prev_hash, c.hash,
       CASE WHEN c.v2_hash = c.hash THEN c.v2_hash ELSE c.v1_hash END AS recomputed_hash,
       COALESCE((c.v2_hash = c.hash OR c.v1_hash = c.hash)
        AND c.prev_hash = COALESCE(c.previous_hash, REPEAT('0', 64))
        AND c.run_seq = COALESCE(c.previous_seq + 1, c.first_seq)
        AND (c.v2_hash <> c.hash
             OR (c.payload_sha256 IS NULL AND c.payload_text IS NULL AND c.payload_null)
             OR (c.payload_sha256 IS NOT NULL AND c.payload_text IS NULL AND c.payload_null AND c.retained)
             OR (c.payload_sha256 IS NOT NULL AND SHA2(c.payload_text, 256) = c.payload_sha256)), FALSE) AS ok,
       c.retained,
       CASE WHEN c.v2_hash = c.hash THEN 'v2' WHEN c.v1_hash = c.hash THEN 'v1' END AS chain_form
FROM (
    SELECT e.run_id, e.run_seq, e.prev_hash, e.hash, e.payload_sha256, e.payload_text,
           e.payload IS NULL AS payload_null,
           SHA2('dvtrun-chain-v1' || CHR(10) || e.run_id || CHR(10) || CAST(e.run_seq AS VARCHAR)
                || CHR(10) || e.event_bytes || CHR(10) || e.prev_hash, 256) AS v1_hash,
           SHA2('dvtrun-chain-v2' || CHR(10) || e.run_id || CHR(10) || CAST(e.run_seq AS VARCHAR)
                || CHR(10) || e.event_bytes || CHR(10) || e.prev_hash, 256) AS v2_hash,
           LAG(e.hash) OVER (PARTITION BY e.run_id ORDER BY e.run_seq) AS previous_hash,
           LAG(e.run_seq) OVER (PARTITION BY e.run_id ORDER BY e.run_seq) AS previous_seq,
           COALESCE(g.first_seq, 1) AS first_seq,
           r.run_id IS NOT NULL AS retained
    FROM dvt_run_events e LEFT JOIN dvt_audit_genesis g ON g.run_id = e.run_id
    LEFT JOIN (SELECT DISTINCT r.run_id FROM dvt_audit_retention r
               JOIN dvt_audit_log l ON l.run_id = 'dvtrun.audit.retention' AND l.run_seq = r.seq
               WHERE r.note IS NOT NULL
                 AND l.log_index < (SELECT COALESCE(MAX(c.tree_size), 0) FROM dvt_audit_checkpoints c)) r
      ON r.run_id = e.run_id
    WHERE e.hash IS NOT NULL
) c;
