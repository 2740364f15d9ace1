-- Wake-ups (issue 18): NOTIFY, at commit, the ids that services poll for,
-- so that a LISTENing process (store/postgres/wake.go) reacts in
-- milliseconds; polling stays the fallback. Payloads are ids only.
-- Appends notify dvt_events with the run id from their own insert_events
-- statement (store.sql); the queue's writes, which are the shared
-- store.QueueSQL statements, notify dvt_queue from these statement-level
-- triggers, once per request id; Postgres folds identical notifications of
-- one transaction into one. Transition tables allow one event per trigger,
-- hence two.

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
