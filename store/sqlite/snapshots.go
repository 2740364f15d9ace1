package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store"
)

// snapshotQuery is a statement of sql/sqlite/snapshots.sql.
func snapshotQuery(name string) (string, error) {
	return sqlfiles.Query(sqlfiles.SQLite, "snapshots.sql", name)
}

// PendingSnapshots implements store.SnapshotStore.
func (s *Store) PendingSnapshots(ctx context.Context, limit int) ([]string, error) {
	q, err := snapshotQuery("pending_snapshots")
	if err != nil {
		return nil, err
	}
	var ids []string
	err = s.db.SelectContext(ctx, &ids, q, max(limit, 1))
	return ids, classify(s.path, err)
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
		return nil, 0, classify(s.path, err)
	}
	return []byte(state), version, nil
}

// SaveSnapshot implements store.SnapshotStore: an insert when version is 0,
// otherwise an update conditional on the version.
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
	cols := []any{snap.TenantID, snap.ProjectID, snap.EnvironmentID, string(snap.Status), nullable(snap.Substatus),
		snap.InFlight(), snap.LastEventSeq, snap.Stale, snap.Inconsistent, string(state)}
	var args []any
	if version == 0 {
		args = append(append([]any{snap.RunID}, cols...), s.now())
	} else {
		args = append(cols, s.now(), snap.RunID, version)
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	res, err := s.execWrite(ctx, func() (sql.Result, error) { return s.db.ExecContext(ctx, q, args...) })
	if err != nil {
		return false, classify(s.path, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// GetLease implements store.LeaseReader; Live is judged by the store's
// clock, as AcquireLease judges expiry.
func (s *Store) GetLease(ctx context.Context, runID string) (store.Lease, bool, error) {
	var owner, expires string
	err := s.db.QueryRowContext(ctx, s.q["get_lease"], runID).Scan(&owner, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Lease{}, false, nil
	}
	if err != nil {
		return store.Lease{}, false, classify(s.path, err)
	}
	exp, err := time.Parse(time.RFC3339Nano, expires)
	if err != nil {
		return store.Lease{}, false, engine.Errorf(engine.CodeStoreCorrupt, "lease of run %s expires at %q, not a time", runID, expires)
	}
	return store.Lease{Owner: owner, ExpiresAt: exp, Live: exp.After(s.opts.Now())}, true, nil
}
