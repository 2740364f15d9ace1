-- The v2 chain form (issue 25): events appended from now on are hashed as
-- "dvtrun-chain-v2" with every column but the payload, which enters as its
-- SHA-256 digest (payload_sha256: lowercase hex; NULL for an event appended
-- without a payload). event_bytes holds the v2 bytes, which no longer carry
-- the payload, so retention keeps them. The payload VARIANT re-serialises,
-- so the digest is over payload_text, the JSON text exactly as appended;
-- audit verify checks the VARIANT against it as a JSON value, and retention
-- removes both. Events chained before keep their v1 links. Each statement
-- runs on its own: every one is idempotent.
ALTER TABLE dvt_run_events ADD COLUMN IF NOT EXISTS payload_sha256 VARCHAR;
ALTER TABLE dvt_run_events ADD COLUMN IF NOT EXISTS payload_text VARCHAR;

-- The chain view that recomputes either form (chain_form) is migration
-- 0810's, which also requires signed evidence for a payload removed.
