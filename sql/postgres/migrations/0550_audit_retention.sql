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
);
CREATE TRIGGER dvt_audit_retention_append_only BEFORE UPDATE OR DELETE ON dvt_audit_retention
    FOR EACH ROW EXECUTE FUNCTION dvt_append_only();
CREATE TRIGGER dvt_audit_retention_no_truncate BEFORE TRUNCATE ON dvt_audit_retention
    FOR EACH STATEMENT EXECUTE FUNCTION dvt_append_only();

-- The event log's row guard now lets exactly one change through: the
-- payload set to NULL, every other column (whatever columns the table has)
-- unchanged, in a run recorded in dvt_audit_retention. DELETE and every
-- other UPDATE are still refused.
CREATE FUNCTION dvt_run_events_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.payload IS NULL
       AND to_jsonb(NEW) - 'payload' = to_jsonb(OLD) - 'payload'
       AND EXISTS (SELECT 1 FROM dvt_audit_retention r WHERE r.run_id = OLD.run_id) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
DROP TRIGGER dvt_run_events_append_only ON dvt_run_events;
CREATE TRIGGER dvt_run_events_append_only BEFORE UPDATE OR DELETE ON dvt_run_events
    FOR EACH ROW EXECUTE FUNCTION dvt_run_events_guard();

-- The chain view: a retained event is ok when its links hold.
CREATE OR REPLACE VIEW dvt_audit_chain AS
/*include audit.sql audit_chain_view_retention*/;
