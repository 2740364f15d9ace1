-- Stored plan bundles (migration 0310).

-- name: put_bundle_chunk
INSERT INTO dvt_plan_bundle_chunks (sha256, seq, data) VALUES ($1, $2, $3)
ON CONFLICT (sha256, seq) DO NOTHING;

-- name: put_bundle
INSERT INTO dvt_plan_bundles (sha256, size_bytes, chunks, created_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (sha256) DO NOTHING;

-- name: get_bundle
SELECT size_bytes, chunks FROM dvt_plan_bundles WHERE sha256 = $1;

-- name: get_bundle_chunks
SELECT seq, data FROM dvt_plan_bundle_chunks WHERE sha256 = $1 ORDER BY seq;
