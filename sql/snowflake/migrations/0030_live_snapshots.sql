-- The live projection (engine/projection): one row per run, kept current
-- from its watermark (last_event_seq) by the projection service. state is
-- the snapshot with the reducer's memory that an incremental projection
-- continues from (JSON text: it is read back whole, never queried into);
-- the other columns are copies for SQL readers. version makes every write
-- conditional: a projector replaces only the version it read, and a MERGE
-- inserts the first row (Snowflake enforces no primary key).
CREATE TABLE IF NOT EXISTS dvt_live_snapshots (
    run_id         VARCHAR NOT NULL,
    tenant_id      VARCHAR NOT NULL,
    project_id     VARCHAR NOT NULL,
    environment_id VARCHAR NOT NULL,
    status         VARCHAR NOT NULL,
    substatus      VARCHAR,
    in_flight      NUMBER(38, 0) NOT NULL,
    last_event_seq NUMBER(38, 0) NOT NULL,
    stale          BOOLEAN NOT NULL,
    inconsistent   BOOLEAN NOT NULL,
    state          VARCHAR NOT NULL,
    version        NUMBER(38, 0) NOT NULL,
    projected_at   TIMESTAMP_TZ(9) NOT NULL
);
