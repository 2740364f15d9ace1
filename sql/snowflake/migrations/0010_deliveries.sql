-- Outbox delivery state per (sink, event) (issue 10); see the SQLite
-- dialect's 0010 for the design. Nothing enforces the key (sink, run_id,
-- run_seq) here: deliveries are created and claimed only under the
-- 'deliveries' lock row (UPDATE on dvt_locks first, in the same
-- transaction), so no two processes insert or claim from the same view.
-- Claim times are the database's clock (CURRENT_TIMESTAMP()).
CREATE TABLE IF NOT EXISTS dvt_deliveries (
    sink             VARCHAR NOT NULL,
    event_id         VARCHAR NOT NULL,
    run_id           VARCHAR NOT NULL,
    run_seq          NUMBER(38, 0) NOT NULL,
    state            VARCHAR NOT NULL DEFAULT 'PENDING',
    attempts         NUMBER(38, 0) NOT NULL DEFAULT 0,
    next_attempt_at  TIMESTAMP_TZ(9) NOT NULL,
    claimed_by       VARCHAR,
    claim_expires_at TIMESTAMP_TZ(9),
    last_error       VARCHAR,
    created_at       TIMESTAMP_TZ(9) NOT NULL,
    delivered_at     TIMESTAMP_TZ(9),
    dead_at          TIMESTAMP_TZ(9)
);
-- Re-run safely by a process that takes over the migration lease of one
-- killed after this statement, before the version was recorded.
INSERT INTO dvt_locks (lock_name) SELECT 'deliveries' WHERE NOT EXISTS (SELECT 1 FROM dvt_locks WHERE lock_name = 'deliveries');
