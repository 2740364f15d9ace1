-- The v2 chain form (issue 25): events appended from now on are hashed as
-- "dvtrun-chain-v2" with every column but the payload, which enters as its
-- SHA-256 digest kept here (lowercase hex of the JSON text as appended;
-- NULL for an event appended without a payload). Retention can then remove
-- the payload and the hash still covers event type, step, attempts and
-- times. Events chained before keep their v1 links. SQLite has no SHA-256
-- in SQL, so there is no chain view: `dvtrun audit verify` is the check.
ALTER TABLE dvt_run_events ADD COLUMN payload_sha256 TEXT;
