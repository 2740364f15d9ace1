package snowflake

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store"
)

// snapshotQuery is a statement of sql/snowflake/snapshots.sql.
func snapshotQuery(name string) (string, error) {
	return sqlfiles.Query(sqlfiles.Snowflake, "snapshots.sql", name)
}

// PendingSnapshots implements store.SnapshotStore. It reads one row per
// run of two small tables: one request per poll.
func (s *Store) PendingSnapshots(ctx context.Context, limit int) ([]string, error) {
	q, err := snapshotQuery("pending_snapshots")
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, q, max(limit, 1))
	if err != nil {
		return nil, s.classify("list pending snapshots", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, s.classify("list pending snapshots", err)
		}
		ids = append(ids, id)
	}
	return ids, s.classify("list pending snapshots", rows.Err())
}

// LoadSnapshot implements store.SnapshotStore.
func (s *Store) LoadSnapshot(ctx context.Context, runID string) ([]byte, int64, error) {
	q, err := snapshotQuery("load_snapshot")
	if err != nil {
		return nil, 0, err
	}
	var state string
	var version int64
	err = s.db.QueryRowContext(ctx, q, runID).Scan(&state, &version)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, s.classify("load snapshot", err)
	}
	return []byte(state), version, nil
}

// SaveSnapshot implements store.SnapshotStore: a MERGE that inserts only a
// missing row when version is 0, otherwise an UPDATE conditional on the
// version. The affected-row count decides, as for every claim.
func (s *Store) SaveSnapshot(ctx context.Context, snap engine.Snapshot, version int64) (bool, error) {
	state, err := snap.MarshalState()
	if err != nil {
		return false, err
	}
	name := "update_snapshot"
	if version == 0 {
		name = "insert_snapshot"
	}
	q, err := snapshotQuery(name)
	if err != nil {
		return false, err
	}
	var saved bool
	err = s.withRetry(ctx, func() error {
		cols := []any{snap.TenantID, snap.ProjectID, snap.EnvironmentID, string(snap.Status), nullable(snap.Substatus),
			snap.InFlight(), snap.LastEventSeq, snap.Stale, snap.Inconsistent, string(state), tsText(s.now())}
		args := append([]any{snap.RunID}, cols...)
		if version > 0 {
			args = append(cols, snap.RunID, version)
		}
		res, err := s.db.ExecContext(ctx, q, args...)
		if err != nil {
			return s.classify("save snapshot", err)
		}
		n, _ := res.RowsAffected()
		saved = n > 0
		return nil
	})
	return saved, err
}

// GetLease implements store.LeaseReader; Live is judged by the store's
// clock, as AcquireLease judges expiry.
func (s *Store) GetLease(ctx context.Context, runID string) (store.Lease, bool, error) {
	var owner string
	var exp time.Time
	err := s.db.QueryRowContext(ctx, s.q["get_lease"], runID).Scan(&owner, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Lease{}, false, nil
	}
	if err != nil {
		return store.Lease{}, false, s.classify("read lease", err)
	}
	return store.Lease{Owner: owner, ExpiresAt: exp.UTC(), Live: exp.After(s.now())}, true, nil
}
