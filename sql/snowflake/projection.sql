-- SQL projection of run and step snapshots from dvt_run_events alone,
-- Snowflake dialect: the same statement as sql/sqlite/projection.sql (read
-- that file's header for the rules it mirrors from engine/reducer.go), with
-- Snowflake's types: TIMESTAMP_TZ(9) times, VARIANT payloads, BOOLEAN flags.
--
-- The projection text exists once: `states` is the recursive CTEs (each
-- event with the state before and after it), which the audit view
-- dvt_event_states includes verbatim (sql/snowflake/audit_views.sql says /*include
-- projection.sql states*/, expanded by sqlfiles.Migrations), and `project`
-- is the snapshot query that follows them (sqlfiles.ProjectionOf prefixes
-- WITH RECURSIVE and `states`). Over every run, /*scope*/ stays a comment;
-- one run's projection replaces it with scope_run, fixed text from this
-- file: nothing user-supplied is spliced in.
--
-- Portability notes (the statement also runs on the DuckDB-backed test
-- server store/snowflake/sftest):
--   * A VARIANT field's JSON kind is the first character of TO_JSON(field):
--     '{' object, '[' array, '"' string, 't'/'f' boolean, 'n' null.
--   * DATEDIFF('millisecond', a, b) counts millisecond boundaries, which is
--     the difference of the millisecond-truncated times, as in Go.
--   * The anchor rows of the recursive CTEs cast every column: Snowflake
--     types a recursive CTE's columns from its anchor.
--   * payload.attemptStartedAt is read as Go reads it (time.Parse with
--     engine.TimeFormat): the shape is checked with LIKE and the clock
--     fields' ranges (a cast would roll 24:00 over), the 'Z' becomes
--     '+00:00', and TRY_CAST refuses days a month does not have.

-- name: scope_run
WHERE run_id = ?

-- name: states
ev AS (
    SELECT run_id, run_seq, tenant_id, project_id, environment_id, event_id, event_type,
           COALESCE(step_id, '') AS step_id, logical_attempt_id, engine_attempt_id,
           emitted_at, persisted_at, payload
    FROM dvt_run_events /*scope*/
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

-- name: project
run_last AS (
    SELECT * FROM run_chain QUALIFY ROW_NUMBER() OVER (PARTITION BY run_id ORDER BY n DESC) = 1
),
-- first_seq: the first event that applied to the step (the Go snapshot's
-- order). Policy A: a step no event applied to does not exist.
step_last AS (
    SELECT * FROM (
        SELECT step_chain.*, MIN(CASE WHEN ok THEN run_seq END) OVER (PARTITION BY run_id, step_id) AS first_seq
        FROM step_chain QUALIFY ROW_NUMBER() OVER (PARTITION BY run_id, step_id ORDER BY n DESC) = 1
    ) WHERE first_seq IS NOT NULL
),
violations AS (
    SELECT run_id, 'RUN' AS entity, step_id, run_seq, event_id, event_type, persisted_at, prior, target
    FROM run_chain WHERE NOT ok
    UNION ALL
    SELECT run_id, 'STEP', step_id, run_seq, event_id, event_type, persisted_at, prior, target
    FROM step_chain WHERE NOT ok
),
inconsistent_runs AS (
    SELECT DISTINCT run_id FROM violations
),
draining_runs AS (
    SELECT DISTINCT run_id FROM step_last WHERE status = 'RUNNING'
),
tenancy AS (
    SELECT run_id, tenant_id, project_id, environment_id
    FROM ev WHERE tenant_id <> '' OR project_id <> '' OR environment_id <> ''
    QUALIFY ROW_NUMBER() OVER (PARTITION BY run_id ORDER BY run_seq) = 1
),
runs AS (
    SELECT run_id, MAX(run_seq) AS last_event_seq FROM ev GROUP BY run_id
)
SELECT 'RUN' AS kind, r.run_id, '' AS step_id, CAST(0 AS INTEGER) AS ord,
       COALESCE(rl.status, 'NONE') AS status,
       CASE WHEN rl.status = 'PAUSED' AND d.run_id IS NOT NULL THEN 'DRAINING' ELSE '' END AS substatus,
       r.last_event_seq,
       i.run_id IS NOT NULL AS inconsistent,
       COALESCE(t.tenant_id, '') AS tenant_id, COALESCE(t.project_id, '') AS project_id,
       COALESCE(t.environment_id, '') AS environment_id,
       CAST(0 AS INTEGER) AS logical_attempt_id, CAST(0 AS INTEGER) AS engine_attempt_id,
       rl.started_at, rl.completed_at, COALESCE(rl.duration_ms, 0) AS duration_ms,
       COALESCE(rl.has_error, FALSE) AS has_error, rl.error_code, rl.error_message, rl.error_retryable,
       CAST(NULL AS VARCHAR) AS skip_reason, CAST(NULL AS VARCHAR) AS artifacts,
       CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS VARCHAR) AS event_type, CAST(NULL AS TIMESTAMP_TZ(9)) AS persisted_at,
       CAST(NULL AS VARCHAR) AS entity, CAST(NULL AS VARCHAR) AS prior_state, CAST(NULL AS VARCHAR) AS attempted_state
FROM runs r
LEFT JOIN run_last rl ON rl.run_id = r.run_id
LEFT JOIN tenancy t ON t.run_id = r.run_id
LEFT JOIN inconsistent_runs i ON i.run_id = r.run_id
LEFT JOIN draining_runs d ON d.run_id = r.run_id
UNION ALL
SELECT 'STEP', run_id, step_id, first_seq,
       status, '', last_event_seq, FALSE, '', '', '',
       logical_attempt_id, engine_attempt_id,
       started_at, completed_at, duration_ms,
       has_error, error_code, error_message, error_retryable,
       skip_reason, artifacts,
       NULL, NULL, NULL, NULL, NULL, NULL
FROM step_last
UNION ALL
SELECT 'VIOLATION', run_id, step_id, run_seq,
       '', '', 0, TRUE, '', '', '',
       0, 0, NULL, NULL, 0, FALSE, NULL, NULL, NULL, NULL, NULL,
       event_id, event_type, persisted_at, entity, prior, target
FROM violations
ORDER BY run_id, kind, ord

-- name: list_all_events
-- Every event in (run, runSeq) order, for the Go reducer to read the same
-- log in one pass.
SELECT run_id, run_seq, tenant_id, project_id, environment_id, event_id, event_type, step_id,
       plan_id, plan_version, logical_attempt_id, engine_attempt_id, idempotency_key,
       emitted_at, persisted_at, payload
FROM dvt_run_events
ORDER BY run_id, run_seq
