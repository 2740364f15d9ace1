-- Retention is signed evidence (issue 25): a row of dvt_audit_retention is
-- accepted by `audit verify` only with its record — run, policy, cutoff,
-- time and the checkpoint that covered the run's events — signed with the
-- audit key (note) and appended to the global log under the reserved run
-- id 'dvtrun.audit.retention' with run_seq = seq, the record's ordinal.
-- Rows made before this migration have no record: verify names them.
ALTER TABLE dvt_audit_retention ADD COLUMN seq INTEGER;
ALTER TABLE dvt_audit_retention ADD COLUMN older_than TEXT;
ALTER TABLE dvt_audit_retention ADD COLUMN covered INTEGER;
ALTER TABLE dvt_audit_retention ADD COLUMN note TEXT;

-- Insert only through the retention path: the row must bring its signed
-- record, whose entry the path appends to the log first, with the next
-- ordinal. (SQLite cannot check the signature; verify does.)
CREATE TRIGGER dvt_audit_retention_no_insert BEFORE INSERT ON dvt_audit_retention
WHEN NEW.note IS NULL OR NEW.seq IS NULL OR NEW.older_than IS NULL OR NEW.covered IS NULL
    OR NEW.seq <= (SELECT COALESCE(MAX(seq), 0) FROM dvt_audit_retention)
    OR NOT EXISTS (SELECT 1 FROM dvt_audit_log l WHERE l.run_id = 'dvtrun.audit.retention' AND l.run_seq = NEW.seq)
BEGIN SELECT RAISE(ABORT, 'dvt_audit_retention is append-only: INSERT refused without a signed record in the global log'); END;

-- Genesis rows are made by migration 0500 only (runs that had events before
-- the chain); one inserted later would un-chain a run's first events.
CREATE TRIGGER dvt_audit_genesis_no_insert BEFORE INSERT ON dvt_audit_genesis
BEGIN SELECT RAISE(ABORT, 'dvt_audit_genesis is append-only: INSERT refused (genesis rows come from migration 0500 only)'); END;

-- The event log's UPDATE guard lets a payload go only once the run's
-- signed retention record is in the log below a stored checkpoint (the
-- order of `audit retain`: record, sign, remove), and only a v2 event's
-- (payload_sha256 set, migration 0800: its hash covers the digest, not
-- the payload; or no payload to remove). Every other column,
-- payload_sha256 included, stays.
DROP TRIGGER dvt_run_events_no_update;
CREATE TRIGGER dvt_run_events_no_update BEFORE UPDATE ON dvt_run_events
WHEN NOT (NEW.payload IS NULL AND OLD.hash IS NOT NULL AND (OLD.payload_sha256 IS NOT NULL OR OLD.payload IS NULL)
    AND EXISTS (SELECT 1 FROM dvt_audit_retention r
                JOIN dvt_audit_log l ON l.run_id = 'dvtrun.audit.retention' AND l.run_seq = r.seq
                WHERE r.run_id = OLD.run_id AND r.note IS NOT NULL
                  AND l.log_index < (SELECT COALESCE(MAX(c.tree_size), 0) FROM dvt_audit_checkpoints c))
    AND NEW.run_id IS OLD.run_id AND NEW.run_seq IS OLD.run_seq AND NEW.tenant_id IS OLD.tenant_id
    AND NEW.project_id IS OLD.project_id AND NEW.environment_id IS OLD.environment_id
    AND NEW.event_id IS OLD.event_id AND NEW.event_type IS OLD.event_type AND NEW.step_id IS OLD.step_id
    AND NEW.plan_id IS OLD.plan_id AND NEW.plan_version IS OLD.plan_version
    AND NEW.logical_attempt_id IS OLD.logical_attempt_id AND NEW.engine_attempt_id IS OLD.engine_attempt_id
    AND NEW.idempotency_key IS OLD.idempotency_key AND NEW.emitted_at IS OLD.emitted_at
    AND NEW.persisted_at IS OLD.persisted_at AND NEW.prev_hash IS OLD.prev_hash AND NEW.hash IS OLD.hash
    AND NEW.payload_sha256 IS OLD.payload_sha256)
BEGIN SELECT RAISE(ABORT, 'dvt_run_events is append-only: UPDATE refused'); END;

-- The append authority: never deleted; the append path only advances
-- next_seq (with the chain head last_hash) and moves status, and an ended
-- run's status never changes.
CREATE TRIGGER dvt_run_seq_no_delete BEFORE DELETE ON dvt_run_seq
BEGIN SELECT RAISE(ABORT, 'dvt_run_seq is append-only: DELETE refused'); END;
CREATE TRIGGER dvt_run_seq_no_update BEFORE UPDATE ON dvt_run_seq
WHEN NOT (NEW.run_id IS OLD.run_id AND NEW.next_seq >= OLD.next_seq
    AND (NEW.status IS OLD.status OR OLD.status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED'))
    AND (NEW.last_hash IS OLD.last_hash OR NEW.next_seq > OLD.next_seq))
BEGIN SELECT RAISE(ABORT, 'dvt_run_seq is append-only: UPDATE refused (only an append advances it; an ended run''s status is final)'); END;

-- Run metadata: never deleted; only provider_run_ref changes (the engine
-- adapter's reference, set after the run starts).
CREATE TRIGGER dvt_runs_no_delete BEFORE DELETE ON dvt_runs
BEGIN SELECT RAISE(ABORT, 'dvt_runs is append-only: DELETE refused'); END;
CREATE TRIGGER dvt_runs_no_update BEFORE UPDATE ON dvt_runs
WHEN NOT (NEW.run_id IS OLD.run_id AND NEW.tenant_id IS OLD.tenant_id AND NEW.project_id IS OLD.project_id
    AND NEW.environment_id IS OLD.environment_id AND NEW.plan_id IS OLD.plan_id
    AND NEW.plan_version IS OLD.plan_version AND NEW.plan_sha256 IS OLD.plan_sha256
    AND NEW.target_adapter IS OLD.target_adapter AND NEW.run_request_id IS OLD.run_request_id
    AND NEW.created_at IS OLD.created_at)
BEGIN SELECT RAISE(ABORT, 'dvt_runs is append-only: UPDATE refused (only provider_run_ref changes)'); END;
