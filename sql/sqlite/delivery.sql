-- Statements of outbox delivery on the SQLite state store
-- (store/sqlite/delivery.go), by name. The database's clock decides claims:
-- strftime('%Y-%m-%dT%H:%M:%fZ', 'now') is the same value throughout one
-- statement. Durations are bound as SQLite date modifiers ('+1.500 seconds').

-- name: enqueue_deliveries
-- Every outbox event the sink has no delivery for yet, due now. A run's
-- outbox rows are written with its events, so what a sink has of a run is
-- always a prefix of it: only runs whose outbox goes past the sink's last
-- delivery are read, two index probes a run, never the whole outbox (the
-- CTE is materialized and CROSS JOIN fixes the loop order, so the planner
-- cannot start from the outbox).
-- Args: sink, sink, sink.
WITH w (run_id, have_seq) AS MATERIALIZED (
    SELECT run_id, have_seq FROM (
        SELECT r.run_id,
               (SELECT MAX(x.run_seq) FROM dvt_outbox x WHERE x.run_id = r.run_id) AS last_seq,
               COALESCE((SELECT MAX(d.run_seq) FROM dvt_deliveries d WHERE d.sink = ?1 AND d.run_id = r.run_id), 0) AS have_seq
        FROM dvt_runs r
    ) WHERE last_seq > have_seq
)
INSERT INTO dvt_deliveries (sink, event_id, run_id, run_seq, state, attempts, next_attempt_at, created_at)
SELECT ?1, e.event_id, o.run_id, o.run_seq, 'PENDING', 0, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
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
SELECT ?1, 'checkpoint-' || CAST(c.tree_size AS TEXT), 'dvtrun.audit.checkpoints', c.tree_size, 'PENDING', 0,
       strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
FROM dvt_audit_checkpoints c
WHERE c.tree_size > COALESCE((SELECT MAX(d.run_seq) FROM dvt_deliveries d WHERE d.sink = ?1 AND d.run_id = 'dvtrun.audit.checkpoints'), 0)
ON CONFLICT DO NOTHING;

-- name: claim_deliveries
-- The claim: one conditional UPDATE. A delivery is claimable when it is
-- PENDING, due and unclaimed (or its claim expired), and no earlier delivery
-- of its run for this sink blocks it: dead, backing off, or claimed. The
-- outer WHERE repeats the row's own conditions so the UPDATE alone decides.
-- Every scan is an index range over the few blocking rows or the first
-- candidates in (run_id, run_seq) order, never over delivered history, and
-- "now" is a scalar subquery, computed once per statement. INDEXED BY pins
-- the plan: without statistics the planner would walk the primary key.
-- Args: sink, sink, sink, claimID, ttl modifier, limit.
WITH now_ (t) AS (SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
blocked (run_id, run_seq) AS MATERIALIZED (
    SELECT run_id, run_seq FROM dvt_deliveries INDEXED BY dvt_deliveries_state
    WHERE sink = ?1 AND state = 'DEAD'
    UNION ALL
    SELECT run_id, run_seq FROM dvt_deliveries INDEXED BY dvt_deliveries_due
    WHERE sink = ?1 AND state = 'PENDING' AND next_attempt_at > (SELECT t FROM now_)
    UNION ALL
    SELECT run_id, run_seq FROM dvt_deliveries INDEXED BY dvt_deliveries_claimed
    WHERE sink = ?1 AND claim_expires_at > (SELECT t FROM now_)
)
UPDATE dvt_deliveries INDEXED BY dvt_deliveries_event
SET claimed_by = ?2, claim_expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?3)
WHERE sink = ?1 AND state = 'PENDING'
  AND next_attempt_at <= (SELECT t FROM now_)
  AND (claim_expires_at IS NULL OR claim_expires_at <= (SELECT t FROM now_))
  AND event_id IN (
    SELECT d.event_id
    FROM dvt_deliveries d INDEXED BY dvt_deliveries_state
    WHERE d.sink = ?1 AND d.state = 'PENDING'
      AND NOT EXISTS (SELECT 1 FROM blocked b WHERE b.run_id = d.run_id AND b.run_seq <= d.run_seq)
    ORDER BY d.run_id, d.run_seq
    LIMIT ?4);

-- name: claimed_deliveries
SELECT d.sink, d.event_id, d.run_id, d.run_seq, CASE WHEN d.run_id = 'dvtrun.audit.checkpoints' THEN 'Checkpoint' ELSE e.event_type END, d.state, d.attempts, d.next_attempt_at,
       d.last_error, d.created_at, d.delivered_at
FROM dvt_deliveries d
LEFT JOIN dvt_run_events e ON e.run_id = d.run_id AND e.run_seq = d.run_seq
WHERE (e.run_id IS NOT NULL OR d.run_id = 'dvtrun.audit.checkpoints') AND d.sink = ? AND d.claimed_by = ?
ORDER BY d.run_id, d.run_seq;

-- name: mark_delivered
UPDATE dvt_deliveries
SET state = 'DELIVERED', attempts = attempts + 1, last_error = NULL, claimed_by = NULL, claim_expires_at = NULL,
    delivered_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE sink = ? AND claimed_by = ? AND event_id = ?;

-- name: mark_failed
-- Args: state, last error, retry modifier, dead (1/0), sink, claimID, eventID.
UPDATE dvt_deliveries
SET state = ?, attempts = attempts + 1, last_error = ?, claimed_by = NULL, claim_expires_at = NULL,
    next_attempt_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?),
    dead_at = CASE WHEN ? = 1 THEN strftime('%Y-%m-%dT%H:%M:%fZ', 'now') END
WHERE sink = ? AND claimed_by = ? AND event_id = ?;

-- name: release_claim
UPDATE dvt_deliveries SET claimed_by = NULL, claim_expires_at = NULL WHERE sink = ? AND claimed_by = ?;

-- name: retry_dead
-- Args: sink, sink, eventID, eventID.
UPDATE dvt_deliveries
SET state = 'PENDING', attempts = 0, dead_at = NULL, next_attempt_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE state = 'DEAD' AND (? = '' OR sink = ?) AND (? = '' OR event_id = ?);

-- name: list_deliveries
-- Args: sink, sink, state, state, eventID, eventID, limit.
SELECT d.sink, d.event_id, d.run_id, d.run_seq, CASE WHEN d.run_id = 'dvtrun.audit.checkpoints' THEN 'Checkpoint' ELSE e.event_type END, d.state, d.attempts, d.next_attempt_at,
       d.last_error, d.created_at, d.delivered_at
FROM dvt_deliveries d
LEFT JOIN dvt_run_events e ON e.run_id = d.run_id AND e.run_seq = d.run_seq
WHERE (e.run_id IS NOT NULL OR d.run_id = 'dvtrun.audit.checkpoints') AND (? = '' OR d.sink = ?) AND (? = '' OR d.state = ?) AND (? = '' OR d.event_id = ?)
ORDER BY d.run_id, d.run_seq, d.sink
LIMIT ?;
