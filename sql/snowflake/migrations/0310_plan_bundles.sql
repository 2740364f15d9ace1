-- Plan bundles (issue 20): what a run or request ran, stored by the
-- bundle's sha256; the same tables as the SQLite dialect. A bundle's
-- encoding (engine.EncodeBundle, JSON text) is kept in chunks that stay
-- well under VARCHAR's limit; the header row is written last, so a bundle
-- is stored once its header is. Rows are written by MERGE on their key:
-- writing a bundle twice adds nothing.

CREATE TABLE IF NOT EXISTS dvt_plan_bundles (
    sha256     VARCHAR NOT NULL,
    size_bytes NUMBER(38, 0) NOT NULL,
    chunks     NUMBER(38, 0) NOT NULL,
    created_at TIMESTAMP_TZ(9) NOT NULL
);

CREATE TABLE IF NOT EXISTS dvt_plan_bundle_chunks (
    sha256 VARCHAR NOT NULL,
    seq    NUMBER(38, 0) NOT NULL,
    data   VARCHAR NOT NULL
);
