-- Lock introspection, shared by the state store (store/snowflake/locks.go)
-- and the warehouse (warehouse_fence.go): both look up who holds a table
-- lock they wait for, and end a transaction a dead client left open.

-- name: show_locks
-- The table locks held (HOLDING) and waited for (WAITING) by this user's
-- transactions: resource (DB.SCHEMA.TABLE), transaction, session, status,
-- acquired_on, … read by column name. IN ACCOUNT would need ACCOUNTADMIN.
SHOW LOCKS;

-- name: abort_transaction
-- Ends a transaction of this user (any user's, for an administrator) and
-- frees its locks at once; its session's later statements and COMMIT fail.
SELECT SYSTEM$ABORT_TRANSACTION(?);
