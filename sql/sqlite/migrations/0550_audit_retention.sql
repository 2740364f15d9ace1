-- Retention of the tamper-evident log (issue 19): `dvtrun audit retain`
-- removes the payloads of old ended runs whose every chained event a signed
-- checkpoint covers, and keeps the rest of each row — prev_hash and hash
-- (the leaf hashes the checkpoints sign) included — so the log still
-- proves itself. This table records which runs lost their payloads and
-- when, so verification names them instead of reporting a break.
CREATE TABLE dvt_audit_retention (
    run_id     TEXT NOT NULL PRIMARY KEY,
    removed_at TEXT NOT NULL,
    cutoff     TEXT NOT NULL
) WITHOUT ROWID;
CREATE TRIGGER dvt_audit_retention_no_update BEFORE UPDATE ON dvt_audit_retention
BEGIN SELECT RAISE(ABORT, 'dvt_audit_retention is append-only: UPDATE refused'); END;
CREATE TRIGGER dvt_audit_retention_no_delete BEFORE DELETE ON dvt_audit_retention
BEGIN SELECT RAISE(ABORT, 'dvt_audit_retention is append-only: DELETE refused'); END;

-- The event log's UPDATE guard now lets exactly one change through: the
-- payload set to NULL, every other column unchanged, in a run recorded in
-- dvt_audit_retention. Everything else is still refused.
DROP TRIGGER dvt_run_events_no_update;
CREATE TRIGGER dvt_run_events_no_update BEFORE UPDATE ON dvt_run_events
WHEN NOT (NEW.payload IS NULL
    AND EXISTS (SELECT 1 FROM dvt_audit_retention r WHERE r.run_id = OLD.run_id)
    AND NEW.run_id IS OLD.run_id AND NEW.run_seq IS OLD.run_seq AND NEW.tenant_id IS OLD.tenant_id
    AND NEW.project_id IS OLD.project_id AND NEW.environment_id IS OLD.environment_id
    AND NEW.event_id IS OLD.event_id AND NEW.event_type IS OLD.event_type AND NEW.step_id IS OLD.step_id
    AND NEW.plan_id IS OLD.plan_id AND NEW.plan_version IS OLD.plan_version
    AND NEW.logical_attempt_id IS OLD.logical_attempt_id AND NEW.engine_attempt_id IS OLD.engine_attempt_id
    AND NEW.idempotency_key IS OLD.idempotency_key AND NEW.emitted_at IS OLD.emitted_at
    AND NEW.persisted_at IS OLD.persisted_at AND NEW.prev_hash IS OLD.prev_hash AND NEW.hash IS OLD.hash)
BEGIN SELECT RAISE(ABORT, 'dvt_run_events is append-only: UPDATE refused'); END;
