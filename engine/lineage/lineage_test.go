package lineage_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/lineage"
	"github.com/dvtrun/dvtrun/engine/lineage/lineagetest"
	"github.com/dvtrun/dvtrun/engine/plan"
)

func TestNaming(t *testing.T) {
	for _, tc := range []struct {
		name              string
		n                 lineage.Naming
		namespace, ds, jb string
	}{
		{"snowflake", lineage.SnowflakeNaming("MyOrg-Analytics", "raw", "shop"), "snowflake://myorg-analytics", "RAW.SHOP.ORDERS", "RAW.SHOP.ORDERS"},
		{"postgres", lineage.PostgresNaming("db.example", 5433, "warehouse", ""), "postgres://db.example:5433", "warehouse.public.orders", "warehouse.public.orders"},
		{"postgres default port", lineage.PostgresNaming("db", 0, "w", "s"), "postgres://db:5432", "w.s.orders", "w.s.orders"},
		{"sqlite", lineage.SQLiteNaming("/var/dvt/warehouse.db"), "sqlite:///var/dvt/warehouse.db", "main.orders", "warehouse.main.orders"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.n.Namespace != tc.namespace || tc.n.DatasetName("orders") != tc.ds || tc.n.JobName("orders") != tc.jb {
				t.Errorf("namespace %q, dataset %q, job %q; want %q, %q, %q", tc.n.Namespace, tc.n.DatasetName("orders"), tc.n.JobName("orders"), tc.namespace, tc.ds, tc.jb)
			}
		})
	}
	pg := lineage.PostgresNaming("db", 5432, "w", "")
	if got := pg.DatasetName("marts.orders"); got != "w.marts.orders" || pg.JobName("marts.orders") != "w.marts.orders" {
		t.Errorf("a schema-qualified relation keeps its schema: %q", got)
	}
	rel := lineage.SQLiteNaming("rel/wh.db")
	if !strings.HasPrefix(rel.Namespace, "sqlite:///") || !strings.HasSuffix(rel.Namespace, "/rel/wh.db") {
		t.Errorf("a relative path is made absolute: %q", rel.Namespace)
	}
}

func TestRunIDs(t *testing.T) {
	const run = "0b1f5d1e-7a43-4d7e-9d8c-5a0c2b4e8f11"
	ids := map[string]string{
		"plan run":          lineage.PlanRunID(run),
		"step":              lineage.StepRunID(run, "model.orders", 1),
		"step, attempt 2":   lineage.StepRunID(run, "model.orders", 2),
		"other step":        lineage.StepRunID(run, "model.customers", 1),
		"other run":         lineage.StepRunID("0b1f5d1e-7a43-4d7e-9d8c-5a0c2b4e8f12", "model.orders", 1),
		"other run's plan":  lineage.PlanRunID("0b1f5d1e-7a43-4d7e-9d8c-5a0c2b4e8f12"),
		"ambiguous joining": lineage.StepRunID(run, "model.orders1", 1),
	}
	seen := map[string]string{}
	for what, id := range ids {
		u, err := uuid.Parse(id)
		if err != nil || u.Version() != 5 {
			t.Errorf("%s: %q is not a v5 UUID (%v)", what, id, err)
		}
		if other, dup := seen[id]; dup {
			t.Errorf("%s and %s share run id %s", what, other, id)
		}
		seen[id] = what
	}
	// Deterministic: the same inputs give the same id, across processes
	// (pinned: changing the id space would re-identify every past run).
	if got := lineage.StepRunID(run, "model.orders", 1); got != ids["step"] {
		t.Errorf("StepRunID is not deterministic: %s, then %s", ids["step"], got)
	}
	if got, want := lineage.PlanRunID(run), "be06de93-2c07-5ffb-b4f5-71881a9db8a2"; got != want {
		t.Errorf("PlanRunID(%s) = %s, was %s: every past run would get a new identity", run, got, want)
	}
	if got, want := ids["step"], "de215c9e-762d-5e43-a47e-cd73c859289e"; got != want {
		t.Errorf("StepRunID = %s, was %s: every past step run would get a new identity", got, want)
	}
}

// bundles serves plan bundles by run id.
type bundles map[string]*plan.Bundle

func (b bundles) RunBundle(_ context.Context, runID string) (*plan.Bundle, string, bool, error) {
	p, ok := b[runID]
	return p, "", ok, nil
}

func loadShop(t testing.TB) *plan.Bundle {
	t.Helper()
	dir := filepath.Join("..", "..", "plans", "shop")
	fsys := fstest.MapFS{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		rel, _ := filepath.Rel(dir, path)
		fsys[filepath.ToSlash(rel)] = &fstest.MapFile{Data: b}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := plan.LoadBundle(mapSource(fsys), "plan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type mapSource fstest.MapFS

func (m mapSource) ReadFile(name string) ([]byte, error) { return fstest.MapFS(m).ReadFile(name) }

const runID = "5e0c8a34-3f0e-4b9a-a5a8-7b0f2d9c1e01"

func rec(typ engine.EventType, step string, logical int, payload string) engine.RunEventRecord {
	r := engine.RunEventRecord{RunEventWrite: engine.RunEventWrite{
		EventID: uuid.NewString(), EventType: typ, EmittedAt: time.Date(2026, 11, 26, 15, 0, 0, 123456789, time.UTC),
		RunID: runID, PlanID: "shop", PlanVersion: "1", EngineAttemptID: 1, LogicalAttemptID: logical, StepID: step,
	}}
	if payload != "" {
		r.Payload = json.RawMessage(payload)
	}
	return r
}

// TestMapShop maps each kind of run event of a plans/shop run: which ones
// have an OpenLineage event, of what type, for which job, with which
// datasets and facets; every event validates against the vendored schemas.
func TestMapShop(t *testing.T) {
	ctx := context.Background()
	naming := lineage.SQLiteNaming("/data/wh.db")
	m, err := lineage.NewMapper(lineage.Options{Naming: naming, Plans: bundles{runID: loadShop(t)}, EngineVersion: "v1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	ds := func(rels ...string) []string {
		out := []string{}
		for _, r := range rels {
			out = append(out, naming.Namespace+" "+naming.DatasetName(r))
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		rec     engine.RunEventRecord
		olType  string // "": no event
		job     string
		inputs  []string
		outputs []string
		check   func(t *testing.T, ev map[string]any)
	}{
		{name: "queued", rec: rec(engine.RunQueued, "", 1, `{}`)},
		{name: "run started", rec: rec(engine.RunStarted, "", 1, `{}`), olType: "START", job: "shop", inputs: ds(), outputs: ds()},
		{name: "seed started", rec: rec(engine.StepStarted, "seed.raw_orders", 1, `{"kind":"seed","relation":"raw_orders"}`), olType: "START", job: "wh.main.raw_orders", inputs: ds(), outputs: ds("raw_orders")},
		{name: "seed completed", rec: rec(engine.StepCompleted, "seed.raw_orders", 1, `{"rowCount":12,"durationMs":3}`), olType: "COMPLETE", job: "wh.main.raw_orders", inputs: ds(), outputs: ds("raw_orders"),
			check: func(t *testing.T, ev map[string]any) {
				if n := dig(ev, "outputs", 0, "outputFacets", "outputStatistics", "rowCount"); n != 12.0 {
					t.Errorf("rowCount %v, want 12", n)
				}
			}},
		{name: "model started", rec: rec(engine.StepStarted, "model.orders_enriched", 1, `{"kind":"model","relation":"orders_enriched"}`), olType: "START", job: "wh.main.orders_enriched",
			inputs: ds("stg_orders", "stg_products"), outputs: ds("orders_enriched"),
			check: func(t *testing.T, ev map[string]any) {
				if q, _ := dig(ev, "job", "facets", "sql", "query").(string); !strings.Contains(q, "stg_orders") {
					t.Errorf("the sql facet is the model's file: %q", q)
				}
				if dig(ev, "outputs", 0, "outputFacets") != nil {
					t.Error("a START has no output statistics")
				}
				if got := dig(ev, "job", "facets", "jobType"); got.(map[string]any)["integration"] != "DVTRUN" || got.(map[string]any)["processingType"] != "BATCH" || got.(map[string]any)["jobType"] != "MODEL" {
					t.Errorf("jobType %v", got)
				}
				if v := dig(ev, "run", "facets", "processing_engine", "version"); v != "v1.2.3" {
					t.Errorf("processing_engine version %v", v)
				}
			}},
		{name: "model completed", rec: rec(engine.StepCompleted, "model.orders_enriched", 1, `{"rowCount":40,"queryIds":["q-1","q-2"],"sql":"create table orders_enriched as select 1"}`), olType: "COMPLETE", job: "wh.main.orders_enriched",
			inputs: ds("stg_orders", "stg_products"), outputs: ds("orders_enriched"),
			check: func(t *testing.T, ev map[string]any) {
				if q := dig(ev, "run", "facets", "externalQuery", "externalQueryId"); q != "q-2" {
					t.Errorf("externalQueryId %v, want the last query q-2", q)
				}
				if q := dig(ev, "job", "facets", "sql", "query"); q != "create table orders_enriched as select 1" {
					t.Errorf("the sql facet is the SQL the payload says ran: %v", q)
				}
			}},
		{name: "model failed", rec: rec(engine.StepFailed, "model.customer_summary", 2, `{"error":{"code":"STEP_FAILED","message":"no such table: x"}}`), olType: "FAIL", job: "wh.main.customer_summary",
			inputs: ds("stg_customers", "orders_enriched"), outputs: ds("customer_summary"),
			check: func(t *testing.T, ev map[string]any) {
				if msg := dig(ev, "run", "facets", "errorMessage", "message"); msg != "STEP_FAILED: no such table: x" {
					t.Errorf("errorMessage %v", msg)
				}
				if id := dig(ev, "run", "runId"); id != lineage.StepRunID(runID, "model.customer_summary", 2) {
					t.Errorf("runId %v is not logical attempt 2's", id)
				}
			}},
		{name: "step cancelled", rec: rec(engine.StepFailed, "model.product_sales", 1, `{"error":{"code":"STEP_CANCELLED","message":"run cancelled"}}`), olType: "ABORT", job: "wh.main.product_sales",
			inputs: ds("stg_products", "orders_enriched"), outputs: ds("product_sales")},
		{name: "sql step", rec: rec(engine.StepStarted, "sql.daily_revenue", 1, `{"kind":"sql"}`), olType: "START", job: "wh.main.daily_revenue", inputs: ds("orders_enriched"), outputs: ds(),
			check: func(t *testing.T, ev map[string]any) {
				if q, _ := dig(ev, "job", "facets", "sql", "query").(string); !strings.Contains(q, "insert into daily_revenue") {
					t.Errorf("sql facet %q", q)
				}
			}},
		{name: "test step", rec: rec(engine.StepStarted, "test.unique_stg_customers_customer_id", 1, `{"kind":"test"}`)},
		{name: "skipped", rec: rec(engine.StepSkipped, "model.product_sales", 1, `{"reason":"upstream failed"}`)},
		{name: "signal", rec: rec(engine.SignalAccepted, "", 1, `{}`)},
		{name: "run failed", rec: rec(engine.RunFailed, "", 1, `{"error":{"code":"STEP_FAILED","message":"1 step(s) failed: model.customer_summary"}}`), olType: "FAIL", job: "shop", inputs: ds(), outputs: ds(),
			check: func(t *testing.T, ev map[string]any) {
				if dig(ev, "run", "facets", "errorMessage", "message") == nil || dig(ev, "run", "facets", "parent") != nil {
					t.Errorf("run facets %v", dig(ev, "run", "facets"))
				}
			}},
		{name: "run cancelled", rec: rec(engine.RunCancelled, "", 1, `{}`), olType: "ABORT", job: "shop", inputs: ds(), outputs: ds()},
		{name: "run completed", rec: rec(engine.RunCompleted, "", 1, `{"steps":13}`), olType: "COMPLETE", job: "shop", inputs: ds(), outputs: ds()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := m.Map(ctx, tc.rec)
			if err != nil {
				t.Fatal(err)
			}
			if tc.olType == "" {
				if ev != nil {
					t.Fatalf("want no event, got %+v", ev)
				}
				return
			}
			b, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			if err := lineagetest.Validate(b); err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			var got map[string]any
			json.Unmarshal(b, &got)
			if got["eventType"] != tc.olType || dig(got, "job", "name") != tc.job || dig(got, "job", "namespace") != lineage.DefaultNamespace {
				t.Errorf("%v %v/%v, want %s %s/%s", got["eventType"], dig(got, "job", "namespace"), dig(got, "job", "name"), tc.olType, lineage.DefaultNamespace, tc.job)
			}
			if got["eventTime"] != "2026-11-26T15:00:00.123456789Z" {
				t.Errorf("eventTime %v is not the event's emittedAt", got["eventTime"])
			}
			if in, out := names(got["inputs"]), names(got["outputs"]); !slices.Equal(in, tc.inputs) || !slices.Equal(out, tc.outputs) {
				t.Errorf("inputs %v outputs %v; want %v %v", in, out, tc.inputs, tc.outputs)
			}
			if tc.rec.StepID != "" {
				parent := dig(got, "run", "facets", "parent").(map[string]any)
				want := map[string]any{"runId": lineage.PlanRunID(runID)}
				if !mapsEqual(parent["run"], want) || !mapsEqual(dig(parent, "root", "run"), want) || dig(parent, "job", "name") != "shop" || dig(parent, "root", "job", "name") != "shop" {
					t.Errorf("parent facet %v does not point at the plan run %s", parent, want["runId"])
				}
				if id := dig(got, "run", "runId"); tc.olType != "FAIL" && id != lineage.StepRunID(runID, tc.rec.StepID, 1) {
					t.Errorf("runId %v", id)
				}
			} else if id := dig(got, "run", "runId"); id != lineage.PlanRunID(runID) {
				t.Errorf("plan runId %v", id)
			}
			if tc.check != nil {
				tc.check(t, got)
			}
			// Redelivery: a new mapper (another process) gives the same bytes.
			m2, _ := lineage.NewMapper(lineage.Options{Naming: naming, Plans: bundles{runID: loadShop(t)}, EngineVersion: "v1.2.3"})
			ev2, err := m2.Map(ctx, tc.rec)
			if err != nil {
				t.Fatal(err)
			}
			if b2, _ := json.Marshal(ev2); string(b2) != string(b) {
				t.Errorf("mapped again:\n%s\nfirst:\n%s", b2, b)
			}
		})
	}
}

// TestMapEphemeralAndUnstored: inputs read through an ephemeral model
// reach its own inputs; a run without a stored plan has its plan job only.
func TestMapEphemeralAndUnstored(t *testing.T) {
	ctx := context.Background()
	planYAML := `planId: eph
planVersion: "1"
schemaVersion: "1"
steps:
  - {id: seed.raw, kind: seed, path: raw.csv}
  - {id: model.base, kind: model, materialized: ephemeral, sql: select * from raw, dependsOn: [seed.raw]}
  - {id: model.final, kind: model, materialized: table, sql: select * from base, dependsOn: [model.base]}
`
	b, err := plan.LoadBundle(mapSource(fstest.MapFS{"plan.yaml": {Data: []byte(planYAML)}, "raw.csv": {Data: []byte("id\n1\n")}}), "plan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	naming := lineage.SnowflakeNaming("org-acct", "db", "sc")
	m, _ := lineage.NewMapper(lineage.Options{Naming: naming, Plans: bundles{runID: b}})
	ev, err := m.Map(ctx, rec(engine.StepStarted, "model.final", 1, `{}`))
	if err != nil || ev == nil {
		t.Fatalf("%v %v", ev, err)
	}
	if len(ev.Inputs) != 1 || ev.Inputs[0].Name != "DB.SC.RAW" || ev.Job.Name != "DB.SC.FINAL" || ev.Inputs[0].Namespace != "snowflake://org-acct" {
		t.Errorf("job %s inputs %+v", ev.Job.Name, ev.Inputs)
	}
	if ev, err := m.Map(ctx, rec(engine.StepStarted, "model.base", 1, `{}`)); err != nil || ev != nil {
		t.Errorf("an ephemeral model is no job: %+v %v", ev, err)
	}

	unstored, _ := lineage.NewMapper(lineage.Options{Naming: naming, Plans: bundles{}})
	if ev, err := unstored.Map(ctx, rec(engine.StepStarted, "model.final", 1, `{"kind":"model","relation":"final"}`)); err != nil || ev != nil {
		t.Errorf("a step of an unstored plan: %+v %v", ev, err)
	}
	if ev, err := unstored.Map(ctx, rec(engine.RunStarted, "", 1, `{}`)); err != nil || ev == nil || ev.Job.Name != "shop" {
		t.Errorf("the plan run of an unstored plan: %+v %v", ev, err)
	}
}

// TestMapSources: the source tables a step reads through {{ source(…) }}
// are inputs too, its own and those of the ephemeral models it reads,
// named in the warehouse's database unless the source names its own.
func TestMapSources(t *testing.T) {
	ctx := context.Background()
	planYAML := `planId: src
planVersion: "1"
schemaVersion: "1"
sources:
  - {name: raw, tables: [orders, customers]}
  - {name: crm, database: CRMDB, schema: PUBLIC, tables: [accounts]}
steps:
  - {id: model.base, kind: model, materialized: ephemeral, sql: "select * from {{ source('raw', 'customers') }}"}
  - {id: model.final, kind: model, materialized: table, sql: "select * from {{ source('raw', 'orders') }} o join {{ ref('base') }} b using (id) join {{ source('crm', 'accounts') }} a using (id) union all select * from {{ source('raw', 'orders') }}"}
`
	b, err := plan.LoadBundle(mapSource(fstest.MapFS{"plan.yaml": {Data: []byte(planYAML)}}), "plan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := lineage.NewMapper(lineage.Options{Naming: lineage.SnowflakeNaming("org-acct", "db", "sc"), Plans: bundles{runID: b}})
	ev, err := m.Map(ctx, rec(engine.StepStarted, "model.final", 1, `{}`))
	if err != nil || ev == nil {
		t.Fatalf("%v %v", ev, err)
	}
	var got []string
	for _, in := range ev.Inputs {
		got = append(got, in.Name)
	}
	want := []string{"DB.RAW.ORDERS", "CRMDB.PUBLIC.ACCOUNTS", "DB.RAW.CUSTOMERS"}
	if !slices.Equal(got, want) {
		t.Errorf("inputs %q, want %q", got, want)
	}
}

// TestValidateRejects: the validator catches what the schemas forbid, in
// the event and in a facet.
func TestValidateRejects(t *testing.T) {
	m, _ := lineage.NewMapper(lineage.Options{Naming: lineage.SQLiteNaming("/w.db"), Plans: bundles{runID: loadShop(t)}})
	ev, err := m.Map(context.Background(), rec(engine.StepCompleted, "model.orders_enriched", 1, `{"rowCount":3,"queryIds":["q"]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		mutate     func(e *lineage.Event)
	}{
		{"run id not a uuid", "runId", func(e *lineage.Event) { e.Run.RunID = "run-1" }},
		{"event time not a date-time", "eventTime", func(e *lineage.Event) { e.EventTime = "yesterday" }},
		{"unknown event type", "eventType", func(e *lineage.Event) { e.EventType = "DONE" }},
		{"facet without _producer", "_producer", func(e *lineage.Event) { delete(e.Job.Facets["jobType"].(map[string]any), "_producer") }},
		{"jobType without integration", "integration", func(e *lineage.Event) { delete(e.Job.Facets["jobType"].(map[string]any), "integration") }},
		{"rowCount not an integer", "rowCount", func(e *lineage.Event) {
			e.Outputs[0].OutputFacets["outputStatistics"].(map[string]any)["rowCount"] = "3"
		}},
		{"externalQuery without source", "source", func(e *lineage.Event) { delete(e.Run.Facets["externalQuery"].(map[string]any), "source") }},
		{"parent without job", "job", func(e *lineage.Event) { delete(e.Run.Facets["parent"].(map[string]any), "job") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := json.Marshal(ev)
			var e lineage.Event
			json.Unmarshal(b, &e)
			tc.mutate(&e)
			b, _ = json.Marshal(e)
			if err := lineagetest.Validate(b); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want one naming %s", err, tc.want)
			}
		})
	}
}

func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			a, ok := v.([]any)
			if !ok || k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

func names(v any) []string {
	out := []string{}
	for _, d := range v.([]any) {
		m := d.(map[string]any)
		out = append(out, m["namespace"].(string)+" "+m["name"].(string))
	}
	return out
}

func mapsEqual(a any, b map[string]any) bool {
	m, ok := a.(map[string]any)
	if !ok || len(m) != len(b) {
		return false
	}
	for k, v := range b {
		if m[k] != v {
			return false
		}
	}
	return true
}

// onTarget serves one bundle as run on target.
type onTarget struct {
	b      *plan.Bundle
	target string
}

func (o onTarget) RunBundle(context.Context, string) (*plan.Bundle, string, bool, error) {
	return o.b, o.target, true, nil
}

// TestMapTargets: a run's datasets are named after the warehouse of the
// target it was started on; without one (or one no longer configured),
// after the default warehouse.
func TestMapTargets(t *testing.T) {
	dev, prod := lineage.SQLiteNaming("/dev/wh.db"), lineage.SnowflakeNaming("org-prod", "ANALYTICS", "PROD")
	for _, tc := range []struct {
		target, namespace, output string
	}{
		{"prod", "snowflake://org-prod", "ANALYTICS.PROD.ORDERS_ENRICHED"},
		{"", "sqlite:///dev/wh.db", "main.orders_enriched"},
		{"gone", "sqlite:///dev/wh.db", "main.orders_enriched"},
	} {
		m, _ := lineage.NewMapper(lineage.Options{Naming: dev, Targets: map[string]lineage.Naming{"prod": prod}, Plans: onTarget{loadShop(t), tc.target}})
		ev, err := m.Map(context.Background(), rec(engine.StepStarted, "model.orders_enriched", 1, `{}`))
		if err != nil || ev == nil || len(ev.Outputs) != 1 {
			t.Fatalf("target %q: %+v %v", tc.target, ev, err)
		}
		if o := ev.Outputs[0]; o.Namespace != tc.namespace || o.Name != tc.output || ev.Inputs[0].Namespace != tc.namespace {
			t.Errorf("target %q: output %+v, inputs %+v; want %s %s", tc.target, o, ev.Inputs, tc.namespace, tc.output)
		}
	}
}
