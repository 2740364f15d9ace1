-- Statements of the run queue and schedule cursors (store/postgres/queue.go),
-- the statements of sql/sqlite/queue.sql in Postgres's dialect. The
-- database's clock is dvt_now() (engine.TimeFormat text); a duration is
-- bound in seconds for dvt_now_plus. Writers run under the queue's
-- transaction lock (store/postgres), so the limits read hold until commit.

-- name: db_now
SELECT dvt_now();

-- name: queue_stats
SELECT dvt_now(),
       (SELECT COUNT(*) FROM dvt_run_requests WHERE state = 'PENDING'),
       (SELECT COUNT(*) FROM dvt_run_requests WHERE state IN ('CLAIMED', 'RUNNING')),
       (SELECT COUNT(*) FROM dvt_run_requests WHERE state IN ('CLAIMED', 'RUNNING') AND plan_id = $1);

-- name: request_by_key
SELECT request_id, idem_key, tenant_id, project_id, environment_id, plan_id, plan_version,
       run_request_id, plan_path, plan_sha256, priority, not_before, COALESCE(schedule_name, ''),
       serial, state, COALESCE(owner, ''), COALESCE(run_id, ''), COALESCE(outcome, ''),
       enqueue_seq, version, attempts, enqueued_at, COALESCE(claimed_at, ''), COALESCE(finished_at, ''), run_shape FROM dvt_run_requests WHERE idem_key = $1;

-- name: request_by_id
SELECT request_id, idem_key, tenant_id, project_id, environment_id, plan_id, plan_version,
       run_request_id, plan_path, plan_sha256, priority, not_before, COALESCE(schedule_name, ''),
       serial, state, COALESCE(owner, ''), COALESCE(run_id, ''), COALESCE(outcome, ''),
       enqueue_seq, version, attempts, enqueued_at, COALESCE(claimed_at, ''), COALESCE(finished_at, ''), run_shape FROM dvt_run_requests WHERE request_id = $1;

-- name: next_enqueue_seq
SELECT COALESCE(MAX(enqueue_seq), 0) + 1 FROM dvt_run_requests;

-- name: insert_request
INSERT INTO dvt_run_requests (request_id, idem_key, tenant_id, project_id, environment_id, plan_id,
                              plan_version, run_request_id, plan_path, plan_sha256, priority,
                              not_before, schedule_name, serial, state, enqueue_seq, version,
                              attempts, enqueued_at, run_shape)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, 'PENDING', $15, 1, 0, $16, $17);

-- name: list_requests
SELECT request_id, idem_key, tenant_id, project_id, environment_id, plan_id, plan_version,
       run_request_id, plan_path, plan_sha256, priority, not_before, COALESCE(schedule_name, ''),
       serial, state, COALESCE(owner, ''), COALESCE(run_id, ''), COALESCE(outcome, ''),
       enqueue_seq, version, attempts, enqueued_at, COALESCE(claimed_at, ''), COALESCE(finished_at, ''), run_shape FROM dvt_run_requests
WHERE ($1 = 1 OR state IN ('PENDING', 'CLAIMED', 'RUNNING'))
ORDER BY enqueue_seq;

-- name: cancel_request
UPDATE dvt_run_requests
SET state = 'CANCELLED', version = version + 1, finished_at = dvt_now()
WHERE request_id = $1 AND state = 'PENDING';

-- name: heartbeat
INSERT INTO dvt_workers (worker_id, started_at, heartbeat_at, expires_at)
VALUES ($1, dvt_now(), dvt_now(),
        dvt_now_plus($2))
ON CONFLICT (worker_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at;

-- name: list_workers
-- Every worker's heartbeat row, and whether it is live by the database's
-- clock (the console's workers page).
SELECT worker_id, started_at, heartbeat_at, expires_at,
       CASE WHEN expires_at > dvt_now() THEN 1 ELSE 0 END
FROM dvt_workers
ORDER BY worker_id;

-- name: retire_worker
DELETE FROM dvt_workers WHERE worker_id = $1;

-- name: claim_candidates
-- Takeovers first (their runs are already under way), then PENDING
-- requests by priority and enqueue order. The schedule columns let the
-- claimer hold back serial requests of a busy schedule. One claim considers
-- the first 32 (a literal: Snowflake's LIMIT is not documented to bind).
SELECT r.request_id, r.plan_id, r.version, r.state, COALESCE(r.schedule_name, ''), r.serial, r.enqueue_seq
FROM dvt_run_requests r
WHERE (r.state = 'PENDING' AND r.not_before <= dvt_now())
   OR (r.state IN ('CLAIMED', 'RUNNING')
       AND r.owner NOT IN (SELECT worker_id FROM dvt_workers WHERE expires_at > dvt_now()))
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
    owner = $1, version = version + 1, attempts = attempts + 1,
    claimed_at = dvt_now()
WHERE request_id = $2 AND version = $3
  AND ((state = 'PENDING' AND not_before <= dvt_now())
       OR (state IN ('CLAIMED', 'RUNNING')
           AND owner NOT IN (SELECT worker_id FROM dvt_workers WHERE expires_at > dvt_now())));

-- name: set_request_run
UPDATE dvt_run_requests SET state = 'RUNNING', run_id = $1, version = version + 1
WHERE request_id = $2 AND owner = $3 AND state IN ('CLAIMED', 'RUNNING');

-- name: finish_request
UPDATE dvt_run_requests
SET state = 'DONE', outcome = $1, version = version + 1,
    finished_at = dvt_now()
WHERE request_id = $2 AND owner = $3 AND state IN ('CLAIMED', 'RUNNING');

-- name: release_request
UPDATE dvt_run_requests
SET state = CASE WHEN run_id IS NULL THEN 'PENDING' ELSE 'RUNNING' END,
    owner = CASE WHEN run_id IS NULL THEN NULL ELSE '' END, version = version + 1
WHERE request_id = $1 AND owner = $2 AND state IN ('CLAIMED', 'RUNNING');

-- name: get_cursor
SELECT schedule_name, next_tick, version, COALESCE(last_tick, ''), COALESCE(last_request_id, ''),
       fired_total, missed_total, skipped_total
FROM dvt_schedule_cursors WHERE schedule_name = $1;

-- name: list_cursors
SELECT schedule_name, next_tick, version, COALESCE(last_tick, ''), COALESCE(last_request_id, ''),
       fired_total, missed_total, skipped_total
FROM dvt_schedule_cursors ORDER BY schedule_name;

-- name: insert_cursor
INSERT INTO dvt_schedule_cursors (schedule_name, next_tick, version, updated_at)
VALUES ($1, $2, 1, dvt_now());

-- name: cursor_exists
SELECT COUNT(*) FROM dvt_schedule_cursors WHERE schedule_name = $1;

-- name: advance_cursor
-- The scheduler's claim of a tick: the same conditional-UPDATE shape.
UPDATE dvt_schedule_cursors
SET next_tick = $1, version = version + 1, last_tick = COALESCE($2, last_tick),
    last_request_id = COALESCE($3, last_request_id), fired_total = fired_total + $4,
    missed_total = missed_total + $5, skipped_total = skipped_total + $6,
    updated_at = dvt_now()
WHERE schedule_name = $7 AND version = $8;

-- name: queue_lock
-- Every queue write transaction starts here: one writer at a time, for the
-- length of its transaction, as BEGIN IMMEDIATE is on SQLite.
SELECT pg_advisory_xact_lock(hashtext('dvtrun/queue'));
