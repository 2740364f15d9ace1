package snowflake_test

import (
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/snowflakedb/gosnowflake"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
	"github.com/dvtrun/dvtrun/store/sqlite/sqlitetest"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// loadRaw writes events straight into dvt_run_events, bypassing the append
// path: the projection must cope with what Snowflake can hold without
// enforced constraints (re-delivered keys, events Layer 2 would refuse). The
// rows go through a staging table in bind arrays of at most 4,000 rows (the
// driver uploads larger arrays to a stage). A payload that is not JSON
// cannot be a VARIANT: it is stored as NULL, and the Go reference reads the
// stored log, so both sides see the same events.
func loadRaw(t testing.TB, s *snowflake.Store, streams map[string][]engine.RunEventRecord) {
	t.Helper()
	db := s.DB()
	if _, err := db.ExecContext(ctx, `CREATE OR REPLACE TABLE proj_stage (run_id VARCHAR, run_seq NUMBER, tenant_id VARCHAR,
		project_id VARCHAR, environment_id VARCHAR, event_id VARCHAR, event_type VARCHAR, step_id VARCHAR, plan_id VARCHAR,
		plan_version VARCHAR, logical_attempt_id NUMBER, engine_attempt_id NUMBER, idempotency_key VARCHAR,
		emitted_at VARCHAR, persisted_at VARCHAR, payload VARCHAR)`); err != nil {
		t.Fatal(err)
	}
	var str [14][]string
	var num [3][]int64
	flush := func() {
		if len(num[0]) == 0 {
			return
		}
		args := []any{
			gosnowflake.Array(&str[0]), gosnowflake.Array(&num[0]), gosnowflake.Array(&str[1]), gosnowflake.Array(&str[2]),
			gosnowflake.Array(&str[3]), gosnowflake.Array(&str[4]), gosnowflake.Array(&str[5]), gosnowflake.Array(&str[6]),
			gosnowflake.Array(&str[7]), gosnowflake.Array(&str[8]), gosnowflake.Array(&num[1]), gosnowflake.Array(&num[2]),
			gosnowflake.Array(&str[9]), gosnowflake.Array(&str[10]), gosnowflake.Array(&str[11]), gosnowflake.Array(&str[12]),
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO proj_stage VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, args...); err != nil {
			t.Fatal(err)
		}
		str, num = [14][]string{}, [3][]int64{}
	}
	ts := func(e engine.RunEventRecord) (string, string) {
		const f = "2006-01-02T15:04:05.000000000+00:00"
		return e.EmittedAt.UTC().Format(f), e.PersistedAt.UTC().Format(f)
	}
	for runID, events := range streams {
		for _, e := range events {
			emitted, persisted := ts(e)
			for i, v := range []string{runID, e.TenantID, e.ProjectID, e.EnvironmentID, e.EventID, string(e.EventType), e.StepID,
				e.PlanID, e.PlanVersion, e.IdempotencyKey, emitted, persisted, string(e.Payload)} {
				str[i] = append(str[i], v)
			}
			num[0] = append(num[0], e.RunSeq)
			num[1] = append(num[1], int64(e.LogicalAttemptID))
			num[2] = append(num[2], int64(e.EngineAttemptID))
			if len(num[0]) == 4000 {
				flush()
			}
		}
	}
	flush()
	if _, err := db.ExecContext(ctx, `INSERT INTO dvt_run_events (run_id, run_seq, tenant_id, project_id, environment_id, event_id,
		event_type, step_id, plan_id, plan_version, logical_attempt_id, engine_attempt_id, idempotency_key, emitted_at, persisted_at, payload)
		SELECT run_id, run_seq, tenant_id, project_id, environment_id, event_id, event_type, NULLIF(step_id, ''), plan_id, plan_version,
		       logical_attempt_id, engine_attempt_id, idempotency_key, CAST(emitted_at AS TIMESTAMP_TZ(9)), CAST(persisted_at AS TIMESTAMP_TZ(9)),
		       TRY_PARSE_JSON(NULLIF(payload, ''))
		FROM proj_stage`); err != nil {
		t.Fatal(err)
	}
}

// TestProjection runs the shared projection suite on the Snowflake dialect,
// through gosnowflake and the DuckDB-backed test server: the SQL projection
// and the audit views equal the Go reducer over the stored log, and the
// documented audit queries return what they return on SQLite. ProjectSQL,
// a round trip a run, is checked on a hundredth of the runs.
func TestProjection(t *testing.T) {
	srv := sftest.Start(t)
	n := uint64(1000)
	var opened atomic.Int64 // a database per store
	if testing.Short() {
		n = 200
	}
	ref := sqlitetest.Projection()
	storetest.RunProjection(t, storetest.ProjectionBackend{
		Open: func(t testing.TB, unchecked bool) storetest.ProjectionStore {
			s := openStore(t, srv.DSN("dvt", fmt.Sprintf("projection_%d", opened.Add(1))), snowflake.Options{DisableTransitionChecks: unchecked})
			t.Cleanup(func() { s.Close() })
			return s
		},
		DB: func(s storetest.ProjectionStore) *sql.DB { return s.(*snowflake.Store).DB() },
		LoadRaw: func(t testing.TB, s storetest.ProjectionStore, streams map[string][]engine.RunEventRecord) {
			loadRaw(t, s.(*snowflake.Store), streams)
		},
		Runs: n, ScopedSuffix: "25", LossyPayloads: true,
		Reference: &ref,
	})
}
