-- Issue 20: a step run again after a resume (a new engine attempt of the
-- same logical attempt, whose StepStarted is the earlier runner's) is
-- timed by that attempt: its StepCompleted/StepFailed carries
-- payload.attemptStartedAt, which becomes the step's started_at, and the
-- duration runs from it, as engine.payloadAttemptStart in the Go reducer
-- and sql/snowflake/projection.sql. dvt_event_states repeats the
-- projection's CTEs (a test keeps them equal); dvt_step_timeline starts an
-- attempt where its outcome says it started. The views that read
-- dvt_event_states (snapshots, failures, violations) follow.
CREATE OR REPLACE VIEW dvt_event_states AS
WITH RECURSIVE
ev AS (
    SELECT run_id, run_seq, tenant_id, project_id, environment_id, event_id, event_type,
           COALESCE(step_id, '') AS step_id, logical_attempt_id, engine_attempt_id,
           emitted_at, persisted_at, payload
    FROM dvt_run_events
),
kinds AS (
    SELECT entity, event_type, MAX(to_status) AS target
    FROM dvt_transitions GROUP BY entity, event_type
),
run_states AS (
    SELECT 'NONE' AS s
    UNION SELECT from_status FROM dvt_transitions WHERE entity = 'RUN'
    UNION SELECT to_status FROM dvt_transitions WHERE entity = 'RUN'
),
step_states AS (
    SELECT 'PENDING' AS s
    UNION SELECT from_status FROM dvt_transitions WHERE entity = 'STEP'
    UNION SELECT to_status FROM dvt_transitions WHERE entity = 'STEP'
),
attempt_rels AS (
    SELECT 'LOWER' AS rel UNION ALL SELECT 'SAME' UNION ALL SELECT 'HIGHER'
),
-- A state nothing leaves is terminal.
run_exits AS (
    SELECT DISTINCT from_status FROM dvt_transitions WHERE entity = 'RUN'
),
-- The table made total: every (state, event) with the state it leads to,
-- NULL when not allowed, so the recursion needs inner joins only.
run_moves AS (
    SELECT rs.s AS from_status, k.event_type, t.to_status, x.from_status IS NULL AS terminal
    FROM run_states rs
    CROSS JOIN kinds k
    LEFT JOIN dvt_transitions t
      ON t.entity = 'RUN' AND t.from_status = rs.s AND t.event_type = k.event_type
    LEFT JOIN run_exits x ON x.from_status = t.to_status
    WHERE k.entity = 'RUN'
),
step_moves AS (
    SELECT ss.s AS from_status, k.event_type, rs.s AS run_status, ar.rel, MAX(t.to_status) AS to_status
    FROM step_states ss
    CROSS JOIN kinds k
    CROSS JOIN run_states rs
    CROSS JOIN attempt_rels ar
    LEFT JOIN dvt_transitions t
      ON t.entity = 'STEP' AND t.from_status = ss.s AND t.event_type = k.event_type
     AND t.run_status = rs.s AND t.attempt_rule IN ('ANY', ar.rel)
    WHERE k.entity = 'STEP'
    GROUP BY ss.s, k.event_type, rs.s, ar.rel
),
-- State-changing events, numbered by occurrence of their re-delivery key,
-- with the payload fields the reducer reads (engine.payloadError: an
-- "error" object whose fields decode, else none).
keyed AS (
    SELECT ev.*, k.entity, k.target,
           CASE WHEN k.entity = 'STEP' THEN ev.step_id ELSE '' END AS entity_id,
           ROW_NUMBER() OVER (
               PARTITION BY ev.run_id, k.entity, CASE WHEN k.entity = 'STEP' THEN ev.step_id ELSE '' END,
                            ev.event_type, ev.logical_attempt_id
               ORDER BY ev.run_seq) AS occurrence,
           COALESCE(ev.event_type IN ('RunFailed', 'StepFailed')
                AND LEFT(TO_JSON(ev.payload:error), 1) = '{'
                AND COALESCE(LEFT(TO_JSON(ev.payload:error:code), 1), 'n') IN ('n', '"')
                AND COALESCE(LEFT(TO_JSON(ev.payload:error:message), 1), 'n') IN ('n', '"')
                AND COALESCE(LEFT(TO_JSON(ev.payload:error:retryable), 1), 'n') IN ('n', 't', 'f'), FALSE) AS p_has_error,
           CASE WHEN LEFT(TO_JSON(ev.payload:error:code), 1) = '"' THEN ev.payload:error:code::string END AS p_error_code,
           CASE WHEN LEFT(TO_JSON(ev.payload:error:message), 1) = '"' THEN ev.payload:error:message::string END AS p_error_message,
           COALESCE(LEFT(TO_JSON(ev.payload:error:retryable), 1) = 't', FALSE) AS p_error_retryable,
           CASE WHEN ev.event_type = 'StepSkipped' AND LEFT(TO_JSON(ev.payload:reason), 1) = '"'
                THEN ev.payload:reason::string ELSE '' END AS p_reason,
           CASE WHEN ev.event_type = 'StepCompleted' AND LEFT(TO_JSON(ev.payload:artifacts), 1) = '['
                THEN TO_JSON(ev.payload:artifacts) END AS p_artifacts,
           -- When the engine attempt behind an outcome started, if not at its
           -- StepStarted (engine.payloadAttemptStart): a string in
           -- engine.TimeFormat that is a valid instant, else none.
           CASE WHEN ev.event_type IN ('StepCompleted', 'StepFailed') AND LEFT(TO_JSON(ev.payload:attemptStartedAt), 1) = '"'
                 AND ev.payload:attemptStartedAt::string LIKE '____-__-__T__:__:__._________Z'
                 -- A cast would roll 24:00 over to the next day; Go refuses it.
                 AND SUBSTR(ev.payload:attemptStartedAt::string, 12, 2) <= '23'
                 AND SUBSTR(ev.payload:attemptStartedAt::string, 15, 2) <= '59'
                 AND SUBSTR(ev.payload:attemptStartedAt::string, 18, 2) <= '59'
                THEN TRY_CAST(REPLACE(ev.payload:attemptStartedAt::string, 'Z', '+00:00') AS TIMESTAMP_TZ(9)) END AS p_attempt_started_at
    FROM ev JOIN kinds k ON k.event_type = ev.event_type
    WHERE k.entity = 'RUN' OR ev.step_id <> ''
),
-- First occurrences: n numbers them per entity; k counts the run events up
-- to each event, so a step event sees run_chain row n = k.
applied AS (
    SELECT keyed.*,
           ROW_NUMBER() OVER (PARTITION BY run_id, entity, entity_id ORDER BY run_seq) AS n,
           SUM(CASE WHEN entity = 'RUN' THEN 1 ELSE 0 END)
               OVER (PARTITION BY run_id ORDER BY run_seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS k
    FROM keyed WHERE occurrence = 1
),
-- Row n = 0 is the run before its first event; row n is the run after its
-- n-th applied event. ok: the event was allowed (NULL on row 0).
run_chain (run_id, n, run_seq, event_id, event_type, step_id, persisted_at, target, ok,
           prior, status, started_at, completed_at, duration_ms,
           has_error, error_code, error_message, error_retryable) AS (
    SELECT DISTINCT run_id, CAST(0 AS INTEGER), CAST(0 AS INTEGER), CAST(NULL AS VARCHAR), CAST(NULL AS VARCHAR),
           CAST(NULL AS VARCHAR), CAST(NULL AS TIMESTAMP_TZ(9)), CAST(NULL AS VARCHAR), CAST(NULL AS BOOLEAN),
           CAST(NULL AS VARCHAR), CAST('NONE' AS VARCHAR), CAST(NULL AS TIMESTAMP_TZ(9)), CAST(NULL AS TIMESTAMP_TZ(9)),
           CAST(0 AS INTEGER), CAST(FALSE AS BOOLEAN), CAST(NULL AS VARCHAR), CAST(NULL AS VARCHAR), CAST(NULL AS BOOLEAN)
    FROM applied WHERE entity = 'RUN'
    UNION ALL
    SELECT c.run_id, a.n, a.run_seq, a.event_id, a.event_type, a.step_id, a.persisted_at, a.target,
           m.to_status IS NOT NULL,
           c.status,
           COALESCE(m.to_status, c.status),
           CASE WHEN m.to_status IS NOT NULL AND a.event_type = 'RunStarted' THEN a.emitted_at ELSE c.started_at END,
           CASE WHEN m.to_status IS NOT NULL AND a.event_type <> 'RunStarted' AND m.terminal THEN a.emitted_at ELSE c.completed_at END,
           CASE WHEN m.to_status IS NOT NULL AND a.event_type <> 'RunStarted' AND m.terminal
                THEN COALESCE(DATEDIFF('millisecond', c.started_at, a.emitted_at), 0) ELSE c.duration_ms END,
           CASE WHEN m.to_status IS NOT NULL AND a.event_type = 'RunFailed' AND m.terminal THEN a.p_has_error ELSE c.has_error END,
           CASE WHEN m.to_status IS NOT NULL AND a.event_type = 'RunFailed' AND m.terminal THEN a.p_error_code ELSE c.error_code END,
           CASE WHEN m.to_status IS NOT NULL AND a.event_type = 'RunFailed' AND m.terminal THEN a.p_error_message ELSE c.error_message END,
           CASE WHEN m.to_status IS NOT NULL AND a.event_type = 'RunFailed' AND m.terminal THEN a.p_error_retryable ELSE c.error_retryable END
    FROM run_chain c
    JOIN applied a ON a.run_id = c.run_id AND a.entity = 'RUN' AND a.entity_id = '' AND a.n = c.n + 1
    JOIN run_moves m ON m.from_status = c.status AND m.event_type = a.event_type
),
step_events AS (
    SELECT a.*, COALESCE(rc.status, 'NONE') AS run_status
    FROM applied a
    LEFT JOIN run_chain rc ON rc.run_id = a.run_id AND rc.n = a.k
    WHERE a.entity = 'STEP'
),
-- Row n = 0 is the step when the log first names it (PENDING, attempt 0).
step_chain (run_id, step_id, n, run_seq, event_id, event_type, persisted_at, target, ok,
            prior, status, logical_attempt_id, engine_attempt_id, last_event_seq,
            started_at, completed_at, duration_ms,
            has_error, error_code, error_message, error_retryable, skip_reason, artifacts) AS (
    SELECT run_id, step_id, CAST(0 AS INTEGER), run_seq, CAST(NULL AS VARCHAR), CAST(NULL AS VARCHAR),
           CAST(NULL AS TIMESTAMP_TZ(9)), CAST(NULL AS VARCHAR), CAST(NULL AS BOOLEAN),
           CAST(NULL AS VARCHAR), CAST('PENDING' AS VARCHAR), CAST(0 AS INTEGER), CAST(0 AS INTEGER), CAST(0 AS INTEGER),
           CAST(NULL AS TIMESTAMP_TZ(9)), CAST(NULL AS TIMESTAMP_TZ(9)), CAST(0 AS INTEGER),
           CAST(FALSE AS BOOLEAN), CAST(NULL AS VARCHAR), CAST(NULL AS VARCHAR), CAST(NULL AS BOOLEAN),
           CAST(NULL AS VARCHAR), CAST(NULL AS VARCHAR)
    FROM step_events WHERE n = 1
    UNION ALL
    SELECT c.run_id, c.step_id, e.n, e.run_seq, e.event_id, e.event_type, e.persisted_at, e.target,
           m.to_status IS NOT NULL,
           c.status,
           COALESCE(m.to_status, c.status),
           CASE WHEN m.to_status IS NOT NULL AND e.event_type IN ('StepStarted', 'StepSkipped') THEN e.logical_attempt_id ELSE c.logical_attempt_id END,
           CASE WHEN m.to_status IS NOT NULL THEN e.engine_attempt_id ELSE c.engine_attempt_id END,
           CASE WHEN m.to_status IS NOT NULL THEN e.run_seq ELSE c.last_event_seq END,
           CASE WHEN m.to_status IS NOT NULL AND e.event_type = 'StepStarted' THEN e.emitted_at
                WHEN m.to_status IS NOT NULL AND e.p_attempt_started_at IS NOT NULL THEN e.p_attempt_started_at
                ELSE c.started_at END,
           CASE WHEN m.to_status IS NULL THEN c.completed_at
                WHEN e.event_type = 'StepStarted' THEN NULL
                WHEN e.event_type IN ('StepCompleted', 'StepFailed') THEN e.emitted_at
                ELSE c.completed_at END,
           CASE WHEN m.to_status IS NULL THEN c.duration_ms
                WHEN e.event_type = 'StepStarted' THEN 0
                WHEN e.event_type IN ('StepCompleted', 'StepFailed') THEN COALESCE(DATEDIFF('millisecond', COALESCE(e.p_attempt_started_at, c.started_at), e.emitted_at), 0)
                ELSE c.duration_ms END,
           CASE WHEN m.to_status IS NULL THEN c.has_error
                WHEN e.event_type = 'StepStarted' THEN FALSE
                WHEN e.event_type = 'StepFailed' THEN e.p_has_error
                ELSE c.has_error END,
           CASE WHEN m.to_status IS NULL THEN c.error_code
                WHEN e.event_type = 'StepStarted' THEN NULL
                WHEN e.event_type = 'StepFailed' THEN e.p_error_code
                ELSE c.error_code END,
           CASE WHEN m.to_status IS NULL THEN c.error_message
                WHEN e.event_type = 'StepStarted' THEN NULL
                WHEN e.event_type = 'StepFailed' THEN e.p_error_message
                ELSE c.error_message END,
           CASE WHEN m.to_status IS NULL THEN c.error_retryable
                WHEN e.event_type = 'StepStarted' THEN NULL
                WHEN e.event_type = 'StepFailed' THEN e.p_error_retryable
                ELSE c.error_retryable END,
           CASE WHEN m.to_status IS NOT NULL AND e.event_type = 'StepSkipped' THEN e.p_reason ELSE c.skip_reason END,
           CASE WHEN m.to_status IS NOT NULL AND e.event_type = 'StepCompleted' THEN e.p_artifacts ELSE c.artifacts END
    FROM step_chain c
    JOIN step_events e ON e.run_id = c.run_id AND e.entity_id = c.step_id AND e.n = c.n + 1
    JOIN step_moves m ON m.from_status = c.status AND m.event_type = e.event_type AND m.run_status = e.run_status
     AND m.rel = CASE WHEN e.logical_attempt_id > c.logical_attempt_id THEN 'HIGHER'
                      WHEN e.logical_attempt_id = c.logical_attempt_id THEN 'SAME' ELSE 'LOWER' END
)

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
