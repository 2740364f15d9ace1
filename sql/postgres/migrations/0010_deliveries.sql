-- Outbox delivery state per (sink, event) (issue 10). dvt_outbox keeps one
-- row per appended event; a delivery process gives each configured sink its
-- own row here, so one sink failing never holds back another. Times that
-- decide a claim (next_attempt_at, claim_expires_at) are written and
-- compared by the database itself (dvt_now(), engine.TimeFormat text, so text
-- order is time order).
CREATE TABLE dvt_deliveries (
    sink             TEXT NOT NULL,
    event_id         TEXT NOT NULL,
    run_id           TEXT NOT NULL,
    run_seq          BIGINT  NOT NULL,
    state            TEXT NOT NULL DEFAULT 'PENDING', -- PENDING | DELIVERED | DEAD
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  TEXT NOT NULL,
    claimed_by       TEXT,
    claim_expires_at TEXT,
    last_error       TEXT,
    created_at       TEXT NOT NULL,
    delivered_at     TEXT,
    dead_at          TEXT,
    PRIMARY KEY (sink, run_id, run_seq)
);
CREATE UNIQUE INDEX dvt_deliveries_event ON dvt_deliveries (sink, event_id);
CREATE INDEX dvt_deliveries_state ON dvt_deliveries (sink, state, run_id, run_seq);
CREATE INDEX dvt_deliveries_claim ON dvt_deliveries (claimed_by);
-- The claim's look-ups of what blocks a run: backing-off and claimed rows.
CREATE INDEX dvt_deliveries_due ON dvt_deliveries (sink, state, next_attempt_at);
CREATE INDEX dvt_deliveries_claimed ON dvt_deliveries (sink, claim_expires_at);
