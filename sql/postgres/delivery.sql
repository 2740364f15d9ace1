-- Statements of outbox delivery on the Postgres state store
-- (store/postgres/delivery.go), by name: sql/sqlite/delivery.sql in
-- Postgres's dialect. The database's clock decides claims (dvt_now();
-- durations bound in seconds for dvt_now_plus). A sink's claims run under a
-- transaction lock on the sink, so two claimers never split a run's order.

-- name: enqueue_deliveries
-- Every outbox event the sink has no delivery for yet, due now. A run's
-- outbox rows are written with its events, so what a sink has of a run is
-- always a prefix of it: only runs whose outbox goes past the sink's last
-- delivery are read, two index probes a run, never the whole outbox (the
-- CTE is materialized, so the planner starts from the runs behind).
-- Args: sink.
WITH w (run_id, have_seq) AS MATERIALIZED (
    SELECT run_id, have_seq FROM (
        SELECT r.run_id,
               (SELECT MAX(x.run_seq) FROM dvt_outbox x WHERE x.run_id = r.run_id) AS last_seq,
               COALESCE((SELECT MAX(d.run_seq) FROM dvt_deliveries d WHERE d.sink = $1 AND d.run_id = r.run_id), 0) AS have_seq
        FROM dvt_runs r
    ) x WHERE last_seq > have_seq
)
INSERT INTO dvt_deliveries (sink, event_id, run_id, run_seq, state, attempts, next_attempt_at, created_at)
SELECT $1, e.event_id, o.run_id, o.run_seq, 'PENDING', 0, dvt_now(), dvt_now()
FROM w
CROSS JOIN dvt_outbox o
CROSS JOIN dvt_run_events e
WHERE o.run_id = w.run_id AND o.run_seq > w.have_seq AND e.run_id = o.run_id AND e.run_seq = o.run_seq
ON CONFLICT DO NOTHING;

-- name: enqueue_checkpoint_deliveries
-- Every stored audit checkpoint the sink has no delivery for yet, due now,
-- as the stream of run id 'dvtrun.audit.checkpoints' (engine/delivery's
-- CheckpointRunID) with runSeq = tree size: checkpoints are stored in size
-- order, so what a sink has of them is a prefix too.
-- Args: sink.
INSERT INTO dvt_deliveries (sink, event_id, run_id, run_seq, state, attempts, next_attempt_at, created_at)
SELECT $1, 'checkpoint-' || CAST(c.tree_size AS TEXT), 'dvtrun.audit.checkpoints', c.tree_size, 'PENDING', 0, dvt_now(), dvt_now()
FROM dvt_audit_checkpoints c
WHERE c.tree_size > COALESCE((SELECT MAX(d.run_seq) FROM dvt_deliveries d WHERE d.sink = $1 AND d.run_id = 'dvtrun.audit.checkpoints'), 0)
ON CONFLICT DO NOTHING;

-- name: claim_deliveries
-- The claim: one conditional UPDATE. A delivery is claimable when it is
-- PENDING, due and unclaimed (or its claim expired), and no earlier delivery
-- of its run for this sink blocks it: dead, backing off, or claimed. The
-- outer WHERE repeats the row's own conditions so the UPDATE alone decides.
-- Every scan is an index range over the few blocking rows or the first
-- candidates in (run_id, run_seq) order, never over delivered history, and
-- "now" is a CTE, computed once per statement.
-- Args: sink, claimID, ttl seconds, limit.
WITH now_ (t) AS (SELECT dvt_now()),
blocked (run_id, run_seq) AS MATERIALIZED (
    SELECT run_id, run_seq FROM dvt_deliveries
    WHERE sink = $1 AND state = 'DEAD'
    UNION ALL
    SELECT run_id, run_seq FROM dvt_deliveries
    WHERE sink = $1 AND state = 'PENDING' AND next_attempt_at > (SELECT t FROM now_)
    UNION ALL
    SELECT run_id, run_seq FROM dvt_deliveries
    WHERE sink = $1 AND claim_expires_at > (SELECT t FROM now_)
)
UPDATE dvt_deliveries
SET claimed_by = $2, claim_expires_at = dvt_now_plus($3)
WHERE sink = $1 AND state = 'PENDING'
  AND next_attempt_at <= (SELECT t FROM now_)
  AND (claim_expires_at IS NULL OR claim_expires_at <= (SELECT t FROM now_))
  AND event_id IN (
    SELECT d.event_id
    FROM dvt_deliveries d
    WHERE d.sink = $1 AND d.state = 'PENDING'
      AND NOT EXISTS (SELECT 1 FROM blocked b WHERE b.run_id = d.run_id AND b.run_seq <= d.run_seq)
    ORDER BY d.run_id, d.run_seq
    LIMIT $4);

-- name: claimed_deliveries
SELECT d.sink, d.event_id, d.run_id, d.run_seq, CASE WHEN d.run_id = 'dvtrun.audit.checkpoints' THEN 'Checkpoint' ELSE e.event_type END, d.state, d.attempts, d.next_attempt_at,
       d.last_error, d.created_at, d.delivered_at
FROM dvt_deliveries d
LEFT JOIN dvt_run_events e ON e.run_id = d.run_id AND e.run_seq = d.run_seq
WHERE (e.run_id IS NOT NULL OR d.run_id = 'dvtrun.audit.checkpoints') AND d.sink = $1 AND d.claimed_by = $2
ORDER BY d.run_id, d.run_seq;

-- name: mark_delivered
UPDATE dvt_deliveries
SET state = 'DELIVERED', attempts = attempts + 1, last_error = NULL, claimed_by = NULL, claim_expires_at = NULL,
    delivered_at = dvt_now()
WHERE sink = $1 AND claimed_by = $2 AND event_id = ANY($3::text[]);

-- name: mark_failed
-- Args: state, last error, retry seconds, dead (1/0), sink, claimID, eventID.
UPDATE dvt_deliveries
SET state = $1, attempts = attempts + 1, last_error = $2, claimed_by = NULL, claim_expires_at = NULL,
    next_attempt_at = dvt_now_plus($3),
    dead_at = CASE WHEN $4 = 1 THEN dvt_now() END
WHERE sink = $5 AND claimed_by = $6 AND event_id = $7;

-- name: release_claim
UPDATE dvt_deliveries SET claimed_by = NULL, claim_expires_at = NULL WHERE sink = $1 AND claimed_by = $2;

-- name: retry_dead
-- Args: sink, sink, eventID, eventID.
UPDATE dvt_deliveries
SET state = 'PENDING', attempts = 0, dead_at = NULL, next_attempt_at = dvt_now()
WHERE state = 'DEAD' AND ($1 = '' OR sink = $2) AND ($3 = '' OR event_id = $4);

-- name: list_deliveries
-- Args: sink, sink, state, state, eventID, eventID, limit.
SELECT d.sink, d.event_id, d.run_id, d.run_seq, CASE WHEN d.run_id = 'dvtrun.audit.checkpoints' THEN 'Checkpoint' ELSE e.event_type END, d.state, d.attempts, d.next_attempt_at,
       d.last_error, d.created_at, d.delivered_at
FROM dvt_deliveries d
LEFT JOIN dvt_run_events e ON e.run_id = d.run_id AND e.run_seq = d.run_seq
WHERE (e.run_id IS NOT NULL OR d.run_id = 'dvtrun.audit.checkpoints') AND ($1 = '' OR d.sink = $2) AND ($3 = '' OR d.state = $4) AND ($5 = '' OR d.event_id = $6)
ORDER BY d.run_id, d.run_seq, d.sink
LIMIT $7;

-- name: sink_lock
-- Every delivery write transaction starts here: one writer per sink at a
-- time ('' for a write across sinks, retry_dead without a sink).
SELECT pg_advisory_xact_lock(hashtext('dvtrun/delivery/' || $1));
