-- Lock waits of the state store's and the warehouse's sessions
-- (store/postgres/lockwait.go): a progress line is printed only while the
-- server shows the session waiting for a lock, never for a statement that
-- is merely slow.

-- name: lock_wait
-- Backend $1 when it waits for a heavyweight lock (wait_event_type Lock):
-- how long it has waited (the server's clock), what it waits for (the
-- lock's type, its relation when it has one) and the session that blocks
-- it, the oldest transaction first (pg_blocking_pids), by its
-- application_name, which names the run and step of a dvtrun step. No row:
-- not waiting for a lock. pg_locks.waitstart is Postgres 14's.
SELECT EXTRACT(EPOCH FROM clock_timestamp() - COALESCE(l.waitstart, a.query_start))::float8,
       l.locktype,
       COALESCE(l.relation::regclass::text, ''),
       COALESCE(h.pid, 0),
       COALESCE(NULLIF(h.application_name, ''), h.client_addr::text, 'local'),
       h.xact_start
FROM pg_stat_activity a
JOIN pg_locks l ON l.pid = a.pid AND NOT l.granted
LEFT JOIN LATERAL (
    SELECT b.pid, b.application_name, b.client_addr, b.xact_start
    FROM pg_stat_activity b
    WHERE b.pid = ANY (pg_blocking_pids(a.pid))
    ORDER BY b.xact_start
    LIMIT 1
) h ON true
WHERE a.pid = $1 AND a.wait_event_type = 'Lock'
LIMIT 1;
