-- Statements of the live projection's snapshot table (store/postgres
-- snapshots.go), by name.

-- name: pending_snapshots
-- Runs whose log moved past their snapshot (or that have none) first, then
-- STALE ones, which are resynced until their hole closes.
SELECT q.run_id
FROM dvt_run_seq q LEFT JOIN dvt_live_snapshots s ON s.run_id = q.run_id
WHERE q.next_seq > 1 AND (s.run_id IS NULL OR s.last_event_seq < q.next_seq - 1 OR s.stale = 1)
ORDER BY CASE WHEN s.run_id IS NULL OR s.last_event_seq < q.next_seq - 1 THEN 0 ELSE 1 END, q.run_id
LIMIT $1;

-- name: load_snapshot
SELECT state, version FROM dvt_live_snapshots WHERE run_id = $1;

-- name: insert_snapshot
INSERT INTO dvt_live_snapshots (run_id, tenant_id, project_id, environment_id, status, substatus,
                                in_flight, last_event_seq, stale, inconsistent, state, version,
                                projected_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 1, $12)
ON CONFLICT (run_id) DO NOTHING;

-- name: update_snapshot
UPDATE dvt_live_snapshots
SET tenant_id = $1, project_id = $2, environment_id = $3, status = $4, substatus = $5, in_flight = $6,
    last_event_seq = $7, stale = $8, inconsistent = $9, state = $10, version = version + 1,
    projected_at = $11
WHERE run_id = $12 AND version = $13;
