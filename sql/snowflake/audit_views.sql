-- The audit views (issue #5), documented with example queries in
-- docs/audit.md, as one named statement list that the migrations include
-- (/*include audit_views.sql views*/, expanded by sqlfiles.Migrations): 0100
-- creates them, and a migration that changes them, or the projection they
-- read, includes this list again (0600 did, when the views came to read the
-- projection's text instead of a copy of it).
--
-- Every view is derived from dvt_run_events and dvt_transitions alone (plus
-- dvt_runs for plan columns), so auditors see what the Go reducer sees:
-- dvt_event_states includes the recursive CTEs of projection.sql (its query
-- `states`), and the snapshot views are checked against the Go reducer by
-- the same property test as the projection.
-- Time slicing: persisted_at (the store's clock) is authoritative
-- (RunEvents §2.4); emitted_at is the producer's and may be skewed.
-- Statements end with a semicolon at the end of a line, one per request;
-- CREATE OR REPLACE makes them re-runnable.

-- name: views
-- One row per event: which entity it concerns, whether it was a
-- re-delivery, whether Policy A applied or ignored it, the state before and
-- after it, and the entity's derived fields after it.
CREATE OR REPLACE VIEW dvt_event_states AS
WITH RECURSIVE
/*include projection.sql states*/
SELECT ev.tenant_id, ev.project_id, ev.environment_id, ev.run_id, ev.run_seq, ev.event_id, ev.event_type,
       NULLIF(ev.step_id, '') AS step_id, ev.logical_attempt_id, ev.engine_attempt_id,
       ev.emitted_at, ev.persisted_at,
       kd.entity,
       CASE WHEN kd.entity IS NOT NULL THEN kd.occurrence > 1 END AS redelivered,
       COALESCE(rc.ok, sc.ok) AS applied,
       COALESCE(rc.prior, sc.prior) AS prior_state,
       CASE WHEN kd.occurrence = 1 THEN kd.target END AS attempted_state,
       COALESCE(rc.status, sc.status) AS state_after,
       se.run_status AS run_status_before,
       sc.logical_attempt_id AS step_logical_attempt_id,
       sc.engine_attempt_id AS step_engine_attempt_id,
       sc.last_event_seq AS step_last_event_seq,
       COALESCE(rc.started_at, sc.started_at) AS started_at,
       COALESCE(rc.completed_at, sc.completed_at) AS completed_at,
       COALESCE(rc.duration_ms, sc.duration_ms) AS duration_ms,
       COALESCE(rc.has_error, sc.has_error) AS has_error,
       CASE WHEN COALESCE(rc.has_error, sc.has_error) THEN COALESCE(rc.error_code, sc.error_code, '') END AS error_code,
       CASE WHEN COALESCE(rc.has_error, sc.has_error) THEN COALESCE(rc.error_message, sc.error_message, '') END AS error_message,
       CASE WHEN COALESCE(rc.has_error, sc.has_error) THEN COALESCE(rc.error_retryable, sc.error_retryable) END AS error_retryable,
       sc.skip_reason,
       sc.artifacts
FROM ev
LEFT JOIN keyed kd ON kd.run_id = ev.run_id AND kd.run_seq = ev.run_seq
LEFT JOIN run_chain rc ON rc.run_id = ev.run_id AND rc.run_seq = ev.run_seq AND rc.n > 0
LEFT JOIN step_chain sc ON sc.run_id = ev.run_id AND sc.run_seq = ev.run_seq AND sc.n > 0
LEFT JOIN step_events se ON se.run_id = ev.run_id AND se.run_seq = ev.run_seq;

-- One row per run that has events: its snapshot.
CREATE OR REPLACE VIEW dvt_run_snapshots AS
WITH es AS (SELECT * FROM dvt_event_states),
last_run AS (
    SELECT * FROM es WHERE entity = 'RUN' AND applied IS NOT NULL
    QUALIFY ROW_NUMBER() OVER (PARTITION BY run_id ORDER BY run_seq DESC) = 1
),
draining AS (
    SELECT DISTINCT run_id FROM (
        SELECT run_id, state_after FROM es WHERE entity = 'STEP' AND applied IS NOT NULL
        QUALIFY ROW_NUMBER() OVER (PARTITION BY run_id, step_id ORDER BY run_seq DESC) = 1
    ) WHERE state_after = 'RUNNING'
),
tenancy AS (
    SELECT run_id, tenant_id, project_id, environment_id
    FROM es WHERE tenant_id <> '' OR project_id <> '' OR environment_id <> ''
    QUALIFY ROW_NUMBER() OVER (PARTITION BY run_id ORDER BY run_seq) = 1
),
runs AS (
    SELECT run_id, MAX(run_seq) AS last_event_seq, COUNT(*) AS event_count,
           SUM(CASE WHEN NOT applied THEN 1 ELSE 0 END) AS violation_count,
           MIN(persisted_at) AS first_persisted_at, MAX(persisted_at) AS last_persisted_at
    FROM es GROUP BY run_id
)
SELECT r.run_id,
       COALESCE(t.tenant_id, '') AS tenant_id, COALESCE(t.project_id, '') AS project_id,
       COALESCE(t.environment_id, '') AS environment_id,
       m.plan_id, m.plan_version,
       COALESCE(lr.state_after, 'NONE') AS status,
       CASE WHEN lr.state_after = 'PAUSED' AND d.run_id IS NOT NULL THEN 'DRAINING' ELSE '' END AS substatus,
       r.last_event_seq,
       r.violation_count > 0 AS inconsistent,
       r.violation_count,
       r.event_count,
       lr.started_at, lr.completed_at, COALESCE(lr.duration_ms, 0) AS duration_ms,
       COALESCE(lr.has_error, FALSE) AS has_error, lr.error_code, lr.error_message, lr.error_retryable,
       r.first_persisted_at, r.last_persisted_at
FROM runs r
LEFT JOIN last_run lr ON lr.run_id = r.run_id
LEFT JOIN tenancy t ON t.run_id = r.run_id
LEFT JOIN draining d ON d.run_id = r.run_id
LEFT JOIN dvt_runs m ON m.run_id = r.run_id;

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

CREATE OR REPLACE VIEW dvt_step_timeline AS
WITH applied_steps AS (
    SELECT es.*,
           LEAD(event_type) OVER (PARTITION BY run_id, step_id ORDER BY run_seq) AS next_type,
           LEAD(emitted_at) OVER (PARTITION BY run_id, step_id ORDER BY run_seq) AS next_emitted_at,
           LEAD(started_at) OVER (PARTITION BY run_id, step_id ORDER BY run_seq) AS next_started_at,
           LEAD(persisted_at) OVER (PARTITION BY run_id, step_id ORDER BY run_seq) AS next_persisted_at,
           LEAD(duration_ms) OVER (PARTITION BY run_id, step_id ORDER BY run_seq) AS next_duration_ms,
           LEAD(error_code) OVER (PARTITION BY run_id, step_id ORDER BY run_seq) AS next_error_code,
           LEAD(engine_attempt_id) OVER (PARTITION BY run_id, step_id ORDER BY run_seq) AS next_engine_attempt_id
    FROM dvt_event_states es
    WHERE entity = 'STEP' AND applied
)
SELECT tenant_id, project_id, environment_id, run_id, step_id,
       logical_attempt_id,
       CASE WHEN event_type = 'StepSkipped' THEN engine_attempt_id
            ELSE COALESCE(next_engine_attempt_id, engine_attempt_id) END AS engine_attempt_id,
       CASE WHEN event_type = 'StepSkipped' THEN 'SKIPPED'
            WHEN next_type = 'StepCompleted' THEN 'SUCCESS'
            WHEN next_type = 'StepFailed' THEN 'FAILED'
            ELSE 'RUNNING' END AS outcome,
       -- The attempt's start: its outcome's (a step run again after a
       -- resume), else its StepStarted's.
       CASE WHEN event_type = 'StepStarted' THEN COALESCE(next_started_at, emitted_at) END AS started_at,
       CASE WHEN event_type = 'StepSkipped' THEN emitted_at ELSE next_emitted_at END AS ended_at,
       CASE WHEN event_type = 'StepStarted' THEN next_duration_ms END AS duration_ms,
       CASE WHEN event_type = 'StepStarted' THEN persisted_at END AS started_persisted_at,
       CASE WHEN event_type = 'StepSkipped' THEN persisted_at ELSE next_persisted_at END AS ended_persisted_at,
       CASE WHEN next_type = 'StepFailed' THEN next_error_code END AS error_code,
       CASE WHEN event_type = 'StepSkipped' THEN skip_reason END AS skip_reason,
       run_seq AS start_seq
FROM applied_steps
WHERE event_type IN ('StepStarted', 'StepSkipped');

-- One row per failure the log applied, with its error. retried: a later
-- attempt of the step started.
CREATE OR REPLACE VIEW dvt_failures AS
SELECT tenant_id, project_id, environment_id, run_id, run_seq, event_id,
       entity, step_id, logical_attempt_id, engine_attempt_id,
       error_code, error_message, error_retryable,
       emitted_at, persisted_at, retried
FROM (
    SELECT es.*,
           COALESCE(entity = 'STEP' AND run_seq < MAX(CASE WHEN event_type = 'StepStarted' AND applied THEN run_seq END)
               OVER (PARTITION BY run_id, step_id), FALSE) AS retried
    FROM dvt_event_states es
)
WHERE applied AND event_type IN ('RunFailed', 'StepFailed');

-- One row per event Policy A ignored: the INVALID_TRANSITION alert payload
-- of RunEvents §5.4.
CREATE OR REPLACE VIEW dvt_violations AS
SELECT tenant_id, project_id, environment_id, run_id, run_seq, event_id, event_type,
       entity, COALESCE(step_id, '') AS step_id, prior_state, attempted_state, persisted_at
FROM dvt_event_states
WHERE NOT applied;
