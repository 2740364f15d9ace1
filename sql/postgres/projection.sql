-- SQL projection of run and step snapshots from dvt_run_events alone. It
-- computes what the Go reducer (engine.Project) computes, field for field:
-- the property tests in store/postgres compare the two on generated streams.
-- It is sql/sqlite/projection.sql in Postgres's dialect: payloads are json
-- (json_typeof, ->, ->>), the recursive CTEs' columns are typed in their
-- first rows, booleans are booleans, and millisecond clocks come from
-- dvt_ms / dvt_instant_ms (migration 0100).
--
-- The projection text exists once: `states` is the recursive CTEs (each
-- event with the state before and after it), which the audit view
-- dvt_event_states includes verbatim (its migration says /*include
-- projection.sql states*/, expanded by sqlfiles.Migrations), and `project`
-- is the snapshot query that follows them (sqlfiles.ProjectionOf prefixes
-- WITH RECURSIVE and `states`). Over every run, /*scope*/ stays a comment; one
-- run's projection replaces it with scope_run, fixed text from this file.
--
-- Rules mirrored from engine/reducer.go:
--   * The transition table is dvt_transitions (shipped by the migrations, kept
--     equal to engine.Transitions by a test). Event types it does not name,
--     and step-level events without a step id, only advance lastEventSeq.
--   * A re-delivery — an earlier (entity, step, type, logical attempt), valid
--     or not — changes nothing (the reducer's seenSet).
--   * Policy A: an event the table does not allow from the entity's state
--     changes nothing, marks the run inconsistent and is listed as a
--     violation; a step appears only with the first event that applies to
--     it. The state before each event comes from a recursive CTE over
--     each run's and each step's events in run_seq order; a step event sees
--     the run status left by the run events before it.
--   * Times are the emittedAt of the events that set them, but a
--     StepCompleted/StepFailed whose payload.attemptStartedAt is an instant
--     in engine.TimeFormat (a step run again after a resume) moves the
--     step's start there; durations are the difference of the
--     millisecond-truncated times.

-- name: scope_run
WHERE run_id = $1

-- name: states
ev AS (
    SELECT run_id, run_seq, tenant_id, project_id, environment_id, event_id, event_type,
           COALESCE(step_id, '') AS step_id, logical_attempt_id, engine_attempt_id,
           emitted_at, persisted_at, payload
    FROM dvt_run_events /*scope*/
),
-- The state each state-changing type moves its entity to (engine.TargetOf).
kinds AS (
    SELECT entity, event_type, MAX(to_status) AS target
    FROM dvt_transitions GROUP BY entity, event_type
),
-- States: NONE (a run before any event), PENDING (a step before any), and
-- every state the table names.
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
-- The table made total: every (state, event) with the state it leads to,
-- NULL when not allowed, so the recursion needs inner joins only. A state
-- nothing leaves is terminal.
run_moves AS MATERIALIZED (
    SELECT rs.s AS from_status, k.event_type, t.to_status,
           NOT EXISTS (SELECT 1 FROM dvt_transitions x WHERE x.entity = 'RUN' AND x.from_status = t.to_status) AS terminal
    FROM run_states rs
    CROSS JOIN kinds k
    LEFT JOIN dvt_transitions t
      ON t.entity = 'RUN' AND t.from_status = rs.s AND t.event_type = k.event_type
    WHERE k.entity = 'RUN'
),
step_moves AS MATERIALIZED (
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
-- State-changing events, numbered by occurrence of their re-delivery key.
-- The payload fields and the millisecond clock are read here, once per
-- event (reading them beside the window functions below, or in the
-- recursion, costs several times more). An "error" is engine.payloadError's:
-- an object whose fields decode, else none.
keyed AS (
    SELECT ev.*, k.entity, k.target,
           CASE WHEN k.entity = 'STEP' THEN ev.step_id ELSE '' END AS entity_id,
           ROW_NUMBER() OVER (
               PARTITION BY ev.run_id, k.entity, CASE WHEN k.entity = 'STEP' THEN ev.step_id ELSE '' END,
                            ev.event_type, ev.logical_attempt_id
               ORDER BY ev.run_seq) AS occurrence,
           dvt_ms(ev.emitted_at) AS emitted_ms,
           CASE WHEN ev.event_type IN ('RunFailed', 'StepFailed')
                 AND json_typeof(ev.payload -> 'error') = 'object'
                 AND COALESCE(json_typeof(ev.payload -> 'error' -> 'code'), 'null') IN ('null', 'string')
                 AND COALESCE(json_typeof(ev.payload -> 'error' -> 'message'), 'null') IN ('null', 'string')
                 AND COALESCE(json_typeof(ev.payload -> 'error' -> 'retryable'), 'null') IN ('null', 'boolean')
                THEN 1 ELSE 0 END AS p_has_error,
           CASE WHEN ev.event_type IN ('RunFailed', 'StepFailed')
                THEN ev.payload -> 'error' ->> 'code' END AS p_error_code,
           CASE WHEN ev.event_type IN ('RunFailed', 'StepFailed')
                THEN ev.payload -> 'error' ->> 'message' END AS p_error_message,
           CASE WHEN ev.event_type IN ('RunFailed', 'StepFailed') AND ev.payload IS NOT NULL
                THEN COALESCE((ev.payload -> 'error' -> 'retryable')::text = 'true', false) END AS p_error_retryable,
           CASE WHEN ev.event_type = 'StepSkipped' AND json_typeof(ev.payload -> 'reason') = 'string'
                THEN ev.payload ->> 'reason' ELSE '' END AS p_reason,
           -- The artifact list goes out as JSON text; Go decodes it as
           -- engine.payloadArtifacts does (a list that does not decode is none).
           CASE WHEN ev.event_type = 'StepCompleted' AND json_typeof(ev.payload -> 'artifacts') = 'array'
                THEN (ev.payload -> 'artifacts')::text END AS p_artifacts,
           -- When the engine attempt behind an outcome started, if not at its
           -- StepStarted (engine.payloadAttemptStart): a string in
           -- engine.TimeFormat that is a valid instant, else none.
           CASE WHEN ev.event_type IN ('StepCompleted', 'StepFailed')
                 AND json_typeof(ev.payload -> 'attemptStartedAt') = 'string'
                 AND dvt_instant_ms(ev.payload ->> 'attemptStartedAt') IS NOT NULL
                THEN ev.payload ->> 'attemptStartedAt' END AS p_attempt_started_at
    FROM ev JOIN kinds k ON k.event_type = ev.event_type
    WHERE k.entity = 'RUN' OR ev.step_id <> ''
),
-- First occurrences: n numbers them per entity; k counts the run events up
-- to each event, so a step event sees run_chain row n = k.
applied AS MATERIALIZED (
    SELECT keyed.*,
           dvt_instant_ms(p_attempt_started_at) AS p_attempt_started_ms,
           ROW_NUMBER() OVER (PARTITION BY run_id, entity, entity_id ORDER BY run_seq) AS n,
           SUM(CASE WHEN entity = 'RUN' THEN 1 ELSE 0 END)
               OVER (PARTITION BY run_id ORDER BY run_seq ROWS UNBOUNDED PRECEDING) AS k
    FROM keyed WHERE occurrence = 1
),
-- Row n = 0 is the run before its first event; row n is the run after its
-- n-th applied event. ok: the event was allowed (NULL on row 0). Each
-- column follows engine.reducer.apply.
run_chain (run_id, n, run_seq, event_id, event_type, step_id, persisted_at, target, ok,
           prior, status, started_at, started_ms, completed_at, duration_ms,
           has_error, error_code, error_message, error_retryable) AS (
    SELECT DISTINCT run_id, 0::bigint, 0::bigint, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::boolean,
           NULL::text, 'NONE'::text, NULL::text, NULL::bigint, NULL::text, 0::bigint, 0, NULL::text, NULL::text, NULL::boolean
    FROM applied WHERE entity = 'RUN'
    UNION ALL
    SELECT c.run_id, a.n, a.run_seq, a.event_id, a.event_type, a.step_id, a.persisted_at, a.target,
           m.to_status IS NOT NULL,
           c.status,
           COALESCE(m.to_status, c.status),
           CASE WHEN m.to_status IS NOT NULL AND a.event_type = 'RunStarted' THEN a.emitted_at ELSE c.started_at END,
           CASE WHEN m.to_status IS NOT NULL AND a.event_type = 'RunStarted' THEN a.emitted_ms ELSE c.started_ms END,
           CASE WHEN m.to_status IS NOT NULL AND a.event_type <> 'RunStarted' AND m.terminal THEN a.emitted_at ELSE c.completed_at END,
           CASE WHEN m.to_status IS NOT NULL AND a.event_type <> 'RunStarted' AND m.terminal
                THEN COALESCE(a.emitted_ms - c.started_ms, 0) ELSE c.duration_ms END,
           CASE WHEN m.to_status IS NOT NULL AND a.event_type = 'RunFailed' AND m.terminal THEN a.p_has_error ELSE c.has_error END,
           CASE WHEN m.to_status IS NOT NULL AND a.event_type = 'RunFailed' AND m.terminal THEN a.p_error_code ELSE c.error_code END,
           CASE WHEN m.to_status IS NOT NULL AND a.event_type = 'RunFailed' AND m.terminal THEN a.p_error_message ELSE c.error_message END,
           CASE WHEN m.to_status IS NOT NULL AND a.event_type = 'RunFailed' AND m.terminal THEN a.p_error_retryable ELSE c.error_retryable END
    FROM run_chain c
    JOIN applied a ON a.run_id = c.run_id AND a.entity = 'RUN' AND a.entity_id = '' AND a.n = c.n + 1
    JOIN run_moves m ON m.from_status = c.status AND m.event_type = a.event_type
),
-- Step events with the run status they are checked against.
step_events AS MATERIALIZED (
    SELECT a.*, COALESCE(rc.status, 'NONE') AS run_status
    FROM applied a
    LEFT JOIN run_chain rc ON rc.run_id = a.run_id AND rc.n = a.k
    WHERE a.entity = 'STEP'
),
-- Row n = 0 is the step when the log first names it (PENDING, attempt 0).
-- Each column follows engine.reducer.applyStep.
step_chain (run_id, step_id, n, run_seq, event_id, event_type, persisted_at, target, ok,
            prior, status, logical_attempt_id, engine_attempt_id, last_event_seq,
            started_at, started_ms, completed_at, duration_ms,
            has_error, error_code, error_message, error_retryable, skip_reason, artifacts) AS (
    SELECT run_id, step_id, 0::bigint, run_seq, NULL::text, NULL::text, NULL::text, NULL::text, NULL::boolean,
           NULL::text, 'PENDING'::text, 0::bigint, 0::bigint, 0::bigint, NULL::text, NULL::bigint, NULL::text, 0::bigint,
           0, NULL::text, NULL::text, NULL::boolean, NULL::text, NULL::text
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
           CASE WHEN m.to_status IS NOT NULL AND e.event_type = 'StepStarted' THEN e.emitted_ms
                WHEN m.to_status IS NOT NULL AND e.p_attempt_started_at IS NOT NULL THEN e.p_attempt_started_ms
                ELSE c.started_ms END,
           CASE WHEN m.to_status IS NULL THEN c.completed_at
                WHEN e.event_type = 'StepStarted' THEN NULL
                WHEN e.event_type IN ('StepCompleted', 'StepFailed') THEN e.emitted_at
                ELSE c.completed_at END,
           CASE WHEN m.to_status IS NULL THEN c.duration_ms
                WHEN e.event_type = 'StepStarted' THEN 0
                WHEN e.event_type IN ('StepCompleted', 'StepFailed') THEN COALESCE(e.emitted_ms - COALESCE(e.p_attempt_started_ms, c.started_ms), 0)
                ELSE c.duration_ms END,
           CASE WHEN m.to_status IS NULL THEN c.has_error
                WHEN e.event_type = 'StepStarted' THEN 0
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
    SELECT * FROM (SELECT run_chain.*, ROW_NUMBER() OVER (PARTITION BY run_id ORDER BY n DESC) AS r FROM run_chain) x WHERE r = 1
),
-- first_seq: the first event that applied to the step (the Go snapshot's
-- order). Policy A: a step no event applied to (every event about it was
-- invalid) does not exist.
step_last AS MATERIALIZED (
    SELECT * FROM (
        SELECT step_chain.*,
               MIN(CASE WHEN ok THEN run_seq END) OVER (PARTITION BY run_id, step_id) AS first_seq,
               ROW_NUMBER() OVER (PARTITION BY run_id, step_id ORDER BY n DESC) AS r
        FROM step_chain) x WHERE r = 1 AND first_seq IS NOT NULL
),
violations AS MATERIALIZED (
    SELECT run_id, 'RUN' AS entity, step_id, run_seq, event_id, event_type, persisted_at, prior, target
    FROM run_chain WHERE NOT ok
    UNION ALL
    SELECT run_id, 'STEP', step_id, run_seq, event_id, event_type, persisted_at, prior, target
    FROM step_chain WHERE NOT ok
),
-- The run's tenancy is that of its first event naming any of it.
tenancy AS (
    SELECT * FROM (
        SELECT run_id, tenant_id, project_id, environment_id,
               ROW_NUMBER() OVER (PARTITION BY run_id ORDER BY run_seq) AS r
        FROM ev WHERE tenant_id <> '' OR project_id <> '' OR environment_id <> '') x WHERE r = 1
),
runs AS (
    SELECT run_id, MAX(run_seq) AS last_event_seq FROM ev GROUP BY run_id
)
SELECT 'RUN' AS kind, r.run_id, '' AS step_id, 0 AS ord,
       COALESCE(rl.status, 'NONE') AS status,
       CASE WHEN rl.status = 'PAUSED'
             AND EXISTS (SELECT 1 FROM step_last sl WHERE sl.run_id = r.run_id AND sl.status = 'RUNNING')
            THEN 'DRAINING' ELSE '' END AS substatus,
       r.last_event_seq,
       EXISTS (SELECT 1 FROM violations v WHERE v.run_id = r.run_id) AS inconsistent,
       COALESCE(t.tenant_id, '') AS tenant_id, COALESCE(t.project_id, '') AS project_id,
       COALESCE(t.environment_id, '') AS environment_id,
       0 AS logical_attempt_id, 0 AS engine_attempt_id,
       rl.started_at, rl.completed_at, COALESCE(rl.duration_ms, 0) AS duration_ms,
       COALESCE(rl.has_error, 0) AS has_error, rl.error_code, rl.error_message, rl.error_retryable,
       NULL AS skip_reason, NULL AS artifacts,
       NULL AS event_id, NULL AS event_type, NULL AS persisted_at, NULL AS entity, NULL AS prior_state, NULL AS attempted_state
FROM runs r
LEFT JOIN run_last rl ON rl.run_id = r.run_id
LEFT JOIN tenancy t ON t.run_id = r.run_id
UNION ALL
SELECT 'STEP', run_id, step_id, first_seq,
       status, '', last_event_seq, false, '', '', '',
       logical_attempt_id, engine_attempt_id,
       started_at, completed_at, duration_ms,
       has_error, error_code, error_message, error_retryable,
       skip_reason, artifacts,
       NULL, NULL, NULL, NULL, NULL, NULL
FROM step_last
UNION ALL
SELECT 'VIOLATION', run_id, step_id, run_seq,
       '', '', 0, true, '', '', '',
       0, 0, NULL, NULL, 0, 0, NULL, NULL, NULL, NULL, NULL,
       event_id, event_type, persisted_at, entity, prior, target
FROM violations
ORDER BY 2, 1, 4

-- name: list_all_events
-- Every event in (run, runSeq) order, for the Go reducer to read the same
-- log in one pass.
SELECT run_id, run_seq, tenant_id, project_id, environment_id, event_id, event_type, step_id,
       plan_id, plan_version, logical_attempt_id, engine_attempt_id, idempotency_key,
       emitted_at, persisted_at, payload::text
FROM dvt_run_events
ORDER BY run_id, run_seq
