-- Retention is signed evidence (issue 25): a row of dvt_audit_retention is
-- accepted by `audit verify` only with its record — run, policy, cutoff,
-- time and the checkpoint that covered the run's events — signed with the
-- audit key (note) and appended to the global log under the reserved run
-- id 'dvtrun.audit.retention' with run_seq = seq, the record's ordinal.
-- Rows made before this migration have no record: verify names them.
-- Snowflake has no triggers: the guards on dvt_audit_retention,
-- dvt_audit_genesis, dvt_run_seq and dvt_runs are grants (README and
-- docs/guides/auditing-retention.md; `dvtrun audit doctor` checks them).
-- Each statement runs on its own: every one is idempotent.
ALTER TABLE dvt_audit_retention ADD COLUMN IF NOT EXISTS seq BIGINT; -- BIGINT: NUMBER(38, 0) in Snowflake
ALTER TABLE dvt_audit_retention ADD COLUMN IF NOT EXISTS older_than VARCHAR;
ALTER TABLE dvt_audit_retention ADD COLUMN IF NOT EXISTS covered BIGINT;
ALTER TABLE dvt_audit_retention ADD COLUMN IF NOT EXISTS note VARCHAR;
