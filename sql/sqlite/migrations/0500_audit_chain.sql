-- Tamper-evident log (issue 19): every event appended from now on carries
-- prev_hash and hash: SHA-256 over "dvtrun-chain-v1", run_id, run_seq, the
-- row's columns as stored (length-prefixed) and prev_hash (README
-- "Tamper-evident log"). dvt_run_seq.last_hash is the chain's head, read and
-- advanced in the append transaction that assigns run_seq.
ALTER TABLE dvt_run_events ADD COLUMN prev_hash TEXT;
ALTER TABLE dvt_run_events ADD COLUMN hash TEXT;
ALTER TABLE dvt_run_seq ADD COLUMN last_hash TEXT NOT NULL
    DEFAULT '0000000000000000000000000000000000000000000000000000000000000000';

-- Existing events are not backfilled: a run that has events already starts
-- its chain at its next run_seq, with prev_hash 64 zeros, and this row
-- records where. Runs created later have no row: their chain starts at 1.
CREATE TABLE dvt_audit_genesis (
    run_id      TEXT NOT NULL PRIMARY KEY,
    first_seq   INTEGER NOT NULL,
    recorded_at TEXT NOT NULL
) WITHOUT ROWID;
INSERT INTO dvt_audit_genesis (run_id, first_seq, recorded_at)
SELECT run_id, next_seq, strftime('%Y-%m-%dT%H:%M:%f000000Z', 'now') FROM dvt_run_seq WHERE next_seq > 1;

-- The global log: the checkpointer gives each chained event the next
-- log_index; the RFC 6962 tree over the hashes in index order is what the
-- checkpoints sign.
CREATE TABLE dvt_audit_log (
    log_index INTEGER NOT NULL PRIMARY KEY,
    run_id    TEXT NOT NULL,
    run_seq   INTEGER NOT NULL,
    hash      TEXT NOT NULL,
    UNIQUE (run_id, run_seq)
);

-- Signed checkpoints (C2SP signed notes), one per tree size published.
CREATE TABLE dvt_audit_checkpoints (
    tree_size  INTEGER NOT NULL PRIMARY KEY,
    root_hash  TEXT NOT NULL,
    note       TEXT NOT NULL,
    created_at TEXT NOT NULL
);

-- Append-only: the event log, the genesis rows, the global log and the
-- checkpoints refuse UPDATE and DELETE. A later migration that must change
-- them drops the trigger and creates it again in its own transaction.
CREATE TRIGGER dvt_run_events_no_update BEFORE UPDATE ON dvt_run_events
BEGIN SELECT RAISE(ABORT, 'dvt_run_events is append-only: UPDATE refused'); END;
CREATE TRIGGER dvt_run_events_no_delete BEFORE DELETE ON dvt_run_events
BEGIN SELECT RAISE(ABORT, 'dvt_run_events is append-only: DELETE refused'); END;
CREATE TRIGGER dvt_audit_genesis_no_update BEFORE UPDATE ON dvt_audit_genesis
BEGIN SELECT RAISE(ABORT, 'dvt_audit_genesis is append-only: UPDATE refused'); END;
CREATE TRIGGER dvt_audit_genesis_no_delete BEFORE DELETE ON dvt_audit_genesis
BEGIN SELECT RAISE(ABORT, 'dvt_audit_genesis is append-only: DELETE refused'); END;
CREATE TRIGGER dvt_audit_log_no_update BEFORE UPDATE ON dvt_audit_log
BEGIN SELECT RAISE(ABORT, 'dvt_audit_log is append-only: UPDATE refused'); END;
CREATE TRIGGER dvt_audit_log_no_delete BEFORE DELETE ON dvt_audit_log
BEGIN SELECT RAISE(ABORT, 'dvt_audit_log is append-only: DELETE refused'); END;
CREATE TRIGGER dvt_audit_checkpoints_no_update BEFORE UPDATE ON dvt_audit_checkpoints
BEGIN SELECT RAISE(ABORT, 'dvt_audit_checkpoints is append-only: UPDATE refused'); END;
CREATE TRIGGER dvt_audit_checkpoints_no_delete BEFORE DELETE ON dvt_audit_checkpoints
BEGIN SELECT RAISE(ABORT, 'dvt_audit_checkpoints is append-only: DELETE refused'); END;
