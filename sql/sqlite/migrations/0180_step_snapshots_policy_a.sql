-- Policy A (RunEvents §5.3, issue 8): an invalid event about a step the log
-- never started creates no step. dvt_step_snapshots lists a step only once
-- an event applied to it, ordered by that event (first_seq), as the Go
-- reducer and the projection in sql/sqlite/projection.sql do.
DROP VIEW dvt_step_snapshots;

-- One row per step: its snapshot. first_seq orders steps by the first event
-- that applied to each; last_persisted_at is when the step's state last
-- changed.
CREATE VIEW dvt_step_snapshots AS
WITH es AS MATERIALIZED (SELECT * FROM dvt_event_states)
SELECT s.tenant_id, s.project_id, s.environment_id, s.run_id, s.step_id,
       s.state_after AS status,
       s.step_logical_attempt_id AS logical_attempt_id,
       s.step_engine_attempt_id AS engine_attempt_id,
       s.started_at, s.completed_at, s.duration_ms,
       s.has_error, s.error_code, s.error_message, s.error_retryable,
       s.skip_reason, s.artifacts,
       s.step_last_event_seq AS last_event_seq,
       s.first_seq,
       (SELECT MAX(x.persisted_at) FROM es x
         WHERE x.run_id = s.run_id AND x.step_id = s.step_id AND x.applied = 1) AS last_persisted_at
FROM (
    SELECT es.*,
           MIN(CASE WHEN applied = 1 THEN run_seq END) OVER (PARTITION BY run_id, step_id) AS first_seq,
           ROW_NUMBER() OVER (PARTITION BY run_id, step_id ORDER BY run_seq DESC) AS r
    FROM es WHERE entity = 'STEP' AND applied IS NOT NULL
) s
WHERE s.r = 1 AND s.first_seq IS NOT NULL;
