-- Stored plan bundles (migration 0310). Single statements with bound
-- values; MERGE keeps each row's key unique (Snowflake enforces none).

-- name: put_bundle_chunk
MERGE INTO dvt_plan_bundle_chunks t
USING (SELECT CAST(? AS VARCHAR) AS sha256, CAST(? AS NUMBER(38, 0)) AS seq, CAST(? AS VARCHAR) AS data) s
ON t.sha256 = s.sha256 AND t.seq = s.seq
WHEN NOT MATCHED THEN INSERT (sha256, seq, data) VALUES (s.sha256, s.seq, s.data);

-- name: put_bundle
MERGE INTO dvt_plan_bundles t
USING (SELECT CAST(? AS VARCHAR) AS sha256, CAST(? AS NUMBER(38, 0)) AS size_bytes,
              CAST(? AS NUMBER(38, 0)) AS chunks, CAST(? AS TIMESTAMP_TZ(9)) AS created_at) s
ON t.sha256 = s.sha256
WHEN NOT MATCHED THEN INSERT (sha256, size_bytes, chunks, created_at)
    VALUES (s.sha256, s.size_bytes, s.chunks, s.created_at);

-- name: get_bundle
SELECT size_bytes, chunks FROM dvt_plan_bundles WHERE sha256 = ?;

-- name: get_bundle_chunks
SELECT seq, data FROM dvt_plan_bundle_chunks WHERE sha256 = ? ORDER BY seq;
