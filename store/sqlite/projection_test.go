package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/eventgen"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

func openProjectionStore(t testing.TB) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "state.db"), sqlite.Options{
		Now: func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// insertRaw writes events straight into dvt_run_events (and a dvt_runs row
// per run), bypassing the append path: the projections must cope with logs
// that Layer 2 would have refused, as Snowflake's (unenforced uniqueness)
// and older logs can hold. A re-delivery repeats an earlier idempotency key,
// which SQLite's unique index forbids; it is stored under a derived key.
// Neither projection reads the key: both see the same re-delivered event.
func insertRaw(t testing.TB, s *sqlite.Store, streams map[string][]engine.RunEventRecord) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.DB().BeginTx(ctx, nil)
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

// genStreams makes n reproducible runs: run ids are "run-<seed>".
func genStreams(first, n uint64, o eventgen.Options) map[string][]engine.RunEventRecord {
	out := make(map[string][]engine.RunEventRecord, n)
	for seed := first; seed < first+n; seed++ {
		id := fmt.Sprintf("run-%06d", seed)
		out[id] = eventgen.Stream(seed, id, o)
	}
	return out
}

func reportDiffs(t *testing.T, what string, diffs []engine.SnapshotDiff) {
	t.Helper()
	var b strings.Builder
	for i, d := range diffs {
		if i == 10 {
			fmt.Fprintf(&b, "\n  … %d more", len(diffs)-i)
			break
		}
		fmt.Fprintf(&b, "\n  run %s step %q %s: sql=%q go=%q", d.RunID, d.StepID, d.Field, d.SQL, d.Go)
	}
	t.Errorf("%s: %d differences%s", what, len(diffs), b.String())
}

// TestProjectionSQLEqualsGo is the property of issue #5 on SQLite: for
// 1,000 generated streams (fixed seeds) the SQL projection equals the Go
// reducer field for field — over all runs in one statement, and run by run.
func TestProjectionSQLEqualsGo(t *testing.T) {
	ctx := context.Background()
	n := uint64(1000)
	opts := eventgen.Options{Duplicates: true, AllowGaps: true, Noise: 0.2, Odd: true}
	streams := genStreams(1, n, opts)
	s := openProjectionStore(t)
	insertRaw(t, s, streams)

	all, err := s.ProjectAllSQL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(streams) {
		t.Fatalf("ProjectAllSQL returned %d runs, want %d", len(all), len(streams))
	}
	failures := 0
	for runID, events := range streams {
		want := engine.Project(runID, events)
		stored, err := s.ListEvents(ctx, runID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		// The Go reducer over what the store holds is the reference the CLI
		// uses; it must not depend on how re-deliveries were keyed.
		if d := engine.DiffSnapshots(engine.Project(runID, stored), want); len(d) > 0 {
			reportDiffs(t, runID+": Go over stored events vs Go over generated", d)
		}
		if d := engine.DiffSnapshots(all[runID], want); len(d) > 0 {
			reportDiffs(t, runID+": ProjectAllSQL vs Go", d)
			failures++
		}
		one, err := s.ProjectSQL(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		if d := engine.DiffSnapshots(one, want); len(d) > 0 {
			reportDiffs(t, runID+": ProjectSQL vs Go", d)
			failures++
		}
		if failures > 5 {
			t.Fatal("stopping after 5 failing runs")
		}
	}
}
