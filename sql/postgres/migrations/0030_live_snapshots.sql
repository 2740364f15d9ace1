-- The live projection (engine/projection): one row per run, kept current
-- from its watermark (last_event_seq) by the projection service. state is
-- the snapshot with the reducer's memory that an incremental projection
-- continues from, so a restarted projector does not re-read the log; the
-- other columns are copies for SQL readers. version makes every write
-- conditional: a projector replaces only the version it read.
CREATE TABLE dvt_live_snapshots (
    run_id         TEXT NOT NULL PRIMARY KEY,
    tenant_id      TEXT NOT NULL,
    project_id     TEXT NOT NULL,
    environment_id TEXT NOT NULL,
    status         TEXT NOT NULL,
    substatus      TEXT,
    in_flight      INTEGER NOT NULL, -- steps RUNNING (draining during a PAUSE)
    last_event_seq BIGINT  NOT NULL, -- the watermark
    stale          INTEGER NOT NULL, -- 1: resynced after a non-contiguous fetch
    inconsistent   INTEGER NOT NULL, -- 1: Policy A ignored an event
    state          TEXT NOT NULL,
    version        BIGINT  NOT NULL,
    projected_at   TEXT NOT NULL
);
