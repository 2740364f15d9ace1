-- Retention of the tamper-evident log (issue 19): `dvtrun audit retain`
-- removes the payloads (payload and event_bytes) of old ended runs whose
-- every chained event a signed checkpoint covers, and keeps prev_hash and
-- hash (the leaf hashes the checkpoints sign), so the log still proves
-- itself. This table records which runs lost their payloads and when, so
-- verification names them instead of reporting a break. Snowflake has no
-- triggers: README gives the grants (UPDATE on dvt_run_events only to the
-- role that runs retention).
CREATE TABLE IF NOT EXISTS dvt_audit_retention (
    run_id     VARCHAR NOT NULL,
    removed_at VARCHAR NOT NULL,
    cutoff     VARCHAR NOT NULL
);

-- The chain view: an event whose hashed bytes retention removed is ok
-- when its links hold, and retained says why.
CREATE OR REPLACE VIEW dvt_audit_chain AS
SELECT c.run_id, c.run_seq, c.prev_hash, c.hash, c.recomputed_hash,
       ((c.recomputed_hash = c.hash OR (c.retained AND c.payload_removed))
        AND c.prev_hash = COALESCE(c.previous_hash, REPEAT('0', 64))
        AND c.run_seq = COALESCE(c.previous_seq + 1, c.first_seq)) AS ok,
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
    LEFT JOIN dvt_audit_retention r ON r.run_id = e.run_id
    WHERE e.hash IS NOT NULL
) c;
