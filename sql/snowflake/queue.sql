-- Statements of the run queue and schedule cursors (store/snowflake/queue.go),
-- the SQLite dialect's with the database's clock, CURRENT_TIMESTAMP() cast to
-- the columns' TIMESTAMP_TZ(9).
-- Every write transaction first updates the 'queue' row of dvt_queue_lock
-- (a table of its own: migration 0320), which serialises them (Snowflake has no row locks and no enforced UNIQUE).

-- name: db_now
SELECT CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9));

-- name: lock_queue
UPDATE dvt_queue_lock SET owner = owner WHERE lock_name = 'queue';

-- name: queue_stats
SELECT CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9)),
       (SELECT COUNT(*) FROM dvt_run_requests WHERE state = 'PENDING'),
       (SELECT COUNT(*) FROM dvt_run_requests WHERE state IN ('CLAIMED', 'RUNNING')),
       (SELECT COUNT(*) FROM dvt_run_requests WHERE state IN ('CLAIMED', 'RUNNING') AND plan_id = ?);

-- name: request_by_key
SELECT request_id, idem_key, tenant_id, project_id, environment_id, plan_id, plan_version,
       run_request_id, plan_path, plan_sha256, priority, not_before, COALESCE(schedule_name, ''),
       serial, state, COALESCE(owner, ''), COALESCE(run_id, ''), COALESCE(outcome, ''),
       enqueue_seq, version, attempts, enqueued_at, claimed_at, finished_at, run_shape FROM dvt_run_requests WHERE idem_key = ?;

-- name: request_by_id
SELECT request_id, idem_key, tenant_id, project_id, environment_id, plan_id, plan_version,
       run_request_id, plan_path, plan_sha256, priority, not_before, COALESCE(schedule_name, ''),
       serial, state, COALESCE(owner, ''), COALESCE(run_id, ''), COALESCE(outcome, ''),
       enqueue_seq, version, attempts, enqueued_at, claimed_at, finished_at, run_shape FROM dvt_run_requests WHERE request_id = ?;

-- name: next_enqueue_seq
SELECT COALESCE(MAX(enqueue_seq), 0) + 1 FROM dvt_run_requests;

-- name: insert_request
INSERT INTO dvt_run_requests (request_id, idem_key, tenant_id, project_id, environment_id, plan_id,
                              plan_version, run_request_id, plan_path, plan_sha256, priority,
                              not_before, schedule_name, serial, state, enqueue_seq, version,
                              attempts, enqueued_at, run_shape)
SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, CAST(? AS TIMESTAMP_TZ(9)), ?, ?, 'PENDING', ?, 1, 0,
       CAST(? AS TIMESTAMP_TZ(9)), ?;

-- name: list_requests
SELECT request_id, idem_key, tenant_id, project_id, environment_id, plan_id, plan_version,
       run_request_id, plan_path, plan_sha256, priority, not_before, COALESCE(schedule_name, ''),
       serial, state, COALESCE(owner, ''), COALESCE(run_id, ''), COALESCE(outcome, ''),
       enqueue_seq, version, attempts, enqueued_at, claimed_at, finished_at, run_shape FROM dvt_run_requests
WHERE (? = 1 OR state IN ('PENDING', 'CLAIMED', 'RUNNING'))
ORDER BY enqueue_seq;

-- name: cancel_request
UPDATE dvt_run_requests
SET state = 'CANCELLED', version = version + 1, finished_at = CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9))
WHERE request_id = ? AND state = 'PENDING';

-- name: heartbeat
MERGE INTO dvt_workers t
USING (SELECT CAST(? AS VARCHAR) AS worker_id, CAST(? AS NUMBER(38, 0)) AS ttl_ms) s
ON t.worker_id = s.worker_id
WHEN MATCHED THEN UPDATE SET heartbeat_at = CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9)),
    expires_at = DATEADD(millisecond, s.ttl_ms, CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9)))
WHEN NOT MATCHED THEN INSERT (worker_id, started_at, heartbeat_at, expires_at)
    VALUES (s.worker_id, CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9)), CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9)), DATEADD(millisecond, s.ttl_ms, CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9))));

-- name: list_workers
-- Every worker's heartbeat row, and whether it is live by the database's
-- clock (the console's workers page).
SELECT worker_id, started_at, heartbeat_at, expires_at,
       CASE WHEN expires_at > CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9)) THEN 1 ELSE 0 END
FROM dvt_workers
ORDER BY worker_id;

-- name: retire_worker
DELETE FROM dvt_workers WHERE worker_id = ?;

-- name: claim_candidates
-- Takeovers first (their runs are already under way), then PENDING
-- requests by priority and enqueue order. The schedule columns let the
-- claimer hold back serial requests of a busy schedule. One claim considers
-- the first 32 (a literal: Snowflake's LIMIT is not documented to bind).
SELECT r.request_id, r.plan_id, r.version, r.state, COALESCE(r.schedule_name, ''), r.serial, r.enqueue_seq
FROM dvt_run_requests r
WHERE (r.state = 'PENDING' AND r.not_before <= CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9)))
   OR (r.state IN ('CLAIMED', 'RUNNING')
       AND r.owner NOT IN (SELECT worker_id FROM dvt_workers WHERE expires_at > CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9))))
ORDER BY CASE WHEN r.state = 'PENDING' THEN 1 ELSE 0 END, r.priority DESC, r.enqueue_seq
LIMIT 32;

-- name: active_by_plan
SELECT plan_id, COUNT(*) FROM dvt_run_requests WHERE state IN ('CLAIMED', 'RUNNING') GROUP BY plan_id;

-- name: busy_schedules
-- For serial requests: the schedules with a request claimed or running,
-- and the first waiting request of each.
SELECT schedule_name, SUM(CASE WHEN state IN ('CLAIMED', 'RUNNING') THEN 1 ELSE 0 END),
       MIN(CASE WHEN state = 'PENDING' THEN enqueue_seq END)
FROM dvt_run_requests
WHERE schedule_name IS NOT NULL AND state IN ('PENDING', 'CLAIMED', 'RUNNING')
GROUP BY schedule_name;

-- name: claim_request
-- The claim: one conditional UPDATE. It changes the row only if nobody
-- changed it since it was read (version) and it is still claimable by the
-- database's clock; the affected-row count (0 or 1) decides.
UPDATE dvt_run_requests
SET state = IFF(run_id IS NULL, 'CLAIMED', 'RUNNING'),
    owner = ?, version = version + 1, attempts = attempts + 1,
    claimed_at = CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9))
WHERE request_id = ? AND version = ?
  AND ((state = 'PENDING' AND not_before <= CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9)))
       OR (state IN ('CLAIMED', 'RUNNING')
           AND owner NOT IN (SELECT worker_id FROM dvt_workers WHERE expires_at > CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9)))));

-- name: set_request_run
UPDATE dvt_run_requests SET state = 'RUNNING', run_id = ?, version = version + 1
WHERE request_id = ? AND owner = ? AND state IN ('CLAIMED', 'RUNNING');

-- name: finish_request
UPDATE dvt_run_requests
SET state = 'DONE', outcome = ?, version = version + 1,
    finished_at = CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9))
WHERE request_id = ? AND owner = ? AND state IN ('CLAIMED', 'RUNNING');

-- name: release_request
UPDATE dvt_run_requests
SET state = IFF(run_id IS NULL, 'PENDING', 'RUNNING'),
    owner = IFF(run_id IS NULL, NULL, ''), version = version + 1
WHERE request_id = ? AND owner = ? AND state IN ('CLAIMED', 'RUNNING');

-- name: get_cursor
SELECT schedule_name, next_tick, version, last_tick, COALESCE(last_request_id, ''),
       fired_total, missed_total, skipped_total
FROM dvt_schedule_cursors WHERE schedule_name = ?;

-- name: list_cursors
SELECT schedule_name, next_tick, version, last_tick, COALESCE(last_request_id, ''),
       fired_total, missed_total, skipped_total
FROM dvt_schedule_cursors ORDER BY schedule_name;

-- name: insert_cursor
INSERT INTO dvt_schedule_cursors (schedule_name, next_tick, version, updated_at, fired_total, missed_total, skipped_total)
SELECT ?, CAST(? AS TIMESTAMP_TZ(9)), 1, CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9)), 0, 0, 0;

-- name: cursor_exists
SELECT COUNT(*) FROM dvt_schedule_cursors WHERE schedule_name = ?;

-- name: advance_cursor
-- The scheduler's claim of a tick: the same conditional-UPDATE shape.
UPDATE dvt_schedule_cursors
SET next_tick = CAST(? AS TIMESTAMP_TZ(9)), version = version + 1,
    last_tick = COALESCE(CAST(? AS TIMESTAMP_TZ(9)), last_tick),
    last_request_id = COALESCE(?, last_request_id), fired_total = fired_total + ?,
    missed_total = missed_total + ?, skipped_total = skipped_total + ?,
    updated_at = CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9))
WHERE schedule_name = ? AND version = ?;
