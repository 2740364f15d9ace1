-- Statements of outbox delivery on the Snowflake state store
-- (store/snowflake/delivery.go), by name: the same shapes as the SQLite
-- dialect's delivery.sql, with the database's clock as CURRENT_TIMESTAMP(), cast to the
-- columns' TIMESTAMP_TZ(9).
-- Enqueue and claim are one request each: a Scripting block that updates
-- the 'deliveries' lock row first (so each reads what the previous one
-- committed), writes and commits. No transaction of theirs spans requests,
-- so a process killed between requests leaves no lock behind (issue 16).
-- Blocks take no binds: values are rendered into the /*:name*/ slots (hex
-- string literals read back with HEX_DECODE_STRING, decimal integers).

-- name: enqueue_deliveries_block
-- Every outbox event the sink has no delivery for yet, due now. A run's
-- outbox rows are written with its events, so what a sink has of a run is
-- always a prefix of it: only runs whose outbox goes past the sink's last
-- delivery are read, one index probe each, never the whole outbox. The
-- stored audit checkpoints follow. Answers the number of deliveries created.
EXECUTE IMMEDIATE $$
DECLARE
  n INTEGER DEFAULT 0;
BEGIN
  BEGIN TRANSACTION;
  UPDATE dvt_locks SET owner = owner WHERE lock_name = 'deliveries';
  INSERT INTO dvt_deliveries (sink, event_id, run_id, run_seq, state, attempts, next_attempt_at, created_at)
  SELECT HEX_DECODE_STRING(/*:sink*/), e.event_id, o.run_id, o.run_seq, 'PENDING', 0,
         CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9)), CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9))
  FROM (
      SELECT r.run_id,
             (SELECT MAX(x.run_seq) FROM dvt_outbox x WHERE x.run_id = r.run_id) AS last_seq,
             COALESCE((SELECT MAX(d.run_seq) FROM dvt_deliveries d WHERE d.sink = HEX_DECODE_STRING(/*:sink*/) AND d.run_id = r.run_id), 0) AS have_seq
      FROM dvt_runs r
  ) w
  JOIN dvt_outbox o ON o.run_id = w.run_id AND o.run_seq > w.have_seq
  JOIN dvt_run_events e ON e.run_id = o.run_id AND e.run_seq = o.run_seq
  WHERE w.last_seq > w.have_seq
    AND NOT EXISTS (SELECT 1 FROM dvt_deliveries d WHERE d.sink = HEX_DECODE_STRING(/*:sink*/) AND d.run_id = o.run_id AND d.run_seq = o.run_seq);
  n := SQLROWCOUNT;
  -- The stored audit checkpoints, as the stream of run id
  -- 'dvtrun.audit.checkpoints' (engine/delivery's CheckpointRunID) with
  -- runSeq = tree size: stored in size order, so a sink has a prefix.
  INSERT INTO dvt_deliveries (sink, event_id, run_id, run_seq, state, attempts, next_attempt_at, created_at)
  SELECT HEX_DECODE_STRING(/*:sink*/), 'checkpoint-' || CAST(c.tree_size AS VARCHAR), 'dvtrun.audit.checkpoints', c.tree_size, 'PENDING', 0,
         CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9)), CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9))
  FROM dvt_audit_checkpoints c
  WHERE c.tree_size > COALESCE((SELECT MAX(d.run_seq) FROM dvt_deliveries d
                                WHERE d.sink = HEX_DECODE_STRING(/*:sink*/) AND d.run_id = 'dvtrun.audit.checkpoints'), 0);
  n := n + SQLROWCOUNT;
  COMMIT;
  RETURN n;
EXCEPTION
  WHEN OTHER THEN
    ROLLBACK;
    RAISE;
END;
$$;

-- name: claim_deliveries_block
-- Claims up to limit due deliveries of the sink, each run's in runSeq
-- order and none past a run's first blocked one, for ttl_ms; answers the
-- claimed deliveries (the columns of list_deliveries).
EXECUTE IMMEDIATE $$
DECLARE
  res RESULTSET;
BEGIN
  BEGIN TRANSACTION;
  UPDATE dvt_locks SET owner = owner WHERE lock_name = 'deliveries';
  UPDATE dvt_deliveries
  SET claimed_by = HEX_DECODE_STRING(/*:claim_id*/),
      claim_expires_at = DATEADD(millisecond, /*:ttl_ms*/, CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9)))
  WHERE sink = HEX_DECODE_STRING(/*:sink*/) AND state = 'PENDING'
    AND next_attempt_at <= CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9))
    AND (claim_expires_at IS NULL OR claim_expires_at <= CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9)))
    AND event_id IN (
      SELECT d.event_id
      FROM dvt_deliveries d
      LEFT JOIN (
          SELECT run_id, MIN(run_seq) AS first_blocked
          FROM dvt_deliveries
          WHERE sink = HEX_DECODE_STRING(/*:sink*/) AND (state = 'DEAD' OR (state = 'PENDING' AND (
                next_attempt_at > CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9)) OR claim_expires_at > CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9)))))
          GROUP BY run_id
      ) b ON b.run_id = d.run_id
      WHERE d.sink = HEX_DECODE_STRING(/*:sink*/) AND d.state = 'PENDING' AND (b.first_blocked IS NULL OR d.run_seq < b.first_blocked)
      ORDER BY d.run_id, d.run_seq
      LIMIT /*:limit*/);
  COMMIT;
  res := (
    SELECT d.sink, d.event_id, d.run_id, d.run_seq, CASE WHEN d.run_id = 'dvtrun.audit.checkpoints' THEN 'Checkpoint' ELSE e.event_type END, d.state, d.attempts, d.next_attempt_at,
           d.last_error, d.created_at, d.delivered_at
    FROM dvt_deliveries d
    LEFT JOIN dvt_run_events e ON e.run_id = d.run_id AND e.run_seq = d.run_seq
    WHERE (e.run_id IS NOT NULL OR d.run_id = 'dvtrun.audit.checkpoints') AND d.sink = HEX_DECODE_STRING(/*:sink*/) AND d.claimed_by = HEX_DECODE_STRING(/*:claim_id*/)
    ORDER BY d.run_id, d.run_seq
  );
  RETURN TABLE(res);
EXCEPTION
  WHEN OTHER THEN
    ROLLBACK;
    RAISE;
END;
$$;

-- name: mark_delivered
UPDATE dvt_deliveries
SET state = 'DELIVERED', attempts = attempts + 1, last_error = NULL, claimed_by = NULL, claim_expires_at = NULL,
    delivered_at = CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9))
WHERE sink = ? AND claimed_by = ? AND event_id IN (/*ids*/);

-- name: mark_failed
-- Args: state, last error, retry (ms), dead (1/0), sink, claimID, eventID.
UPDATE dvt_deliveries
SET state = ?, attempts = attempts + 1, last_error = ?, claimed_by = NULL, claim_expires_at = NULL,
    next_attempt_at = DATEADD(millisecond, CAST(? AS NUMBER(38, 0)), CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9))),
    dead_at = CASE WHEN CAST(? AS NUMBER(38, 0)) = 1 THEN CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9)) END
WHERE sink = ? AND claimed_by = ? AND event_id = ?;

-- name: release_claim
UPDATE dvt_deliveries SET claimed_by = NULL, claim_expires_at = NULL WHERE sink = ? AND claimed_by = ?;

-- name: retry_dead
UPDATE dvt_deliveries
SET state = 'PENDING', attempts = 0, dead_at = NULL, next_attempt_at = CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9))
WHERE state = 'DEAD' AND (? = '' OR sink = ?) AND (? = '' OR event_id = ?);

-- name: list_deliveries
SELECT d.sink, d.event_id, d.run_id, d.run_seq, CASE WHEN d.run_id = 'dvtrun.audit.checkpoints' THEN 'Checkpoint' ELSE e.event_type END, d.state, d.attempts, d.next_attempt_at,
       d.last_error, d.created_at, d.delivered_at
FROM dvt_deliveries d
LEFT JOIN dvt_run_events e ON e.run_id = d.run_id AND e.run_seq = d.run_seq
WHERE (e.run_id IS NOT NULL OR d.run_id = 'dvtrun.audit.checkpoints') AND (? = '' OR d.sink = ?) AND (? = '' OR d.state = ?) AND (? = '' OR d.event_id = ?)
ORDER BY d.run_id, d.run_seq, d.sink
LIMIT ?;
