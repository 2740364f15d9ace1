-- Wake-ups (issue 18): NOTIFY, at commit, the ids that services poll for,
-- so that a LISTENing process (store/postgres/wake.go) reacts in
-- milliseconds; polling stays the fallback. Statement-level triggers over
-- the transition tables notify once per distinct id per statement, and
-- Postgres folds identical notifications of one transaction into one: an
-- append of 100 events sends one notification. Payloads are ids only.
-- Transition tables allow one event per trigger, hence two on the queue.

-- dvt_events: a run's log grew (the outbox with it).
CREATE FUNCTION dvt_notify_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('dvt_events', run_id) FROM (SELECT DISTINCT run_id FROM dvt_new) x;
    RETURN NULL;
END
$$;

CREATE TRIGGER dvt_run_events_notify
    AFTER INSERT ON dvt_run_events
    REFERENCING NEW TABLE AS dvt_new
    FOR EACH STATEMENT EXECUTE FUNCTION dvt_notify_events();

-- dvt_queue: a request became claimable (enqueued, or handed back: PENDING,
-- or a started run's request with no owner), or one finished (DONE), which
-- may free a slot of the claim limits. Claims notify nobody.
CREATE FUNCTION dvt_notify_queue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('dvt_queue', request_id) FROM dvt_new
    WHERE state IN ('PENDING', 'DONE') OR owner = '';
    RETURN NULL;
END
$$;

CREATE TRIGGER dvt_run_requests_notify_insert
    AFTER INSERT ON dvt_run_requests
    REFERENCING NEW TABLE AS dvt_new
    FOR EACH STATEMENT EXECUTE FUNCTION dvt_notify_queue();

CREATE TRIGGER dvt_run_requests_notify_update
    AFTER UPDATE ON dvt_run_requests
    REFERENCING NEW TABLE AS dvt_new
    FOR EACH STATEMENT EXECUTE FUNCTION dvt_notify_queue();
