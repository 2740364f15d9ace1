package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/dvtrun/dvtrun/engine"
)

// bundleChunk is how many bytes of a bundle's encoding one row holds: well
// under Snowflake's VARCHAR limit (16 MiB) for the largest bundle
// (engine.MaxBundleBytes of files, a third more once base64-encoded).
const bundleChunk = 1 << 20

// BundleSQL implements plan.BundleStore once for the SQL backends over
// their statements (sql/<dialect>/bundles.sql). Each chunk row, then the
// header row, is written by its own idempotent statement: a writer that
// dies halfway leaves rows a later put completes, never a bundle that
// reads back short, since the header (with the chunk count) comes last.
type BundleSQL struct {
	Queries map[string]string
	// Exec runs one writing statement with the backend's lock waits,
	// retries and error classes.
	Exec func(ctx context.Context, query string, args ...any) error
	Read Tx
	// Classify maps a read's error onto contract codes.
	Classify func(op string, err error) error
	// Now is the created_at value to bind (the backend's clock and form).
	Now func() any
}

// PutPlanBundle implements plan.BundleStore.
func (b BundleSQL) PutPlanBundle(ctx context.Context, sha256 string, data []byte) error {
	if sha256 == "" || len(data) == 0 {
		return engine.Errorf(engine.CodeInvalidArgument, "a stored plan bundle needs its sha256 and its content")
	}
	if _, ok, err := b.header(ctx, sha256); err != nil || ok {
		return err // stored already: content-addressed, nothing to add
	}
	n := 0
	for off := 0; off < len(data); off += bundleChunk {
		if err := b.Exec(ctx, b.Queries["put_bundle_chunk"], sha256, n, string(data[off:min(off+bundleChunk, len(data))])); err != nil {
			return err
		}
		n++
	}
	return b.Exec(ctx, b.Queries["put_bundle"], sha256, len(data), n, b.Now())
}

// GetPlanBundle implements plan.BundleStore.
func (b BundleSQL) GetPlanBundle(ctx context.Context, sha256 string) ([]byte, bool, error) {
	h, ok, err := b.header(ctx, sha256)
	if err != nil || !ok {
		return nil, false, err
	}
	rows, err := b.Read.QueryContext(ctx, b.Queries["get_bundle_chunks"], sha256)
	if err != nil {
		return nil, false, b.Classify("read plan bundle", err)
	}
	defer rows.Close()
	var sb strings.Builder
	n := int64(0)
	for rows.Next() {
		var seq int64
		var data string
		if err := rows.Scan(&seq, &data); err != nil {
			return nil, false, b.Classify("read plan bundle", err)
		}
		if seq < n {
			// Two writers' MERGEs of one chunk (Snowflake enforces no key):
			// the same bytes, content-addressed; read once.
			continue
		}
		if seq != n {
			break // a gap: reported below
		}
		sb.WriteString(data)
		n++
	}
	if err := rows.Err(); err != nil {
		return nil, false, b.Classify("read plan bundle", err)
	}
	if n != h.chunks || int64(sb.Len()) != h.size {
		return nil, false, engine.Errorf(engine.CodeStoreCorrupt, "stored plan bundle %s has %d of its %d chunk(s), %d of its %d bytes", sha256, n, h.chunks, sb.Len(), h.size)
	}
	return []byte(sb.String()), true, nil
}

type bundleHeader struct{ size, chunks int64 }

func (b BundleSQL) header(ctx context.Context, sha256 string) (bundleHeader, bool, error) {
	var h bundleHeader
	err := b.Read.QueryRowContext(ctx, b.Queries["get_bundle"], sha256).Scan(&h.size, &h.chunks)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return h, false, nil
	case err != nil:
		return h, false, b.Classify("read plan bundle", err)
	}
	return h, true, nil
}
