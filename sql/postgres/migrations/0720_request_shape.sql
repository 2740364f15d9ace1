-- The run's shape a request carries (issue 20): target, selection, vars,
-- --full-refresh and the data interval, as JSON (queue.Shape); NULL for
-- the whole plan with no context. The worker records it in RunQueued.

ALTER TABLE dvt_run_requests ADD COLUMN run_shape TEXT;
