-- Stored plan bundles (migration 0310).

-- name: put_bundle_chunk
INSERT INTO dvt_plan_bundle_chunks (sha256, seq, data) VALUES (?, ?, ?)
ON CONFLICT (sha256, seq) DO NOTHING;

-- name: put_bundle
INSERT INTO dvt_plan_bundles (sha256, size_bytes, chunks, created_at) VALUES (?, ?, ?, ?)
ON CONFLICT (sha256) DO NOTHING;

-- name: get_bundle
SELECT size_bytes, chunks FROM dvt_plan_bundles WHERE sha256 = ?;

-- name: get_bundle_chunks
SELECT seq, data FROM dvt_plan_bundle_chunks WHERE sha256 = ? ORDER BY seq;
