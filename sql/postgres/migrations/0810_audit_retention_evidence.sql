-- Retention is signed evidence (issue 25): a row of dvt_audit_retention is
-- accepted by `audit verify` only with its record — run, policy, cutoff,
-- time and the checkpoint that covered the run's events — signed with the
-- audit key (note) and appended to the global log under the reserved run
-- id 'dvtrun.audit.retention' with run_seq = seq, the record's ordinal.
-- Rows made before this migration have no record: verify names them.
ALTER TABLE dvt_audit_retention ADD COLUMN seq BIGINT, ADD COLUMN older_than TEXT,
    ADD COLUMN covered BIGINT, ADD COLUMN note TEXT;

-- Insert only through the retention path: the row brings its signed
-- record, whose entry (the SHA-256 of the note) the path appends to the
-- log first, with the next ordinal. Verify checks the signature.
CREATE FUNCTION dvt_audit_retention_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.note IS NOT NULL AND NEW.seq IS NOT NULL AND NEW.older_than IS NOT NULL AND NEW.covered IS NOT NULL
       AND NEW.seq > (SELECT COALESCE(MAX(seq), 0) FROM dvt_audit_retention)
       AND EXISTS (SELECT 1 FROM dvt_audit_log l WHERE l.run_id = 'dvtrun.audit.retention' AND l.run_seq = NEW.seq
                   AND l.hash = encode(sha256(convert_to(NEW.note, 'UTF8')), 'hex')) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION '% is append-only: INSERT refused without a signed record in the global log', TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER dvt_audit_retention_insert_guard BEFORE INSERT ON dvt_audit_retention
    FOR EACH ROW EXECUTE FUNCTION dvt_audit_retention_insert();

-- Genesis rows are made by migration 0500 only (runs that had events before
-- the chain); one inserted later would un-chain a run's first events.
CREATE TRIGGER dvt_audit_genesis_insert_guard BEFORE INSERT ON dvt_audit_genesis
    FOR EACH ROW EXECUTE FUNCTION dvt_append_only();

-- The event log's row guard lets a payload go only once the run's signed
-- retention record is in the log below a stored checkpoint (the order of
-- `audit retain`: record, sign, remove), and only a v2 event's
-- (payload_sha256 set, migration 0800: its hash covers the digest, not
-- the payload; or no payload to remove). Every other column,
-- payload_sha256 included, stays.
CREATE OR REPLACE FUNCTION dvt_run_events_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.payload IS NULL AND OLD.hash IS NOT NULL AND (OLD.payload_sha256 IS NOT NULL OR OLD.payload IS NULL)
       AND to_jsonb(NEW) - 'payload' = to_jsonb(OLD) - 'payload'
       AND EXISTS (SELECT 1 FROM dvt_audit_retention r
                   JOIN dvt_audit_log l ON l.run_id = 'dvtrun.audit.retention' AND l.run_seq = r.seq
                   WHERE r.run_id = OLD.run_id AND r.note IS NOT NULL
                     AND l.log_index < (SELECT COALESCE(MAX(c.tree_size), 0) FROM dvt_audit_checkpoints c)) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;

-- The append authority: never deleted or truncated; an UPDATE only
-- advances next_seq (with the chain head last_hash) and moves status, and
-- an ended run's status never changes.
CREATE FUNCTION dvt_run_seq_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.run_id = OLD.run_id AND NEW.next_seq >= OLD.next_seq
       AND (NEW.status = OLD.status OR OLD.status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED'))
       AND (NEW.last_hash = OLD.last_hash OR NEW.next_seq > OLD.next_seq)
       AND to_jsonb(NEW) - 'next_seq' - 'status' - 'last_hash' = to_jsonb(OLD) - 'next_seq' - 'status' - 'last_hash' THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION '% is append-only: % refused (only an append advances it; an ended run''s status is final)', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER dvt_run_seq_append_only BEFORE UPDATE OR DELETE ON dvt_run_seq
    FOR EACH ROW EXECUTE FUNCTION dvt_run_seq_guard();
CREATE TRIGGER dvt_run_seq_no_truncate BEFORE TRUNCATE ON dvt_run_seq
    FOR EACH STATEMENT EXECUTE FUNCTION dvt_append_only();

-- Run metadata: never deleted or truncated; only provider_run_ref changes
-- (the engine adapter's reference, set after the run starts).
CREATE FUNCTION dvt_runs_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND to_jsonb(NEW) - 'provider_run_ref' = to_jsonb(OLD) - 'provider_run_ref' THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION '% is append-only: % refused (only provider_run_ref changes)', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER dvt_runs_append_only BEFORE UPDATE OR DELETE ON dvt_runs
    FOR EACH ROW EXECUTE FUNCTION dvt_runs_guard();
CREATE TRIGGER dvt_runs_no_truncate BEFORE TRUNCATE ON dvt_runs
    FOR EACH STATEMENT EXECUTE FUNCTION dvt_append_only();

-- The chain view: each chained event recomputed in the v2 form (migration
-- 0800) or v1 (chain_form says which); a v2 event without its payload is
-- ok only in a run whose retention row has its signed record in the log
-- below a stored checkpoint; ok is never NULL.
CREATE OR REPLACE VIEW dvt_audit_chain AS
/*include audit.sql audit_chain_view_signed_retention*/;
