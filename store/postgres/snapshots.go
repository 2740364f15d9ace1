package postgres

import (
	"context"
	"database/sql"
	"errors"

	"github.com/dvtrun/dvtrun/engine"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
)

// snapshotQuery is a statement of sql/postgres/snapshots.sql.
func snapshotQuery(name string) (string, error) {
	return sqlfiles.Query(sqlfiles.Postgres, "snapshots.sql", name)
}

// PendingSnapshots implements store.SnapshotStore.
func (s *Store) PendingSnapshots(ctx context.Context, limit int) ([]string, error) {
	q, err := snapshotQuery("pending_snapshots")
	if err != nil {
		return nil, err
	}
	var ids []string
	err = s.read(ctx, func() error { return s.db.SelectContext(ctx, &ids, q, max(limit, 1)) })
	return ids, s.classify(err)
}

// LoadSnapshot implements store.SnapshotStore.
func (s *Store) LoadSnapshot(ctx context.Context, runID string) ([]byte, int64, error) {
	q, err := snapshotQuery("load_snapshot")
	if err != nil {
		return nil, 0, err
	}
	var state string
	var version int64
	err = s.read(ctx, func() error { return s.db.QueryRowContext(ctx, q, runID).Scan(&state, &version) })
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, s.classify(err)
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
		snap.InFlight(), snap.LastEventSeq, boolInt(snap.Stale), boolInt(snap.Inconsistent), string(state)}
	var args []any
	if version == 0 {
		args = append(append([]any{snap.RunID}, cols...), s.now())
	} else {
		args = append(cols, s.now(), snap.RunID, version)
	}
	res, err := s.exec(ctx, q, args...)
	if err != nil {
		return false, s.classify(err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
