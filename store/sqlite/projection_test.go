package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/eventgen"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/storetest"
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

// TestProjectionSQLEqualsGo is the property of issue #5 on SQLite: for
// 1,000 generated streams (fixed seeds) the SQL projection equals the Go
// reducer field for field — over all runs in one statement, through the
// audit views, and run by run (every tenth run).
func TestProjectionSQLEqualsGo(t *testing.T) {
	ctx := context.Background()
	n := uint64(1000)
	opts := eventgen.Options{Duplicates: true, AllowGaps: true, Noise: 0.2, Odd: true}
	streams := storetest.GenStreams(1, n, opts)
	s := openProjectionStore(t)
	insertRaw(t, s, streams)

	all, err := s.ProjectAllSQL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(streams) {
		t.Fatalf("ProjectAllSQL returned %d runs, want %d", len(all), len(streams))
	}
	requireVariety(t, streams)
	views := viewSnapshots(t, s)
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
			storetest.ReportDiffs(t, runID+": Go over stored events vs Go over generated", d)
		}
		if d := engine.DiffSnapshots(all[runID], want); len(d) > 0 {
			storetest.ReportDiffs(t, runID+": ProjectAllSQL vs Go", d)
			failures++
		}
		if d := engine.DiffSnapshots(views[runID], want); len(d) > 0 {
			storetest.ReportDiffs(t, runID+": audit views vs Go", d)
			failures++
		}
		if runID[len(runID)-1] != '5' {
			continue // the run-scoped statement differs only in its scope: a tenth of the runs suffice
		}
		one, err := s.ProjectSQL(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		if d := engine.DiffSnapshots(one, want); len(d) > 0 {
			storetest.ReportDiffs(t, runID+": ProjectSQL vs Go", d)
			failures++
		}
		if failures > 5 {
			t.Fatal("stopping after 5 failing runs")
		}
	}
}

// viewSnapshots assembles snapshots from the audit views dvt_run_snapshots,
// dvt_step_snapshots and dvt_violations, so the property test holds the
// views to the Go reducer too.
func viewSnapshots(t *testing.T, s *sqlite.Store) map[string]engine.Snapshot {
	t.Helper()
	ctx := context.Background()
	out := map[string]engine.Snapshot{}
	type runRow struct {
		RunID        string         `db:"run_id"`
		Tenant       string         `db:"tenant_id"`
		Project      string         `db:"project_id"`
		Env          string         `db:"environment_id"`
		Status       string         `db:"status"`
		Substatus    string         `db:"substatus"`
		LastEventSeq int64          `db:"last_event_seq"`
		Inconsistent bool           `db:"inconsistent"`
		StartedAt    sql.NullString `db:"started_at"`
		CompletedAt  sql.NullString `db:"completed_at"`
		DurationMs   int64          `db:"duration_ms"`
		HasError     bool           `db:"has_error"`
		ErrCode      sql.NullString `db:"error_code"`
		ErrMessage   sql.NullString `db:"error_message"`
		ErrRetryable sql.NullBool   `db:"error_retryable"`
	}
	var runs []runRow
	if err := s.DB().SelectContext(ctx, &runs, `SELECT run_id, tenant_id, project_id, environment_id, status, substatus, last_event_seq,
		inconsistent, started_at, completed_at, duration_ms, has_error, error_code, error_message, error_retryable FROM dvt_run_snapshots`); err != nil {
		t.Fatal(err)
	}
	errInfo := func(has bool, code, msg sql.NullString, retry sql.NullBool) *engine.ErrorInfo {
		if !has {
			return nil
		}
		return &engine.ErrorInfo{Code: code.String, Message: msg.String, Retryable: retry.Bool}
	}
	for _, r := range runs {
		out[r.RunID] = engine.Snapshot{RunID: r.RunID, TenantID: r.Tenant, ProjectID: r.Project, EnvironmentID: r.Env,
			Status: engine.RunStatus(r.Status), Substatus: r.Substatus, LastEventSeq: r.LastEventSeq, Inconsistent: r.Inconsistent,
			StartedAt: mustTime(t, r.StartedAt), CompletedAt: mustTime(t, r.CompletedAt), DurationMs: r.DurationMs,
			Error: errInfo(r.HasError, r.ErrCode, r.ErrMessage, r.ErrRetryable)}
	}
	type stepRow struct {
		RunID        string         `db:"run_id"`
		StepID       string         `db:"step_id"`
		Status       string         `db:"status"`
		Logical      int            `db:"logical_attempt_id"`
		Engine       int            `db:"engine_attempt_id"`
		StartedAt    sql.NullString `db:"started_at"`
		CompletedAt  sql.NullString `db:"completed_at"`
		DurationMs   int64          `db:"duration_ms"`
		HasError     bool           `db:"has_error"`
		ErrCode      sql.NullString `db:"error_code"`
		ErrMessage   sql.NullString `db:"error_message"`
		ErrRetryable sql.NullBool   `db:"error_retryable"`
		SkipReason   sql.NullString `db:"skip_reason"`
		Artifacts    sql.NullString `db:"artifacts"`
		LastEventSeq int64          `db:"last_event_seq"`
	}
	var steps []stepRow
	if err := s.DB().SelectContext(ctx, &steps, `SELECT run_id, step_id, status, logical_attempt_id, engine_attempt_id, started_at, completed_at,
		duration_ms, has_error, error_code, error_message, error_retryable, skip_reason, artifacts, last_event_seq
		FROM dvt_step_snapshots ORDER BY run_id, first_seq`); err != nil {
		t.Fatal(err)
	}
	for _, r := range steps {
		snap := out[r.RunID]
		st := engine.StepSnapshot{StepID: r.StepID, Status: engine.StepStatus(r.Status), LogicalAttemptID: r.Logical, EngineAttemptID: r.Engine,
			StartedAt: mustTime(t, r.StartedAt), CompletedAt: mustTime(t, r.CompletedAt), DurationMs: r.DurationMs,
			Error: errInfo(r.HasError, r.ErrCode, r.ErrMessage, r.ErrRetryable), SkipReason: r.SkipReason.String, LastEventSeq: r.LastEventSeq}
		if r.Artifacts.Valid && json.Unmarshal([]byte(r.Artifacts.String), &st.Artifacts) != nil {
			st.Artifacts = nil
		}
		snap.Steps = append(snap.Steps, st)
		out[r.RunID] = snap
	}
	type violationRow struct {
		RunID     string `db:"run_id"`
		RunSeq    int64  `db:"run_seq"`
		EventID   string `db:"event_id"`
		EventType string `db:"event_type"`
		Entity    string `db:"entity"`
		StepID    string `db:"step_id"`
		Prior     string `db:"prior_state"`
		Attempted string `db:"attempted_state"`
		Persisted string `db:"persisted_at"`
	}
	var vs []violationRow
	if err := s.DB().SelectContext(ctx, &vs, `SELECT run_id, run_seq, event_id, event_type, entity, step_id, prior_state, attempted_state, persisted_at
		FROM dvt_violations ORDER BY run_id, run_seq`); err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		snap := out[v.RunID]
		snap.Violations = append(snap.Violations, engine.Violation{EventID: v.EventID, EventType: engine.EventType(v.EventType), RunSeq: v.RunSeq,
			PersistedAt: mustTime(t, sql.NullString{String: v.Persisted, Valid: true}), Entity: v.Entity, StepID: v.StepID,
			PriorState: v.Prior, AttemptedState: v.Attempted})
		out[v.RunID] = snap
	}
	return out
}

func mustTime(t *testing.T, v sql.NullString) time.Time {
	t.Helper()
	if !v.Valid {
		return time.Time{}
	}
	at, err := time.Parse(time.RFC3339Nano, v.String)
	if err != nil {
		t.Fatalf("time %q: %v", v.String, err)
	}
	return at
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

// requireVariety guards the corpus: equality proves little on streams that
// never exercise a rule. Each case must occur in at least 20 runs.
func requireVariety(t *testing.T, streams map[string][]engine.RunEventRecord) {
	t.Helper()
	count := map[string]int{}
	for runID, events := range streams {
		snap := engine.Project(runID, events)
		seen := map[string]bool{}
		mark := func(c string) { seen[c] = true }
		keys := map[string]bool{}
		startedAt := map[time.Time]bool{} // every StepStarted's emittedAt
		for _, e := range events {
			if e.EventType == engine.StepStarted {
				startedAt[e.EmittedAt] = true
			}
			if keys[e.IdempotencyKey] {
				mark("re-delivery")
			}
			keys[e.IdempotencyKey] = true
			if !e.EventType.Known() {
				mark("unknown type")
			}
			if e.LogicalAttemptID < 1 || e.LogicalAttemptID > 64 {
				mark("attempt outside 1..64")
			}
			if e.StepID != "" && !e.EventType.StepLevel() && e.EventType.Known() {
				mark("run event with a step id")
			}
		}
		for _, v := range snap.Violations {
			mark("violation " + v.Entity)
			if _, ok := snap.Step(v.StepID); v.Entity == engine.EntityStep && !ok {
				mark("invalid event creating no step")
			}
		}
		if snap.Substatus == engine.SubstatusDraining {
			mark("draining")
		}
		mark("status " + string(snap.Status))
		for _, st := range snap.Steps {
			mark("step " + string(st.Status))
			if !st.StartedAt.IsZero() && !startedAt[st.StartedAt] {
				mark("step timed from its outcome's attemptStartedAt")
			}
			switch {
			case st.LogicalAttemptID > 1 && st.Status == engine.StepStatusSuccess:
				mark("retried step succeeded")
			case st.DurationMs < 0:
				mark("negative duration")
			case len(st.Artifacts) > 0:
				mark("artifacts")
			case st.Status == engine.StepStatusFailed && st.Error == nil:
				mark("failure without a decodable error")
			}
		}
		for c := range seen {
			count[c]++
		}
	}
	for _, c := range []string{"re-delivery", "unknown type", "attempt outside 1..64", "run event with a step id", "violation RUN", "violation STEP",
		"draining", "status COMPLETED", "status FAILED", "status CANCELLED", "status PAUSED", "status RUNNING", "step SKIPPED", "step FAILED",
		"step RUNNING", "invalid event creating no step", "retried step succeeded", "negative duration", "artifacts", "failure without a decodable error",
		"step timed from its outcome's attemptStartedAt"} {
		if count[c] < 20 {
			t.Errorf("only %d of %d generated runs have %s", count[c], len(streams), c)
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
