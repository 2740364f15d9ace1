package runresults_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/runresults"
	"github.com/dvtrun/dvtrun/engine/runresults/runresultstest"
)

type ev struct {
	typ     engine.EventType
	step    string
	payload string
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// runLog turns evs into a run's log: runSeq 1.., emittedAt 100ms apart.
func runLog(t *testing.T, evs ...ev) []engine.RunEventRecord {
	t.Helper()
	out := make([]engine.RunEventRecord, len(evs))
	for i, e := range evs {
		w := engine.RunEventWrite{
			EventType: e.typ, EmittedAt: t0.Add(time.Duration(i) * 100 * time.Millisecond), RunID: "run-1",
			TenantID: "t", ProjectID: "p", EnvironmentID: "dev", PlanID: "shop", PlanVersion: "1",
			EngineAttemptID: 1, LogicalAttemptID: 1, StepID: e.step,
		}
		if e.payload != "" {
			w.Payload = json.RawMessage(e.payload)
		}
		key, err := engine.KeyOf(w).IdempotencyKey()
		if err != nil {
			t.Fatal(err)
		}
		w.IdempotencyKey = key
		out[i] = engine.RunEventRecord{RunEventWrite: w, RunSeq: int64(i + 1), PersistedAt: w.EmittedAt}
	}
	return out
}

const queued = `{"planRef": {"uri": "plan.yaml", "sha256": "ab", "planId": "shop", "planVersion": "1"}, "triggeredBy": "ann", "triggerSource": "manual"}`

func started(step, kind, rel string) ev {
	p := `{"kind": "` + kind + `"}`
	if rel != "" {
		p = `{"kind": "` + kind + `", "relation": "` + rel + `"}`
	}
	return ev{engine.StepStarted, step, p}
}

// want is what a test checks of one result.
type want struct {
	uniqueID, status string
	message          any // string or nil
	failures         any // float64 or nil
	relation         any
	queryID          any
	execSeconds      float64
}

func TestBuild(t *testing.T) {
	shopPlan := &plan.Plan{PlanID: "shop", PlanVersion: "1", Steps: []plan.Step{
		{ID: "seed.raw", Kind: plan.KindSeed, Path: "raw.csv"},
		{ID: "model.eph", Kind: plan.KindModel, Materialized: plan.MaterializedEphemeral, SQL: "select * from raw", DependsOn: []string{"seed.raw"}},
		{ID: "model.orders", Kind: plan.KindModel, Materialized: plan.MaterializedTable, SQL: "select * from eph", DependsOn: []string{"model.eph"}},
		{ID: "test.t_pass", Kind: plan.KindTest, SQL: "select 1 where 0", DependsOn: []string{"model.orders"}},
		{ID: "test.t_warn", Kind: plan.KindTest, Severity: plan.SeverityWarn, SQL: "select 1", DependsOn: []string{"model.orders"}},
		{ID: "test.t_fail", Kind: plan.KindTest, SQL: "select 1", DependsOn: []string{"model.orders"}},
		{ID: "test.t_error", Kind: plan.KindTest, SQL: "select nope", DependsOn: []string{"model.orders"}},
		{ID: "model.after", Kind: plan.KindModel, SQL: "select 1", DependsOn: []string{"test.t_error"}},
		{ID: "sql.slow", Kind: plan.KindSQL, SQL: "update orders set x = {{ secret('TOKEN') }}", Secrets: []plan.SecretRef{{Name: "TOKEN"}}},
	}}
	tests := []struct {
		name    string
		log     []ev
		plan    *plan.Plan
		want    []want
		elapsed float64
		closing int // index of the closing event, when not the last
		args    map[string]any
	}{
		{
			name: "passing run",
			log: []ev{
				{engine.RunQueued, "", queued},
				{engine.RunStarted, "", `{"threads": 4}`},
				started("seed.raw", "seed", "raw"),
				{engine.StepCompleted, "seed.raw", `{"rowsAffected": 3, "rowCount": 3, "durationMs": 100}`},
				started("model.orders", "model", "orders"),
				started("test.t_pass", "test", ""),
				{engine.StepCompleted, "model.orders", `{"rowCount": 3, "queryIds": ["q1", "q2"], "durationMs": 200}`},
				started("test.t_warn", "test", ""),
				{engine.StepCompleted, "test.t_warn", `{"failures": 2, "warning": "2 rows", "durationMs": 100}`},
				{engine.StepCompleted, "test.t_pass", `{"durationMs": 300}`},
				{engine.RunCompleted, "", `{"steps": 4, "artifacts": [{"uri": "file:///x", "kind": "dbt-run-results"}]}`},
			},
			plan: shopPlan,
			want: []want{
				{"seed.shop.raw", "success", "OK", nil, "raw", nil, 0.1},
				{"model.shop.orders", "success", "OK", nil, "orders", "q2", 0.2},
				{"test.shop.t_warn", "warn", "Got 2 results, configured to fail if != 0", 2.0, nil, nil, 0.1},
				{"test.shop.t_pass", "pass", nil, 0.0, nil, nil, 0.4},
			},
			elapsed: 0.9,
			args:    map[string]any{"which": "run", "threads": 4.0, "full_refresh": false},
		},
		{
			name: "failing run",
			log: []ev{
				{engine.RunQueued, "", `{"fullRefresh": true, "selection": {"select": ["+orders"], "exclude": ["t_pass"], "indirectSelection": "eager", "steps": ["x"]}}`},
				{engine.RunStarted, "", `{"threads": 2}`},
				started("test.t_fail", "test", ""),
				started("test.t_error", "test", ""),
				started("sql.slow", "sql", ""),
				{engine.StepFailed, "test.t_fail", `{"failures": 1, "durationMs": 5, "error": {"code": "STEP_FAILED", "message": "test test.t_fail returned 1 failing row(s)"}}`},
				{engine.StepFailed, "test.t_error", `{"queryIds": ["q9"], "durationMs": 5, "error": {"code": "STEP_FAILED", "message": "no such column: nope"}}`},
				{engine.StepSkipped, "model.after", `{"reason": "upstream step test.t_error failed"}`},
				{engine.RunCancelled, "", `{"reason": "operator"}`},
				// After the end: Policy A ignores it, and so does the document.
				{engine.StepCompleted, "sql.slow", `{"rowsAffected": 5, "durationMs": 1}`},
			},
			plan: nil,
			want: []want{
				{"test.shop.t_fail", "fail", "Got 1 result, configured to fail if != 0", 1.0, nil, nil, 0.3},
				{"test.shop.t_error", "error", "STEP_FAILED: no such column: nope", nil, nil, "q9", 0.3},
				{"model.shop.after", "skipped", "upstream step test.t_error failed", nil, nil, nil, 0},
				{"sql.shop.slow", "error", "the run ended while the step was running", nil, nil, nil, 0},
			},
			elapsed: 0.7,
			closing: 8,
			args:    map[string]any{"which": "run", "threads": 2.0, "full_refresh": true, "select": []any{"+orders"}, "exclude": []any{"t_pass"}, "indirect_selection": "eager"},
		},
		{
			name:    "adapter could not start",
			log:     []ev{{engine.RunQueued, "", queued}, {engine.RunFailed, "", `{"error": {"code": "ADAPTER_START_FAILED", "message": "down"}}`}},
			want:    nil,
			elapsed: 0,
			args:    map[string]any{"which": "run", "full_refresh": false},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log := runLog(t, tc.log...)
			doc := runresults.Build("run-1", log, tc.plan)
			data, err := doc.JSON()
			if err != nil {
				t.Fatal(err)
			}
			runresultstest.Validate(t, data)
			var got struct {
				Metadata    map[string]any   `json:"metadata"`
				Results     []map[string]any `json:"results"`
				ElapsedTime float64          `json:"elapsed_time"`
				Args        map[string]any   `json:"args"`
			}
			if err := json.Unmarshal(data, &got); err != nil {
				t.Fatal(err)
			}
			if got.Metadata["dbt_schema_version"] != runresults.SchemaVersion || got.Metadata["invocation_id"] != "run-1" {
				t.Errorf("metadata %v", got.Metadata)
			}
			closing := len(log) - 1
			if tc.closing > 0 {
				closing = tc.closing
			}
			if wantGen := log[closing].EmittedAt.Format("2006-01-02T15:04:05.000000Z"); got.Metadata["generated_at"] != wantGen {
				t.Errorf("generated_at %v, want the closing event's %s", got.Metadata["generated_at"], wantGen)
			}
			if diff := got.ElapsedTime - tc.elapsed; diff > 1e-9 || diff < -1e-9 {
				t.Errorf("elapsed_time %v, want %v", got.ElapsedTime, tc.elapsed)
			}
			delete(got.Args, "dvtrun")
			if !reflect.DeepEqual(got.Args, tc.args) {
				t.Errorf("args %v, want %v", got.Args, tc.args)
			}
			if len(got.Results) != len(tc.want) {
				t.Fatalf("%d results, want %d: %s", len(got.Results), len(tc.want), data)
			}
			for i, w := range tc.want {
				r := got.Results[i]
				ar, _ := r["adapter_response"].(map[string]any)
				exec, _ := r["execution_time"].(float64)
				if r["unique_id"] != w.uniqueID || r["status"] != w.status || r["message"] != w.message ||
					r["failures"] != w.failures || r["relation_name"] != w.relation || ar["query_id"] != w.queryID ||
					exec-w.execSeconds > 1e-9 || w.execSeconds-exec > 1e-9 {
					t.Errorf("result %d:\n got %v\nwant %+v", i, r, w)
				}
			}
		})
	}
}

// TestBuildCompiledCode: compiled_code is the SQL the step ran — with
// ephemeral models inlined, secrets as their {{ secret() }} reference —
// and null for seeds and without the plan; unique_id is the dbt node a step
// was imported from when the plan says so.
func TestBuildCompiledCode(t *testing.T) {
	shopPlan := &plan.Plan{PlanID: "shop", PlanVersion: "1", Steps: []plan.Step{
		{ID: "seed.raw", Kind: plan.KindSeed, Path: "raw.csv"},
		{ID: "model.eph", Kind: plan.KindModel, Materialized: plan.MaterializedEphemeral, SQL: "select * from raw", DependsOn: []string{"seed.raw"}},
		{ID: "model.orders", Kind: plan.KindModel, Materialized: plan.MaterializedTable, SQL: "select {{ secret('K') }} as k, * from eph", DependsOn: []string{"model.eph"}, Secrets: []plan.SecretRef{{Name: "K"}},
			DbtUniqueID: "model.jaffle.orders"},
	}}
	log := runLog(t,
		ev{engine.RunQueued, "", queued}, ev{engine.RunStarted, "", `{}`},
		started("seed.raw", "seed", "raw"), ev{engine.StepCompleted, "seed.raw", `{}`},
		started("model.orders", "model", "orders"), ev{engine.StepCompleted, "model.orders", `{}`},
		ev{engine.RunCompleted, "", `{}`},
	)
	for _, tc := range []struct {
		name string
		plan *plan.Plan
		want []any
		ids  []any
	}{
		{"with the plan", shopPlan, []any{nil, "WITH eph AS (\nselect * from raw\n)\nselect {{ secret('K') }} as k, * from eph"}, []any{"seed.shop.raw", "model.jaffle.orders"}},
		{"without", nil, []any{nil, nil}, []any{"seed.shop.raw", "model.shop.orders"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := runresults.Build("run-1", log, tc.plan).JSON()
			if err != nil {
				t.Fatal(err)
			}
			runresultstest.Validate(t, data)
			var got struct {
				Results []map[string]any `json:"results"`
			}
			if err := json.Unmarshal(data, &got); err != nil {
				t.Fatal(err)
			}
			for i, w := range tc.want {
				if got.Results[i]["compiled_code"] != w || got.Results[i]["unique_id"] != tc.ids[i] {
					t.Errorf("result %d compiled_code %q, unique_id %v, want %q and %v", i, got.Results[i]["compiled_code"], got.Results[i]["unique_id"], w, tc.ids[i])
				}
			}
		})
	}
}

// TestBuildIgnoresClosingPayload: the document the runner writes before
// the closing event is appended (no artifacts in it yet) and the one
// rebuilt from the log afterwards (with them) are the same bytes.
func TestBuildIgnoresClosingPayload(t *testing.T) {
	base := []ev{{engine.RunQueued, "", queued}, {engine.RunStarted, "", `{}`}, started("seed.raw", "seed", "raw"), {engine.StepCompleted, "seed.raw", `{}`}}
	before, err := runresults.Build("run-1", runLog(t, append(base, ev{engine.RunCompleted, "", `{"steps": 1}`})...), nil).JSON()
	if err != nil {
		t.Fatal(err)
	}
	after, err := runresults.Build("run-1", runLog(t, append(base, ev{engine.RunCompleted, "", `{"steps": 1, "artifacts": [{"uri": "file:///a", "kind": "dbt-run-results"}]}`})...), nil).JSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("the closing event's payload changed the document:\n%s\n%s", before, after)
	}
}
