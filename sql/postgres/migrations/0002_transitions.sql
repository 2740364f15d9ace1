-- The transition table the Go reducer (engine.Transitions) and the SQL
-- projection share. A test keeps this file equal to engine.Transitions.
-- STEP rows name the run status the step event requires (run_status) and how
-- the event's logical attempt must compare with the step's (attempt_rule:
-- ANY, SAME, HIGHER). RUN rows have run_status ''.
CREATE TABLE dvt_transitions (
    entity       TEXT NOT NULL,
    from_status  TEXT NOT NULL,
    event_type   TEXT NOT NULL,
    to_status    TEXT NOT NULL,
    run_status   TEXT NOT NULL,
    attempt_rule TEXT NOT NULL,
    PRIMARY KEY (entity, from_status, event_type, run_status)
);

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
