-- Tamper-evident log (issue 19): every event appended from now on carries
-- prev_hash and hash (SHA-256 over "dvtrun-chain-v1", run_id, run_seq,
-- event_bytes and prev_hash; README "Tamper-evident log") and event_bytes,
-- the RunEvents JSON the hash covers, stored verbatim as VARCHAR (the
-- payload VARIANT is a re-serialisation; the hash never depends on it).
-- dvt_run_seq.last_hash is the chain's head, advanced by the append block
-- that assigns run_seq. Each statement runs on its own: every one is
-- idempotent.
ALTER TABLE dvt_run_events ADD COLUMN IF NOT EXISTS prev_hash VARCHAR;
ALTER TABLE dvt_run_events ADD COLUMN IF NOT EXISTS hash VARCHAR;
ALTER TABLE dvt_run_events ADD COLUMN IF NOT EXISTS event_bytes VARCHAR;
ALTER TABLE dvt_run_seq ADD COLUMN IF NOT EXISTS last_hash VARCHAR;
UPDATE dvt_run_seq SET last_hash = REPEAT('0', 64) WHERE last_hash IS NULL;

-- Existing events are not backfilled: a run that has events already starts
-- its chain at its next run_seq, with prev_hash 64 zeros, and this row
-- records where. Runs created later have no row: their chain starts at 1.
CREATE TABLE IF NOT EXISTS dvt_audit_genesis (
    run_id      VARCHAR NOT NULL,
    first_seq   NUMBER(38, 0) NOT NULL,
    recorded_at TIMESTAMP_TZ(9) NOT NULL
);
INSERT INTO dvt_audit_genesis (run_id, first_seq, recorded_at)
SELECT s.run_id, s.next_seq, CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9)) FROM dvt_run_seq s
WHERE s.next_seq > 1
  AND NOT EXISTS (SELECT 1 FROM dvt_audit_genesis g WHERE g.run_id = s.run_id)
  AND NOT EXISTS (SELECT 1 FROM dvt_run_events e WHERE e.run_id = s.run_id AND e.hash IS NOT NULL);

-- The global log: the checkpointer gives each chained event the next
-- log_index; the RFC 6962 tree over the hashes in index order is what the
-- checkpoints sign. (Snowflake enforces no key: the checkpointers write
-- under the 'audit' lock row.)
CREATE TABLE IF NOT EXISTS dvt_audit_log (
    log_index NUMBER(38, 0) NOT NULL,
    run_id    VARCHAR NOT NULL,
    run_seq   NUMBER(38, 0) NOT NULL,
    hash      VARCHAR NOT NULL
);

-- Signed checkpoints (C2SP signed notes), one per tree size published.
CREATE TABLE IF NOT EXISTS dvt_audit_checkpoints (
    tree_size  NUMBER(38, 0) NOT NULL,
    root_hash  VARCHAR NOT NULL,
    note       VARCHAR NOT NULL,
    created_at TIMESTAMP_TZ(9) NOT NULL
);

-- The checkpointers' lock row, in a table of its own (an UPDATE locks the
-- whole table until COMMIT: appends and the queue are not held up).
CREATE TABLE IF NOT EXISTS dvt_audit_lock (
    lock_name VARCHAR NOT NULL,
    owner     VARCHAR
);
INSERT INTO dvt_audit_lock (lock_name) SELECT 'audit' WHERE NOT EXISTS (SELECT 1 FROM dvt_audit_lock WHERE lock_name = 'audit');

-- The per-run chain in plain SQL (README "Tamper-evident log"): each
-- chained event's hash recomputed with SHA2, its prev_hash against the
-- previous chained event's hash, and its run_seq against the one before
-- (or the run's chain start). ok is false where a link is broken:
--   SELECT run_id, run_seq FROM dvt_audit_chain WHERE NOT ok ORDER BY run_id, run_seq;
CREATE OR REPLACE VIEW dvt_audit_chain AS
SELECT c.run_id, c.run_seq, c.prev_hash, c.hash, c.recomputed_hash,
       (c.recomputed_hash = c.hash
        AND c.prev_hash = COALESCE(c.previous_hash, REPEAT('0', 64))
        AND c.run_seq = COALESCE(c.previous_seq + 1, c.first_seq)) AS ok
FROM (
    SELECT e.run_id, e.run_seq, e.prev_hash, e.hash,
           SHA2('dvtrun-chain-v1' || CHR(10) || e.run_id || CHR(10) || CAST(e.run_seq AS VARCHAR)
                || CHR(10) || e.event_bytes || CHR(10) || e.prev_hash, 256) AS recomputed_hash,
           LAG(e.hash) OVER (PARTITION BY e.run_id ORDER BY e.run_seq) AS previous_hash,
           LAG(e.run_seq) OVER (PARTITION BY e.run_id ORDER BY e.run_seq) AS previous_seq,
           COALESCE(g.first_seq, 1) AS first_seq
    FROM dvt_run_events e LEFT JOIN dvt_audit_genesis g ON g.run_id = e.run_id
    WHERE e.hash IS NOT NULL
) c;
