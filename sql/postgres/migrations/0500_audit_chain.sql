-- Tamper-evident log (issue 19): every event appended from now on carries
-- prev_hash and hash: SHA-256 over "dvtrun-chain-v1", run_id, run_seq, the
-- row's columns as stored (length-prefixed; the payload's json text is kept
-- byte for byte) and prev_hash (README "Tamper-evident log").
-- dvt_run_seq.last_hash is the chain's head, read under the run's row lock
-- and advanced in the append transaction that assigns run_seq.
ALTER TABLE dvt_run_events ADD COLUMN prev_hash TEXT, ADD COLUMN hash TEXT;
ALTER TABLE dvt_run_seq ADD COLUMN last_hash TEXT NOT NULL
    DEFAULT '0000000000000000000000000000000000000000000000000000000000000000';

-- Existing events are not backfilled: a run that has events already starts
-- its chain at its next run_seq, with prev_hash 64 zeros, and this row
-- records where. Runs created later have no row: their chain starts at 1.
CREATE TABLE dvt_audit_genesis (
    run_id      TEXT NOT NULL PRIMARY KEY,
    first_seq   BIGINT NOT NULL,
    recorded_at TEXT NOT NULL
);
INSERT INTO dvt_audit_genesis (run_id, first_seq, recorded_at)
SELECT run_id, next_seq, dvt_now() FROM dvt_run_seq WHERE next_seq > 1;

-- The global log: the checkpointer gives each chained event the next
-- log_index; the RFC 6962 tree over the hashes in index order is what the
-- checkpoints sign.
CREATE TABLE dvt_audit_log (
    log_index BIGINT NOT NULL PRIMARY KEY,
    run_id    TEXT NOT NULL,
    run_seq   BIGINT NOT NULL,
    hash      TEXT NOT NULL,
    UNIQUE (run_id, run_seq)
);

-- Signed checkpoints (C2SP signed notes), one per tree size published.
CREATE TABLE dvt_audit_checkpoints (
    tree_size  BIGINT NOT NULL PRIMARY KEY,
    root_hash  TEXT NOT NULL,
    note       TEXT NOT NULL,
    created_at TEXT NOT NULL
);

-- Append-only: the event log, the genesis rows, the global log and the
-- checkpoints refuse UPDATE, DELETE and TRUNCATE. A later migration that
-- must change them disables the trigger in its own transaction. The table
-- owner can do the same, which is why the README's role for dvtrun has no
-- UPDATE, DELETE or TRUNCATE on them and does not own them.
CREATE FUNCTION dvt_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER dvt_run_events_append_only BEFORE UPDATE OR DELETE ON dvt_run_events
    FOR EACH ROW EXECUTE FUNCTION dvt_append_only();
CREATE TRIGGER dvt_run_events_no_truncate BEFORE TRUNCATE ON dvt_run_events
    FOR EACH STATEMENT EXECUTE FUNCTION dvt_append_only();
CREATE TRIGGER dvt_audit_genesis_append_only BEFORE UPDATE OR DELETE ON dvt_audit_genesis
    FOR EACH ROW EXECUTE FUNCTION dvt_append_only();
CREATE TRIGGER dvt_audit_genesis_no_truncate BEFORE TRUNCATE ON dvt_audit_genesis
    FOR EACH STATEMENT EXECUTE FUNCTION dvt_append_only();
CREATE TRIGGER dvt_audit_log_append_only BEFORE UPDATE OR DELETE ON dvt_audit_log
    FOR EACH ROW EXECUTE FUNCTION dvt_append_only();
CREATE TRIGGER dvt_audit_log_no_truncate BEFORE TRUNCATE ON dvt_audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION dvt_append_only();
CREATE TRIGGER dvt_audit_checkpoints_append_only BEFORE UPDATE OR DELETE ON dvt_audit_checkpoints
    FOR EACH ROW EXECUTE FUNCTION dvt_append_only();
CREATE TRIGGER dvt_audit_checkpoints_no_truncate BEFORE TRUNCATE ON dvt_audit_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION dvt_append_only();

-- The per-run chain in plain SQL (README "Tamper-evident log"): each
-- chained event's hash recomputed with sha256, its prev_hash against the
-- previous chained event's hash, and its run_seq against the one before
-- (or the run's chain start). ok is false where a link is broken:
--   SELECT run_id, run_seq FROM dvt_audit_chain WHERE NOT ok ORDER BY run_id, run_seq;
CREATE VIEW dvt_audit_chain AS
/*include audit.sql audit_chain_view*/;
