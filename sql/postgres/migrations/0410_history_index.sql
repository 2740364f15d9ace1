-- The run history (store.RunFilter, list_runs in store.sql) reads, for each
-- run of a page, its run-level events and its StepFailed events: this
-- partial index holds only those, so a run of 50,000 step events costs a
-- few index rows, not a walk of its log. Appends pay for it only on the
-- events it holds.
CREATE INDEX dvt_run_events_outcomes ON dvt_run_events (run_id, event_type, emitted_at)
WHERE step_id IS NULL OR event_type = 'StepFailed';

-- Its order (created_at, then run id, newest first) and keyset cursor:
-- a page walks this index from the cursor and stops when it is full.
CREATE INDEX dvt_runs_history ON dvt_runs (created_at, run_id);
