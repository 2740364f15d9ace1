-- Statements of outbox delivery on the SQLite state store
-- (store/sqlite/delivery.go), by name. The database's clock decides claims:
-- strftime('%Y-%m-%dT%H:%M:%fZ', 'now') is the same value throughout one
-- statement. Durations are bound as SQLite date modifiers ('+1.500 seconds').

-- name: enqueue_deliveries
-- Every outbox event the sink has no delivery for yet, due now. The primary
-- key makes a concurrent second insert a no-op.
INSERT INTO dvt_deliveries (sink, event_id, run_id, run_seq, state, attempts, next_attempt_at, created_at)
SELECT ?, e.event_id, o.run_id, o.run_seq, 'PENDING', 0,
       strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
FROM dvt_outbox o
JOIN dvt_run_events e ON e.run_id = o.run_id AND e.run_seq = o.run_seq
WHERE NOT EXISTS (SELECT 1 FROM dvt_deliveries d WHERE d.sink = ? AND d.run_id = o.run_id AND d.run_seq = o.run_seq)
ON CONFLICT DO NOTHING;

-- name: claim_deliveries
-- The claim: one conditional UPDATE. A delivery is claimable when it is
-- PENDING, due and unclaimed (or its claim expired), and no earlier delivery
-- of its run for this sink blocks it (dead, backing off, or claimed). The
-- outer WHERE repeats the row's own conditions so the UPDATE alone decides.
-- Args: claimID, ttl modifier, sink, sink, limit.
UPDATE dvt_deliveries
SET claimed_by = ?, claim_expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?)
WHERE sink = ? AND state = 'PENDING'
  AND next_attempt_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
  AND (claim_expires_at IS NULL OR claim_expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
  AND event_id IN (
    SELECT d.event_id
    FROM dvt_deliveries d
    LEFT JOIN (
        SELECT run_id, MIN(run_seq) AS first_blocked
        FROM dvt_deliveries
        WHERE sink = ?4 AND (state = 'DEAD' OR (state = 'PENDING' AND (
              next_attempt_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
              OR claim_expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))))
        GROUP BY run_id
    ) b ON b.run_id = d.run_id
    WHERE d.sink = ?4 AND d.state = 'PENDING' AND (b.first_blocked IS NULL OR d.run_seq < b.first_blocked)
    ORDER BY d.run_id, d.run_seq
    LIMIT ?);

-- name: claimed_deliveries
SELECT d.sink, d.event_id, d.run_id, d.run_seq, e.event_type, d.state, d.attempts, d.next_attempt_at,
       d.last_error, d.created_at, d.delivered_at
FROM dvt_deliveries d
JOIN dvt_run_events e ON e.run_id = d.run_id AND e.run_seq = d.run_seq
WHERE d.sink = ? AND d.claimed_by = ?
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
SELECT d.sink, d.event_id, d.run_id, d.run_seq, e.event_type, d.state, d.attempts, d.next_attempt_at,
       d.last_error, d.created_at, d.delivered_at
FROM dvt_deliveries d
JOIN dvt_run_events e ON e.run_id = d.run_id AND e.run_seq = d.run_seq
WHERE (? = '' OR d.sink = ?) AND (? = '' OR d.state = ?) AND (? = '' OR d.event_id = ?)
ORDER BY d.run_id, d.run_seq, d.sink
LIMIT ?;
