-- The v2 chain form (issue 25): events appended from now on are hashed as
-- "dvtrun-chain-v2" with every column but the payload, which enters as its
-- SHA-256 digest (payload_sha256: lowercase hex; NULL for an event appended
-- without a payload). event_bytes holds the v2 bytes, which no longer carry
-- the payload, so retention keeps them. The payload VARIANT re-serialises,
-- so the digest is over payload_text, the JSON text exactly as appended;
-- audit verify checks the VARIANT against it as a JSON value, and retention
-- removes both. Events chained before keep their v1 links. Each statement
-- runs on its own: every one is idempotent.
ALTER TABLE dvt_run_events ADD COLUMN IF NOT EXISTS payload_sha256 VARCHAR;
ALTER TABLE dvt_run_events ADD COLUMN IF NOT EXISTS payload_text VARCHAR;

-- The chain view recomputes either form from event_bytes and checks a v2
-- payload_text against its digest; chain_form says which form matched.
-- (That event_bytes say what the columns say is audit verify's check.)
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
    LEFT JOIN dvt_audit_retention r ON r.run_id = e.run_id
    WHERE e.hash IS NOT NULL
) c;
