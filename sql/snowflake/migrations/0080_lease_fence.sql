-- Fenced leases (issue 8): the fence token grows by one whenever a run's
-- lease passes to another owner, and appends from a runner whose fence is
-- no longer the lease's are refused (LEASE_LOST). A released lease keeps
-- its row (owner '') so that the next owner's fence is still higher.
ALTER TABLE dvt_leases ADD COLUMN IF NOT EXISTS fence BIGINT DEFAULT 0; -- BIGINT: NUMBER(38, 0) in Snowflake
