package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/eventgen"
	"github.com/dvtrun/dvtrun/store/postgres"
	"github.com/dvtrun/dvtrun/store/postgres/pgtest"
	"github.com/dvtrun/dvtrun/store/storetest"
)

func openProjectionStore(t testing.TB) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), pgtest.DSN(t), postgres.Options{
		Now: func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// insertRaw writes events straight into dvt_run_events (and a dvt_runs row
// per run), one statement per run, bypassing the append path: the
// projections must cope with logs that Layer 2 would have refused. A
// re-delivery repeats an earlier idempotency key, which the unique index
// forbids; it is stored under a derived key (neither projection reads the
// key). A payload that is not JSON, which the append path refuses and the
// json column cannot hold, is stored as the JSON string of its text: to
// the Go reducer both are a payload without fields.
func insertRaw(t testing.TB, s *postgres.Store, streams map[string][]engine.RunEventRecord) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for runID, events := range streams {
		if len(events) == 0 {
			continue
		}
		f := events[0]
		if _, err := tx.ExecContext(ctx, `INSERT INTO dvt_runs (run_id, tenant_id, project_id, environment_id, plan_id, plan_version, plan_sha256, target_adapter, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, 'sha', 'local', $7)`, runID, f.TenantID, f.ProjectID, f.EnvironmentID, f.PlanID, f.PlanVersion, f.PersistedAt.UTC().Format(engine.TimeFormat)); err != nil {
			t.Fatal(err)
		}
		var seq, logical, eng []int64
		var tenant, project, env, id, typ, plan, version, key, emitted, persisted []string
		var step, payload []*string
		keys := map[string]bool{}
		for _, e := range events {
			k := e.IdempotencyKey
			if keys[k] {
				k = fmt.Sprintf("%s~redelivered@%d", k, e.RunSeq)
			}
			keys[k] = true
			var st, p *string
			if e.StepID != "" {
				st = &e.StepID
			}
			if e.Payload != nil {
				text := string(e.Payload)
				if !json.Valid(e.Payload) {
					b, _ := json.Marshal(text)
					text = string(b)
				}
				p = &text
			}
			seq, logical, eng = append(seq, e.RunSeq), append(logical, int64(e.LogicalAttemptID)), append(eng, int64(e.EngineAttemptID))
			tenant, project, env = append(tenant, e.TenantID), append(project, e.ProjectID), append(env, e.EnvironmentID)
			id, typ, plan, version = append(id, e.EventID), append(typ, string(e.EventType)), append(plan, e.PlanID), append(version, e.PlanVersion)
			key = append(key, k)
			emitted, persisted = append(emitted, e.EmittedAt.UTC().Format(engine.TimeFormat)), append(persisted, e.PersistedAt.UTC().Format(engine.TimeFormat))
			step, payload = append(step, st), append(payload, p)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO dvt_run_events (run_id, run_seq, tenant_id, project_id, environment_id, event_id, event_type, step_id,
			plan_id, plan_version, logical_attempt_id, engine_attempt_id, idempotency_key, emitted_at, persisted_at, payload)
			SELECT $1, e.* FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[],
			                           $11::bigint[], $12::bigint[], $13::text[], $14::text[], $15::text[], $16::json[]) AS e`,
			runID, seq, tenant, project, env, id, typ, step, plan, version, logical, eng, key, emitted, persisted, payload); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestProjectionSQLEqualsGo is the property of issue #5 on Postgres: for
// 1,000 generated streams (fixed seeds) the SQL projection equals the Go
// reducer field for field — over all runs in one statement, through the
// audit views, and run by run (every tenth run).
func TestProjectionSQLEqualsGo(t *testing.T) {
	ctx := context.Background()
	n := uint64(1000)
	streams := storetest.GenStreams(1, n, eventgen.Options{Duplicates: true, AllowGaps: true, Noise: 0.2, Odd: true})
	s := openProjectionStore(t)
	insertRaw(t, s, streams)

	start := time.Now()
	all, err := s.ProjectAllSQL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ProjectAllSQL over %d runs: %s", len(streams), time.Since(start).Round(time.Millisecond))
	if len(all) != len(streams) {
		t.Fatalf("ProjectAllSQL returned %d runs, want %d", len(all), len(streams))
	}
	views := viewSnapshots(t, s)
	goAll, err := s.ProjectAllGo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	failures := 0
	for runID, events := range streams {
		want := engine.Project(runID, events)
		// The Go reducer over what the store holds is the reference the CLI
		// uses; it must not depend on how re-deliveries were keyed, nor on
		// non-JSON payloads stored as JSON strings.
		if d := engine.DiffSnapshots(goAll[runID], want); len(d) > 0 {
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
		if runID[len(runID)-1] == '5' {
			one, err := s.ProjectSQL(ctx, runID)
			if err != nil {
				t.Fatal(err)
			}
			if d := engine.DiffSnapshots(one, want); len(d) > 0 {
				storetest.ReportDiffs(t, runID+": ProjectSQL vs Go", d)
				failures++
			}
		}
		if failures > 5 {
			t.Fatal("stopping after 5 failing runs")
		}
	}
}

// viewSnapshots assembles snapshots from the audit views dvt_run_snapshots,
// dvt_step_snapshots and dvt_violations, so the property test holds the
// views to the Go reducer too.
func viewSnapshots(t *testing.T, s *postgres.Store) map[string]engine.Snapshot {
	t.Helper()
	snaps, err := s.ProjectRows(context.Background(), `
		SELECT 'RUN' AS kind, run_id, '' AS step_id, 0::bigint AS ord, status, substatus, last_event_seq, inconsistent,
		       tenant_id, project_id, environment_id, 0::bigint AS logical_attempt_id, 0::bigint AS engine_attempt_id,
		       started_at, completed_at, duration_ms, has_error, error_code, error_message, error_retryable,
		       NULL::text AS skip_reason, NULL::text AS artifacts, NULL::text AS event_id, NULL::text AS event_type,
		       NULL::text AS persisted_at, NULL::text AS entity, NULL::text AS prior_state, NULL::text AS attempted_state
		FROM dvt_run_snapshots
		UNION ALL
		SELECT 'STEP', run_id, step_id, first_seq, status, '', last_event_seq, false, '', '', '',
		       logical_attempt_id, engine_attempt_id, started_at, completed_at, duration_ms,
		       has_error, error_code, error_message, error_retryable, skip_reason, artifacts,
		       NULL, NULL, NULL, NULL, NULL, NULL
		FROM dvt_step_snapshots
		UNION ALL
		SELECT 'VIOLATION', run_id, step_id, run_seq, '', '', 0, true, '', '', '', 0, 0, NULL, NULL, 0,
		       0, NULL, NULL, NULL, NULL, NULL,
		       event_id, event_type, persisted_at, entity, prior_state, attempted_state
		FROM dvt_violations
		ORDER BY run_id, kind, ord`)
	if err != nil {
		t.Fatal(err)
	}
	return snaps
}

// TestProjectSQLUnknownRun: an unknown run is RUN_NOT_FOUND, a run without
// events its initial state.
func TestProjectSQLUnknownRun(t *testing.T) {
	s := openProjectionStore(t)
	_, err := s.ProjectSQL(context.Background(), "nope")
	if engine.CodeOf(err) != engine.CodeRunNotFound {
		t.Fatalf("ProjectSQL(nope): %v, want RUN_NOT_FOUND", err)
	}
}
