-- The transition table the Go reducer (engine.Transitions) and the SQL
-- projection share; sql/sqlfiles_test.go keeps these rows equal to
-- engine.Transitions. The DELETE makes a re-run after an interrupted
-- migration (DDL commits on its own in Snowflake) leave the same rows.
CREATE TABLE IF NOT EXISTS dvt_transitions (
    entity       VARCHAR NOT NULL,
    from_status  VARCHAR NOT NULL,
    event_type   VARCHAR NOT NULL,
    to_status    VARCHAR NOT NULL,
    run_status   VARCHAR NOT NULL,
    attempt_rule VARCHAR NOT NULL
);

DELETE FROM dvt_transitions;

INSERT INTO dvt_transitions (entity, from_status, event_type, to_status, run_status, attempt_rule) VALUES
    ('RUN', 'NONE', 'RunQueued', 'QUEUED', '', 'ANY'),
    ('RUN', 'QUEUED', 'RunApproved', 'APPROVED', '', 'ANY'),
    ('RUN', 'QUEUED', 'RunStarted', 'RUNNING', '', 'ANY'),
    ('RUN', 'APPROVED', 'RunStarted', 'RUNNING', '', 'ANY'),
    ('RUN', 'RUNNING', 'RunPaused', 'PAUSED', '', 'ANY'),
    ('RUN', 'PAUSED', 'RunResumed', 'RUNNING', '', 'ANY'),
    ('RUN', 'RUNNING', 'RunCompleted', 'COMPLETED', '', 'ANY'),
    ('RUN', 'RUNNING', 'RunFailed', 'FAILED', '', 'ANY'),
    ('RUN', 'QUEUED', 'RunFailed', 'FAILED', '', 'ANY'),
    ('RUN', 'QUEUED', 'RunCancelled', 'CANCELLED', '', 'ANY'),
    ('RUN', 'RUNNING', 'RunCancelled', 'CANCELLED', '', 'ANY'),
    ('RUN', 'PAUSED', 'RunCancelled', 'CANCELLED', '', 'ANY'),
    ('STEP', 'PENDING', 'StepStarted', 'RUNNING', 'RUNNING', 'ANY'),
    ('STEP', 'FAILED', 'StepStarted', 'RUNNING', 'RUNNING', 'HIGHER'),
    ('STEP', 'RUNNING', 'StepCompleted', 'SUCCESS', 'RUNNING', 'SAME'),
    ('STEP', 'RUNNING', 'StepCompleted', 'SUCCESS', 'PAUSED', 'SAME'),
    ('STEP', 'RUNNING', 'StepFailed', 'FAILED', 'RUNNING', 'SAME'),
    ('STEP', 'RUNNING', 'StepFailed', 'FAILED', 'PAUSED', 'SAME'),
    ('STEP', 'PENDING', 'StepSkipped', 'SKIPPED', 'RUNNING', 'ANY'),
    ('STEP', 'PENDING', 'StepSkipped', 'SKIPPED', 'PAUSED', 'ANY');
