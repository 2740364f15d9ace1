-- Plan bundles (issue 20): what a run or request ran, stored by the
-- bundle's sha256 so that no command needs the path the enqueuing process
-- saw. A bundle's encoding (engine.EncodeBundle, JSON text) is kept in
-- chunks; the header row is written last, so a bundle is stored once its
-- header is.

CREATE TABLE dvt_plan_bundles (
    sha256     TEXT NOT NULL PRIMARY KEY,
    size_bytes INTEGER NOT NULL, -- of the encoding
    chunks     INTEGER NOT NULL,
    created_at TEXT NOT NULL
);

CREATE TABLE dvt_plan_bundle_chunks (
    sha256 TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    data   TEXT NOT NULL,
    PRIMARY KEY (sha256, seq)
);
