-- Statements of the run queue and schedule cursors (store/sqlite/queue.go).
-- The database's clock is strftime('now') padded to engine.TimeFormat's
-- nine fractional digits; 'now' is fixed for the duration of a statement.

-- name: db_now
SELECT strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000000Z';

-- name: queue_stats
SELECT strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000000Z',
       (SELECT COUNT(*) FROM dvt_run_requests WHERE state = 'PENDING'),
       (SELECT COUNT(*) FROM dvt_run_requests WHERE state IN ('CLAIMED', 'RUNNING')),
       (SELECT COUNT(*) FROM dvt_run_requests WHERE state IN ('CLAIMED', 'RUNNING') AND plan_id = ?);

-- name: request_by_key
SELECT request_id, idem_key, tenant_id, project_id, environment_id, plan_id, plan_version,
       run_request_id, plan_path, plan_sha256, priority, not_before, COALESCE(schedule_name, ''),
       serial, state, COALESCE(owner, ''), COALESCE(run_id, ''), COALESCE(outcome, ''),
       enqueue_seq, version, attempts, enqueued_at, COALESCE(claimed_at, ''), COALESCE(finished_at, ''), run_shape FROM dvt_run_requests WHERE idem_key = ?;

-- name: request_by_id
SELECT request_id, idem_key, tenant_id, project_id, environment_id, plan_id, plan_version,
       run_request_id, plan_path, plan_sha256, priority, not_before, COALESCE(schedule_name, ''),
       serial, state, COALESCE(owner, ''), COALESCE(run_id, ''), COALESCE(outcome, ''),
       enqueue_seq, version, attempts, enqueued_at, COALESCE(claimed_at, ''), COALESCE(finished_at, ''), run_shape FROM dvt_run_requests WHERE request_id = ?;

-- name: next_enqueue_seq
SELECT COALESCE(MAX(enqueue_seq), 0) + 1 FROM dvt_run_requests;

-- name: insert_request
INSERT INTO dvt_run_requests (request_id, idem_key, tenant_id, project_id, environment_id, plan_id,
                              plan_version, run_request_id, plan_path, plan_sha256, priority,
                              not_before, schedule_name, serial, state, enqueue_seq, version,
                              attempts, enqueued_at, run_shape)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'PENDING', ?, 1, 0, ?, ?);

-- name: list_requests
SELECT request_id, idem_key, tenant_id, project_id, environment_id, plan_id, plan_version,
       run_request_id, plan_path, plan_sha256, priority, not_before, COALESCE(schedule_name, ''),
       serial, state, COALESCE(owner, ''), COALESCE(run_id, ''), COALESCE(outcome, ''),
       enqueue_seq, version, attempts, enqueued_at, COALESCE(claimed_at, ''), COALESCE(finished_at, ''), run_shape FROM dvt_run_requests
WHERE (? = 1 OR state IN ('PENDING', 'CLAIMED', 'RUNNING'))
ORDER BY enqueue_seq;

-- name: cancel_request
UPDATE dvt_run_requests
SET state = 'CANCELLED', version = version + 1, finished_at = strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000000Z'
WHERE request_id = ? AND state = 'PENDING';

-- name: heartbeat
INSERT INTO dvt_workers (worker_id, started_at, heartbeat_at, expires_at)
VALUES (?, strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000000Z', strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000000Z',
        strftime('%Y-%m-%dT%H:%M:%f', 'now', ?) || '000000Z')
ON CONFLICT (worker_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at;

-- name: list_workers
-- Every worker's heartbeat row, and whether it is live by the database's
-- clock (the console's workers page).
SELECT worker_id, started_at, heartbeat_at, expires_at,
       CASE WHEN expires_at > strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000000Z' THEN 1 ELSE 0 END
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
WHERE (r.state = 'PENDING' AND r.not_before <= strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000000Z')
   OR (r.state IN ('CLAIMED', 'RUNNING')
       AND r.owner NOT IN (SELECT worker_id FROM dvt_workers WHERE expires_at > strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000000Z'))
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
SET state = CASE WHEN run_id IS NULL THEN 'CLAIMED' ELSE 'RUNNING' END,
    owner = ?, version = version + 1, attempts = attempts + 1,
    claimed_at = strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000000Z'
WHERE request_id = ? AND version = ?
  AND ((state = 'PENDING' AND not_before <= strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000000Z')
       OR (state IN ('CLAIMED', 'RUNNING')
           AND owner NOT IN (SELECT worker_id FROM dvt_workers WHERE expires_at > strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000000Z')));

-- name: set_request_run
UPDATE dvt_run_requests SET state = 'RUNNING', run_id = ?, version = version + 1
WHERE request_id = ? AND owner = ? AND state IN ('CLAIMED', 'RUNNING');

-- name: finish_request
UPDATE dvt_run_requests
SET state = 'DONE', outcome = ?, version = version + 1,
    finished_at = strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000000Z'
WHERE request_id = ? AND owner = ? AND state IN ('CLAIMED', 'RUNNING');

-- name: release_request
UPDATE dvt_run_requests
SET state = CASE WHEN run_id IS NULL THEN 'PENDING' ELSE 'RUNNING' END,
    owner = CASE WHEN run_id IS NULL THEN NULL ELSE '' END, version = version + 1
WHERE request_id = ? AND owner = ? AND state IN ('CLAIMED', 'RUNNING');

-- name: get_cursor
SELECT schedule_name, next_tick, version, COALESCE(last_tick, ''), COALESCE(last_request_id, ''),
       fired_total, missed_total, skipped_total
FROM dvt_schedule_cursors WHERE schedule_name = ?;

-- name: list_cursors
SELECT schedule_name, next_tick, version, COALESCE(last_tick, ''), COALESCE(last_request_id, ''),
       fired_total, missed_total, skipped_total
FROM dvt_schedule_cursors ORDER BY schedule_name;

-- name: insert_cursor
INSERT INTO dvt_schedule_cursors (schedule_name, next_tick, version, updated_at)
VALUES (?, ?, 1, strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000000Z');

-- name: cursor_exists
SELECT COUNT(*) FROM dvt_schedule_cursors WHERE schedule_name = ?;

-- name: advance_cursor
-- The scheduler's claim of a tick: the same conditional-UPDATE shape.
UPDATE dvt_schedule_cursors
SET next_tick = ?, version = version + 1, last_tick = COALESCE(?, last_tick),
    last_request_id = COALESCE(?, last_request_id), fired_total = fired_total + ?,
    missed_total = missed_total + ?, skipped_total = skipped_total + ?,
    updated_at = strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000000Z'
WHERE schedule_name = ? AND version = ?;
