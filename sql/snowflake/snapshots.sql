-- Statements of the live projection's snapshot table (store/snowflake
-- snapshots.go), by name. Values are bound parameters.

-- name: pending_snapshots
-- Runs whose log moved past their snapshot (or that have none) first, then
-- STALE ones, which are resynced until their hole closes.
SELECT q.run_id
FROM dvt_run_seq q LEFT JOIN dvt_live_snapshots s ON s.run_id = q.run_id
WHERE q.next_seq > 1 AND (s.run_id IS NULL OR s.last_event_seq < q.next_seq - 1 OR s.stale)
ORDER BY CASE WHEN s.run_id IS NULL OR s.last_event_seq < q.next_seq - 1 THEN 0 ELSE 1 END, q.run_id
LIMIT ?;

-- name: load_snapshot
SELECT state, version FROM dvt_live_snapshots WHERE run_id = ?;

-- name: insert_snapshot
MERGE INTO dvt_live_snapshots t
USING (
    SELECT CAST(? AS VARCHAR) AS run_id, CAST(? AS VARCHAR) AS tenant_id, CAST(? AS VARCHAR) AS project_id,
           CAST(? AS VARCHAR) AS environment_id, CAST(? AS VARCHAR) AS status, CAST(? AS VARCHAR) AS substatus,
           CAST(? AS NUMBER(38, 0)) AS in_flight, CAST(? AS NUMBER(38, 0)) AS last_event_seq,
           CAST(? AS BOOLEAN) AS stale, CAST(? AS BOOLEAN) AS inconsistent, CAST(? AS VARCHAR) AS state,
           CAST(? AS TIMESTAMP_TZ(9)) AS projected_at
) s
ON t.run_id = s.run_id
WHEN NOT MATCHED THEN INSERT (run_id, tenant_id, project_id, environment_id, status, substatus, in_flight,
                              last_event_seq, stale, inconsistent, state, version, projected_at)
    VALUES (s.run_id, s.tenant_id, s.project_id, s.environment_id, s.status, s.substatus, s.in_flight,
            s.last_event_seq, s.stale, s.inconsistent, s.state, 1, s.projected_at);

-- name: update_snapshot
UPDATE dvt_live_snapshots
SET tenant_id = ?, project_id = ?, environment_id = ?, status = ?, substatus = ?,
    in_flight = CAST(? AS NUMBER(38, 0)), last_event_seq = CAST(? AS NUMBER(38, 0)),
    stale = CAST(? AS BOOLEAN), inconsistent = CAST(? AS BOOLEAN), state = ?, version = version + 1,
    projected_at = CAST(? AS TIMESTAMP_TZ(9))
WHERE run_id = ? AND version = CAST(? AS NUMBER(38, 0));
