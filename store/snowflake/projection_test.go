package snowflake_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/snowflakedb/gosnowflake"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/eventgen"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
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

// TestProjectionSQLEqualsGo is the property of issue #5 on the Snowflake
// dialect, through gosnowflake and the DuckDB-backed test server: for 1,000
// generated streams (fixed seeds) the SQL projection equals the Go reducer
// over the same stored log, field for field — all runs in one statement,
// through the audit views,
// and run by run for every hundredth run.
func TestProjectionSQLEqualsGo(t *testing.T) {
	n := uint64(1000)
	if testing.Short() {
		n = 200
	}
	srv := sftest.Start(t)
	s := openStore(t, srv.DSN("dvt", "projection"), snowflake.Options{})
	t.Cleanup(func() { s.Close() })
	streams := map[string][]engine.RunEventRecord{}
	opts := eventgen.Options{Duplicates: true, AllowGaps: true, Noise: 0.2, Odd: true}
	for seed := uint64(1); seed <= n; seed++ {
		id := fmt.Sprintf("run-%06d", seed)
		streams[id] = eventgen.Stream(seed, id, opts)
	}
	start := time.Now()
	loadRaw(t, s, streams)
	t.Logf("loaded %d runs in %v", len(streams), time.Since(start))
	start = time.Now()

	goSnaps, err := s.ProjectAllGo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Go projection of the stored log: %v", time.Since(start))
	start = time.Now()
	sqlSnaps, err := s.ProjectAllSQL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SQL projection: %v", time.Since(start))
	if len(goSnaps) != len(streams) || len(sqlSnaps) != len(streams) {
		t.Fatalf("%d runs loaded, Go projected %d, SQL %d", len(streams), len(goSnaps), len(sqlSnaps))
	}
	views := viewSnapshots(t, s)
	failures := 0
	for runID, events := range streams {
		want := goSnaps[runID]
		// The stored log differs from the generated one only where a
		// payload was not JSON; the run's shape must survive the load.
		if gen := engine.Project(runID, events); gen.Status != want.Status || gen.LastEventSeq != want.LastEventSeq || len(gen.Steps) != len(want.Steps) {
			t.Errorf("%s: the stored log projects to %s/%d/%d steps, the generated one to %s/%d/%d", runID,
				want.Status, want.LastEventSeq, len(want.Steps), gen.Status, gen.LastEventSeq, len(gen.Steps))
		}
		if d := engine.DiffSnapshots(sqlSnaps[runID], want); len(d) > 0 {
			storetest.ReportDiffs(t, runID+": ProjectAllSQL vs Go", d)
			failures++
		}
		if d := engine.DiffSnapshots(views[runID], want); len(d) > 0 {
			storetest.ReportDiffs(t, runID+": audit views vs Go", d)
			failures++
		}
		if !strings.HasSuffix(runID, "25") {
			continue // the run-scoped statement differs only in its scope; each is a round trip
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

func TestProjectSQLUnknownRun(t *testing.T) {
	srv := sftest.Start(t)
	s := openStore(t, srv.DSN("dvt", "projection_unknown"), snowflake.Options{})
	t.Cleanup(func() { s.Close() })
	if _, err := s.ProjectSQL(ctx, "no-such-run"); engine.CodeOf(err) != engine.CodeRunNotFound {
		t.Fatalf("unknown run: err = %v, want %s", err, engine.CodeRunNotFound)
	}
}

// viewSnapshots assembles snapshots from the audit views dvt_run_snapshots,
// dvt_step_snapshots and dvt_violations, holding them to the Go reducer too.
func viewSnapshots(t *testing.T, s *snowflake.Store) map[string]engine.Snapshot {
	t.Helper()
	var asm engine.SnapshotAssembler
	rows, err := s.DB().QueryContext(ctx, `
		SELECT 'RUN' AS kind, run_id, '' AS step_id, 0 AS ord, status, substatus, last_event_seq, inconsistent,
		       tenant_id, project_id, environment_id, 0 AS logical_attempt_id, 0 AS engine_attempt_id,
		       started_at, completed_at, duration_ms, has_error, error_code, error_message, error_retryable,
		       CAST(NULL AS VARCHAR) AS skip_reason, CAST(NULL AS VARCHAR) AS artifacts,
		       CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS VARCHAR) AS event_type, CAST(NULL AS TIMESTAMP_TZ(9)) AS persisted_at,
		       CAST(NULL AS VARCHAR) AS entity, CAST(NULL AS VARCHAR) AS prior_state, CAST(NULL AS VARCHAR) AS attempted_state
		FROM dvt_run_snapshots
		UNION ALL
		SELECT 'STEP', run_id, step_id, first_seq, status, '', last_event_seq, FALSE, '', '', '',
		       logical_attempt_id, engine_attempt_id, started_at, completed_at, duration_ms,
		       has_error, error_code, error_message, error_retryable, skip_reason, artifacts,
		       NULL, NULL, NULL, NULL, NULL, NULL
		FROM dvt_step_snapshots
		UNION ALL
		SELECT 'VIOLATION', run_id, step_id, run_seq, '', '', 0, TRUE, '', '', '', 0, 0, NULL, NULL, 0,
		       FALSE, NULL, NULL, NULL, NULL, NULL,
		       event_id, event_type, persisted_at, entity, prior_state, attempted_state
		FROM dvt_violations
		ORDER BY run_id, kind, ord`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var r engine.ProjectionRow
		var started, completed, persisted sql.NullTime
		var errCode, errMessage, skip, artifacts, eventID, eventType, entity, prior, attempted sql.NullString
		var hasError, retryable sql.NullBool
		if err := rows.Scan(&r.Kind, &r.RunID, &r.StepID, &r.Ord, &r.Status, &r.Substatus, &r.LastEventSeq, &r.Inconsistent,
			&r.TenantID, &r.ProjectID, &r.EnvironmentID, &r.LogicalAttemptID, &r.EngineAttemptID, &started, &completed, &r.DurationMs,
			&hasError, &errCode, &errMessage, &retryable, &skip, &artifacts,
			&eventID, &eventType, &persisted, &entity, &prior, &attempted); err != nil {
			t.Fatal(err)
		}
		r.StartedAt, r.CompletedAt, r.PersistedAt = started.Time.UTC(), completed.Time.UTC(), persisted.Time.UTC()
		if !started.Valid {
			r.StartedAt = time.Time{}
		}
		if !completed.Valid {
			r.CompletedAt = time.Time{}
		}
		if hasError.Bool {
			r.Error = &engine.ErrorInfo{Code: errCode.String, Message: errMessage.String, Retryable: retryable.Bool}
		}
		r.SkipReason, r.Artifacts = skip.String, artifacts.String
		r.EventID, r.EventType, r.Entity, r.PriorState, r.AttemptedState = eventID.String, eventType.String, entity.String, prior.String, attempted.String
		if err := asm.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return asm.Snapshots()
}

// TestProjectionOfAppendedRun projects a run written through the Snowflake
// store's own append path (hex-literal multi-statement writes, Layer 2 off
// so an invalid event is stored too) and checks SQL, ProjectAllGo and the Go
// reducer over ListEvents against each other and against what the run did.
func TestProjectionOfAppendedRun(t *testing.T) {
	srv := sftest.Start(t)
	s := openStore(t, srv.DSN("dvt", "projection_appended"), snowflake.Options{DisableTransitionChecks: true})
	t.Cleanup(func() { s.Close() })
	f := storetest.NewFixture()
	f.Bootstrap(t, s)
	for _, batch := range [][]engine.RunEventWrite{
		{f.Event(engine.StepStarted, "a", 1), f.Event(engine.StepStarted, "b", 1)},
		{f.Event(engine.StepFailed, "a", 1), f.Event(engine.StepStarted, "a", 2), f.Event(engine.StepStarted, "b", 1)},
		{f.Event(engine.StepCompleted, "a", 2), f.Event(engine.StepSkipped, "c", 1), f.Event("StepDelayed", "b", 1)},
		{f.Event(engine.StepCompleted, "c", 1), f.Event(engine.RunPaused, "", 1)},
	} {
		if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, batch); err != nil {
			t.Fatal(err)
		}
	}
	events, err := s.ListEvents(ctx, f.Meta.RunID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := engine.Project(f.Meta.RunID, events)
	if a, _ := want.Step("a"); want.Status != engine.StatusPaused || want.Substatus != engine.SubstatusDraining || !want.Inconsistent ||
		len(want.Violations) != 1 || a.Status != engine.StepStatusSuccess || a.LogicalAttemptID != 2 || a.Error != nil {
		t.Fatalf("the Go reducer does not see the run the test wrote: %+v", want)
	}
	got, err := s.ProjectSQL(ctx, f.Meta.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if d := engine.DiffSnapshots(got, want); len(d) > 0 {
		storetest.ReportDiffs(t, "ProjectSQL vs Go", d)
	}
	all, err := s.ProjectAllGo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := engine.DiffSnapshots(all[f.Meta.RunID], want); len(d) > 0 || len(all) != 1 {
		storetest.ReportDiffs(t, "ProjectAllGo vs Go over ListEvents", d)
	}
}

// TestProjectionCases runs the hand-written edge cases of
// store/sqlite/testdata/projection_cases.json (whose expected snapshots the
// SQLite test checks against both projections) through the Snowflake
// projection and requires the Go reducer's snapshot over the stored log.
func TestProjectionCases(t *testing.T) {
	b, err := os.ReadFile("../sqlite/testdata/projection_cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name   string `json:"name"`
		Events []struct {
			Type    engine.EventType `json:"type"`
			Step    string           `json:"step"`
			Attempt int              `json:"attempt"`
			Engine  int              `json:"engine"`
			Seq     int64            `json:"seq"`
			AtNs    int64            `json:"atNs"`
			Tenant  *string          `json:"tenant"`
			Payload json.RawMessage  `json:"payload"`
		} `json:"events"`
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 2, 1, 12, 0, 0, 0, time.UTC)
	streams := map[string][]engine.RunEventRecord{}
	names := map[string]string{}
	for i, c := range cases {
		id := fmt.Sprintf("case-%02d", i)
		names[id] = c.Name
		seq := int64(0)
		for j, e := range c.Events {
			seq++
			if e.Seq != 0 {
				seq = e.Seq
			}
			at := base.Add(time.Duration(j) * time.Second)
			if e.AtNs != 0 {
				at = base.Add(time.Duration(e.AtNs))
			}
			r := engine.RunEventRecord{RunSeq: seq, PersistedAt: base.Add(time.Duration(j)*time.Second + time.Millisecond)}
			r.RunID, r.TenantID, r.ProjectID, r.EnvironmentID, r.PlanID, r.PlanVersion = id, "t", "p", "e", "plan", "1"
			if e.Tenant != nil {
				r.TenantID, r.ProjectID, r.EnvironmentID = *e.Tenant, *e.Tenant, *e.Tenant
			}
			r.EventID, r.IdempotencyKey = fmt.Sprintf("%s-ev-%d", id, seq), fmt.Sprintf("%s-key-%d", id, seq)
			r.EventType, r.StepID, r.EmittedAt, r.Payload = e.Type, e.Step, at, e.Payload
			r.LogicalAttemptID, r.EngineAttemptID = max(e.Attempt, 1), max(e.Engine, 1)
			streams[id] = append(streams[id], r)
		}
	}
	srv := sftest.Start(t)
	s := openStore(t, srv.DSN("dvt", "projection_cases"), snowflake.Options{})
	t.Cleanup(func() { s.Close() })
	loadRaw(t, s, streams)
	sqlSnaps, err := s.ProjectAllSQL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for id := range streams {
		events, err := s.ListEvents(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(events) != len(streams[id]) {
			t.Fatalf("%s: %d events stored, %d written", names[id], len(events), len(streams[id]))
		}
		if d := engine.DiffSnapshots(sqlSnaps[id], engine.Project(id, events)); len(d) > 0 {
			storetest.ReportDiffs(t, names[id], d)
		}
	}
}
