package postgres_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/postgres"
	"github.com/dvtrun/dvtrun/store/postgres/pgtest"
	"github.com/dvtrun/dvtrun/store/sqlite/sqlitetest"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// TestProjection runs the shared projection suite on Postgres: the SQL
// projection and the audit views equal the Go reducer, and the documented
// audit queries return what they return on SQLite.
func TestProjection(t *testing.T) {
	ref := sqlitetest.Projection()
	storetest.RunProjection(t, storetest.ProjectionBackend{
		Open: func(t testing.TB, unchecked bool) storetest.ProjectionStore { return openProjectionStore(t, unchecked) },
		DB:   func(s storetest.ProjectionStore) *sql.DB { return s.(*postgres.Store).DB().DB },
		LoadRaw: func(t testing.TB, s storetest.ProjectionStore, streams map[string][]engine.RunEventRecord) {
			insertRaw(t, s.(*postgres.Store), streams)
		},
		Reference: &ref,
	})
}

func openProjectionStore(t testing.TB, unchecked bool) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), pgtest.DSN(t), postgres.Options{
		Now:                     func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) },
		DisableTransitionChecks: unchecked,
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
