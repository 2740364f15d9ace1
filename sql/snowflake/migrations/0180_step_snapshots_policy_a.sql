-- Policy A (RunEvents §5.3, issue 8): an invalid event about a step the log
-- never started creates no step. dvt_step_snapshots lists a step only once
-- an event applied to it, ordered by that event (first_seq), as the Go
-- reducer and the projection in sql/snowflake/projection.sql do.

-- One row per step: its snapshot. first_seq orders steps by the first event
-- that applied to each. last_persisted_at is when the step's state last
-- changed.
CREATE OR REPLACE VIEW dvt_step_snapshots AS
SELECT * FROM (
    SELECT tenant_id, project_id, environment_id, run_id, step_id,
           state_after AS status,
           step_logical_attempt_id AS logical_attempt_id,
           step_engine_attempt_id AS engine_attempt_id,
           started_at, completed_at, duration_ms,
           has_error, error_code, error_message, error_retryable,
           skip_reason, artifacts,
           step_last_event_seq AS last_event_seq,
           MIN(CASE WHEN applied THEN run_seq END) OVER (PARTITION BY run_id, step_id) AS first_seq,
           MAX(CASE WHEN applied THEN persisted_at END) OVER (PARTITION BY run_id, step_id) AS last_persisted_at
    FROM dvt_event_states
    WHERE entity = 'STEP' AND applied IS NOT NULL
    QUALIFY ROW_NUMBER() OVER (PARTITION BY run_id, step_id ORDER BY run_seq DESC) = 1
) WHERE first_seq IS NOT NULL;
