-- Named lock rows (dvt_locks is created by the store before any migration,
-- since the migration lock lives in it). UPDATE on a Snowflake table waits
-- for the lock of any other UPDATE/MERGE/DELETE on it, so updating the
-- 'bootstrap' row first serialises run bootstraps: without enforced unique
-- keys, two processes bootstrapping one run id could otherwise both insert.
-- Re-run safely by a process that takes over the migration lease of one
-- killed after this statement, before the version was recorded.
INSERT INTO dvt_locks (lock_name) SELECT 'bootstrap' WHERE NOT EXISTS (SELECT 1 FROM dvt_locks WHERE lock_name = 'bootstrap');
