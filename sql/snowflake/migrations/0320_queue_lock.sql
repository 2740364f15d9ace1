-- The run queue's lock row moves to a table of its own. Snowflake locks a
-- whole table for an UPDATE until COMMIT, and the queue's transactions span
-- requests (BEGIN + lock, reads, writes + COMMIT): while 'queue' was a row
-- of dvt_locks, a worker that died inside one held off every run's
-- bootstrap ('bootstrap' row) and the outbox ('deliveries') as well, until
-- the stale transaction was ended. Now it holds off only the queue.
CREATE TABLE IF NOT EXISTS dvt_queue_lock (
    lock_name VARCHAR NOT NULL,
    owner     VARCHAR
);
INSERT INTO dvt_queue_lock (lock_name) SELECT 'queue' WHERE NOT EXISTS (SELECT 1 FROM dvt_queue_lock WHERE lock_name = 'queue');
