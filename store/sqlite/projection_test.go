package sqlite_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/sqlite/sqlitetest"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// TestProjection runs the shared projection suite on SQLite: the SQL
// projection and the audit views equal the Go reducer.
func TestProjection(t *testing.T) {
	storetest.RunProjection(t, sqlitetest.Projection())
}

func openProjectionStore(t testing.TB) *sqlite.Store {
	return sqlitetest.Projection().Open(t, false).(*sqlite.Store)
}

func insertRaw(t testing.TB, s *sqlite.Store, streams map[string][]engine.RunEventRecord) {
	sqlitetest.LoadLog(t, s.DB().DB, streams)
}

// TestAuditViewsIncludeTheProjection: in each dialect the projection's
// recursive CTEs exist once, in projection.sql's `states`; the latest
// migration that creates dvt_event_states includes them (expanded, no
// include marker left), so the view and the per-run query cannot drift.
func TestAuditViewsIncludeTheProjection(t *testing.T) {
	for _, dialect := range []string{sqlfiles.SQLite, sqlfiles.Snowflake, sqlfiles.Postgres} {
		states, err := sqlfiles.Query(dialect, "projection.sql", "states")
		if err != nil {
			t.Fatal(err)
		}
		migs, err := sqlfiles.Migrations(dialect)
		if err != nil {
			t.Fatal(err)
		}
		var last *sqlfiles.Migration
		for i, m := range migs {
			if strings.Contains(m.SQL, "/*include") {
				t.Errorf("%s migration %s: an include was not expanded", dialect, m.Name)
			}
			if strings.Contains(m.SQL, "VIEW dvt_event_states AS") {
				last = &migs[i]
			}
		}
		if last == nil {
			t.Errorf("no %s migration creates dvt_event_states", dialect)
		} else if !strings.Contains(last.SQL, "WITH RECURSIVE\n"+states) {
			t.Errorf("%s migration %s: dvt_event_states does not include projection.sql's states", dialect, last.Name)
		}
	}
}

// TestAuditViewsMigrateForward: a store made before migration 0600 (its
// views another text: here a stale dvt_run_snapshots) gets the views from
// the single projection text when it is next opened.
func TestAuditViewsMigrateForward(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	streams := benchStreams(20)
	insertRaw(t, s, streams)
	for _, stmt := range []string{
		`DROP VIEW dvt_run_snapshots`,
		`CREATE VIEW dvt_run_snapshots AS SELECT run_id, 'STALE' AS status FROM dvt_runs`,
		`DELETE FROM dvt_schema_version WHERE version = 600`,
	} {
		if _, err := s.DB().ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	if s, err = sqlite.Open(ctx, path, sqlite.Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var applied int
	if err := s.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM dvt_schema_version WHERE version = 600`).Scan(&applied); err != nil || applied != 1 {
		t.Fatalf("migration 0600 applied %d times (%v), want once", applied, err)
	}
	for runID, events := range streams {
		var status string
		if err := s.DB().QueryRowContext(ctx, `SELECT status FROM dvt_run_snapshots WHERE run_id = ?`, runID).Scan(&status); err != nil {
			t.Fatal(err)
		}
		if want := engine.Project(runID, events).Status; status != string(want) {
			t.Errorf("run %s: dvt_run_snapshots says %s, the reducer %s", runID, status, want)
		}
	}
}

// TestProjectSQLEmptyRun: a run without events projects to its initial
// state, and ProjectAllSQL lists no run for a log without events.
func TestProjectSQLEmptyRun(t *testing.T) {
	ctx := context.Background()
	s := openProjectionStore(t)
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO dvt_runs (run_id, tenant_id, project_id, environment_id, plan_id, plan_version, plan_sha256, target_adapter, created_at)
		VALUES ('empty', 't', 'p', 'e', 'plan', '1', 'sha', 'local', '2026-01-01T00:00:00.000000000Z')`); err != nil {
		t.Fatal(err)
	}
	snap, err := s.ProjectSQL(ctx, "empty")
	if err != nil {
		t.Fatal(err)
	}
	if d := engine.DiffSnapshots(snap, engine.Project("empty", nil)); len(d) > 0 || snap.Steps == nil {
		t.Fatalf("run without events: %+v, diffs %+v", snap, d)
	}
	all, err := s.ProjectAllSQL(ctx)
	if err != nil || len(all) != 0 {
		t.Fatalf("ProjectAllSQL over a log without events = %v, %v; want no runs", all, err)
	}
}
