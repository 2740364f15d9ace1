-- Fenced leases (issue 8): the fence token grows by one whenever a run's
-- lease passes to another owner, and appends from a runner whose fence is
-- no longer the lease's are refused (LEASE_LOST). A released lease keeps
-- its row (owner '') so that the next owner's fence is still higher.
ALTER TABLE dvt_leases ADD COLUMN fence BIGINT NOT NULL DEFAULT 0;
