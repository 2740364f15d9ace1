// Package sqlitetest gives the shared suites (store/storetest) an SQLite
// store to run on, and the other backends' tests their SQLite reference.
package sqlitetest

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// Projection is SQLite as a backend of the projection suite: a store in a
// new file per Open, its clock fixed, loaded by LoadLog.
func Projection() storetest.ProjectionBackend {
	return storetest.ProjectionBackend{
		Open: func(t testing.TB, unchecked bool) storetest.ProjectionStore {
			t.Helper()
			s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "state.db"), sqlite.Options{
				Now:                     func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) },
				DisableTransitionChecks: unchecked,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		DB: func(s storetest.ProjectionStore) *sql.DB { return s.(*sqlite.Store).DB().DB },
		LoadRaw: func(t testing.TB, s storetest.ProjectionStore, streams map[string][]engine.RunEventRecord) {
			LoadLog(t, s.(*sqlite.Store).DB().DB, streams)
		},
	}
}

// LoadLog writes streams straight into an SQLite store's dvt_run_events
// (and a dvt_runs row per run), bypassing the append path: a log Layer 2
// would have refused stays as it is. A re-delivery repeats an earlier
// idempotency key, which SQLite's unique index forbids: it is stored under
// a derived key (no projection or audit view reads keys).
func LoadLog(t testing.TB, db *sql.DB, streams map[string][]engine.RunEventRecord) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	run, err := tx.PrepareContext(ctx, `INSERT INTO dvt_runs (run_id, tenant_id, project_id, environment_id, plan_id, plan_version, plan_sha256, target_adapter, created_at) VALUES (?, ?, ?, ?, ?, ?, 'sha', 'local', ?)`)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := tx.PrepareContext(ctx, `INSERT INTO dvt_run_events (run_id, run_seq, tenant_id, project_id, environment_id, event_id, event_type, step_id, plan_id, plan_version, logical_attempt_id, engine_attempt_id, idempotency_key, emitted_at, persisted_at, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		t.Fatal(err)
	}
	for runID, events := range streams {
		if len(events) == 0 {
			continue
		}
		f := events[0]
		if _, err := run.ExecContext(ctx, runID, f.TenantID, f.ProjectID, f.EnvironmentID, f.PlanID, f.PlanVersion, f.PersistedAt.UTC().Format(engine.TimeFormat)); err != nil {
			t.Fatal(err)
		}
		keys := map[string]bool{}
		for _, e := range events {
			key := e.IdempotencyKey
			if keys[key] {
				key = fmt.Sprintf("%s~redelivered@%d", key, e.RunSeq)
			}
			keys[key] = true
			var step, payload any
			if e.StepID != "" {
				step = e.StepID
			}
			if e.Payload != nil {
				payload = string(e.Payload)
			}
			if _, err := ev.ExecContext(ctx, runID, e.RunSeq, e.TenantID, e.ProjectID, e.EnvironmentID, e.EventID, string(e.EventType), step,
				e.PlanID, e.PlanVersion, e.LogicalAttemptID, e.EngineAttemptID, key,
				e.EmittedAt.UTC().Format(engine.TimeFormat), e.PersistedAt.UTC().Format(engine.TimeFormat), payload); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}
