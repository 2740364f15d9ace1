package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/lineage"
	"github.com/dvtrun/dvtrun/engine/lineage/lineagetest"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/store/postgres/pgtest"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
)

// olReceiver is an OpenLineage endpoint (Marquez's POST /api/v1/lineage):
// it records every request and answers 503 to those fail picks.
type olReceiver struct {
	mu      sync.Mutex
	fail    func(n int) bool
	all     [][]byte // every request body, in arrival order
	ok      [][]byte // those answered 2xx
	badAuth int
}

func (rc *olReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if r.URL.Path != "/api/v1/lineage" || r.Header.Get("Authorization") != "Bearer ol-s3cret" || r.Header.Get("Content-Type") != "application/json" {
		rc.badAuth++
		http.Error(w, "no", http.StatusUnauthorized)
		return
	}
	rc.all = append(rc.all, body)
	if rc.fail(len(rc.all)) {
		http.Error(w, "try again", http.StatusServiceUnavailable)
		return
	}
	rc.ok = append(rc.ok, body)
}

// deliverAll runs `outbox deliver --once` until nothing is pending: each
// pass past the sinks' 10ms backoff, at most 100 passes.
func deliverAll(t *testing.T, h *harness, cfg string) {
	t.Helper()
	for range 100 {
		r := h.run("outbox", "deliver", "--config", cfg, "--once")
		if r.code == 0 && strings.Contains(r.stdout, "left: 0 pending, 0 dead") {
			return
		}
		if strings.Contains(r.stdout, " dead") && !strings.Contains(r.stdout, ", 0 dead") {
			t.Fatalf("a delivery died: %+v", r)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the outbox still had pending deliveries after 100 passes")
}

func fileLines(t *testing.T, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		out = append(out, bytes.Clone(sc.Bytes()))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// byPlanRun groups events by the plan run they belong to (their own run
// id for a plan job, their parent's for a step job), keeping their order.
func byPlanRun(t *testing.T, raw [][]byte) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, b := range raw {
		var e lineagetest.Event
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatal(err)
		}
		id := e.Run.RunID
		if e.Run.Facets.Parent != nil {
			id = e.Run.Facets.Parent.Run.RunID
		}
		out[id] = append(out[id], string(b))
	}
	return out
}

// checkLineage checks one process's events for the runs of plans: schema
// and run structure (lineagetest.Check), then, from the plan alone, that
// there is a plan job per run and a job per seed, model (not ephemeral) and
// sql step it ran, each named db.schema.table with the DAG's inputs and
// outputs in the warehouse's namespace, START and one end each; and the
// rows of seeds (from their CSV). It returns the events by job name.
// Steps in skipped never ran: they must have no job.
func checkLineage(t *testing.T, raw [][]byte, warehouse string, plans []*plan.Plan, seedRows map[string]int64, skipped ...string) map[string][]lineagetest.Event {
	t.Helper()
	evs, err := lineagetest.Check(raw)
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(warehouse)
	ns := "sqlite://" + filepath.ToSlash(abs)
	stem := strings.TrimSuffix(filepath.Base(abs), filepath.Ext(abs))
	byJob := map[string][]lineagetest.Event{}
	for _, e := range evs {
		byJob[e.Job.Name] = append(byJob[e.Job.Name], e)
	}
	want := map[string]bool{}
	for _, p := range plans {
		want[p.PlanID] = true
		if es := byJob[p.PlanID]; len(es) != 2 || es[0].EventType != "START" || es[0].Job.Namespace != "analytics" {
			t.Errorf("plan job %s: %+v, want START and its end in namespace analytics", p.PlanID, es)
		}
		steps := map[string]plan.Step{}
		for _, s := range p.Steps {
			steps[s.ID] = s
		}
		for _, s := range p.Steps {
			builds := s.Kind == plan.KindSeed || (s.Kind == plan.KindModel && s.Materialized != plan.MaterializedEphemeral)
			if !builds && s.Kind != plan.KindSQL {
				continue
			}
			job := stem + ".main." + s.Relation()
			es := byJob[job]
			if slices.Contains(skipped, s.ID) {
				continue // not wanted: byJob must not have it
			}
			want[job] = true
			if len(es) < 1 || es[0].EventType != "START" {
				t.Errorf("step %s (job %s): %d events, want a START first", s.ID, job, len(es))
				continue
			}
			var inputs []lineagetest.Name
			for _, d := range s.DependsOn {
				if ds := steps[d]; ds.Kind == plan.KindSeed || ds.Kind == plan.KindModel {
					inputs = append(inputs, lineagetest.Name{Namespace: ns, Name: "main." + ds.Relation()})
				}
			}
			var outputs []lineagetest.Name
			if builds {
				outputs = []lineagetest.Name{{Namespace: ns, Name: "main." + s.Relation()}}
			}
			for _, e := range es {
				if !slices.Equal(e.Inputs, inputs) || !slices.Equal(e.Outputs, outputs) {
					t.Errorf("%s %s: inputs %v outputs %v, want %v %v", job, e.EventType, e.Inputs, e.Outputs, inputs, outputs)
				}
			}
		}
	}
	for job := range byJob {
		if !want[job] {
			t.Errorf("job %s is no plan and no step that builds or runs SQL", job)
		}
	}
	for rel, n := range seedRows {
		es := byJob[stem+".main."+rel]
		var got struct {
			Outputs []struct {
				OutputFacets struct {
					OutputStatistics struct {
						RowCount int64 `json:"rowCount"`
					} `json:"outputStatistics"`
				} `json:"outputFacets"`
			} `json:"outputs"`
		}
		for i, b := range raw {
			if evs[i].Job.Name == stem+".main."+rel && evs[i].EventType == "COMPLETE" {
				json.Unmarshal(b, &got)
			}
		}
		if len(es) != 2 || len(got.Outputs) != 1 || got.Outputs[0].OutputFacets.OutputStatistics.RowCount != n {
			t.Errorf("seed %s: %d events, its COMPLETE's outputs %+v; want %d rows", rel, len(es), got.Outputs, n)
		}
	}
	return byJob
}

func csvRows(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return int64(bytes.Count(bytes.TrimSpace(b), []byte("\n"))) // lines after the header
}

// TestOpenLineageSinks runs plans/shop and a plan with a failing model,
// then delivers both runs to an OpenLineage server that fails the first
// three requests and one later, and to a file. The server gets every event
// once, each failed request's body again unchanged, in the file's order per
// run; the events validate and match the plans' DAGs. On a SQLite and a
// Postgres state store (the plans come from the store's bundles).
func TestOpenLineageSinks(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			h := newHarness(t)
			if store == "postgres" {
				h.env["DVT_STORE"] = pgtest.URL(t)
			}
			testOpenLineageSinks(t, h)
		})
	}
}

func testOpenLineageSinks(t *testing.T, h *harness) {
	shop := filepath.Join(repoRoot(t), "plans", "shop", "plan.yaml")
	if r := h.run("run", shop); r.code != 0 {
		t.Fatalf("run shop: %+v", r)
	}
	if r := h.run("run", fixture("failing", "plan.yaml")); r.code != exitFailed {
		t.Fatalf("run failing: %+v", r)
	}
	rc := &olReceiver{fail: func(n int) bool { return n <= 3 || n == 20 }}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	cfg := filepath.Join(h.dir, "dvt.yaml")
	file := filepath.Join(h.dir, "lineage.jsonl")
	text := fmt.Sprintf(`sinks:
  - name: lineage
    openlineage: {url: %q, apiKeyEnv: OL_TOKEN, namespace: analytics, timeout: 5s}
    retry: {backoff: 10ms, maxBackoff: 10ms, maxAttempts: 20}
  - name: lineage-file
    openlineage: {path: %q, namespace: analytics}
`, srv.URL+"/", file)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	wantError(t, h.run("outbox", "deliver", "--config", cfg, "--once"), 2, "CONFIG_INVALID", "OL_TOKEN is empty or unset")
	h.env["OL_TOKEN"] = "ol-s3cret"
	deliverAll(t, h, cfg)

	lines := fileLines(t, file)
	rc.mu.Lock()
	all, ok, badAuth := rc.all, rc.ok, rc.badAuth
	rc.mu.Unlock()
	if badAuth != 0 || len(all) != len(ok)+4 {
		t.Fatalf("%d requests (%d refused for path or token), %d accepted: want 4 failures", len(all), badAuth, len(ok))
	}
	// Every event once, the failed ones sent again byte for byte.
	seen := map[string]bool{}
	for _, b := range ok {
		if seen[string(b)] {
			t.Fatalf("delivered twice: %s", b)
		}
		seen[string(b)] = true
	}
	for _, n := range []int{0, 1, 2, 19} {
		if !seen[string(all[n])] {
			t.Errorf("request %d failed and was never delivered as it was: %s", n+1, all[n])
		}
	}
	// The server and the file agree event for event, in order per run.
	srvRuns, fileRuns := byPlanRun(t, ok), byPlanRun(t, lines)
	if len(srvRuns) != 2 || len(fileRuns) != 2 {
		t.Fatalf("%d runs at the server, %d in the file; want 2", len(srvRuns), len(fileRuns))
	}
	for id, evs := range fileRuns {
		if !slices.Equal(srvRuns[id], evs) {
			t.Errorf("run %s: the server got\n%s\nthe file has\n%s", id, strings.Join(srvRuns[id], "\n"), strings.Join(evs, "\n"))
		}
	}

	shopPlan, _, err := plan.Load(osSource{}, shop)
	if err != nil {
		t.Fatal(err)
	}
	failing, _, err := plan.Load(osSource{}, fixture("failing", "plan.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	seeds := map[string]int64{"customers": csvRows(t, fixture("failing", "customers.csv"))}
	for _, s := range shopPlan.Steps {
		if s.Kind == plan.KindSeed {
			seeds[s.Relation()] = csvRows(t, filepath.Join(filepath.Dir(shop), s.Path))
		}
	}
	byJob := checkLineage(t, lines, h.warehousePath(), []*plan.Plan{shopPlan, failing}, seeds, "model.downstream")

	// The failure: the model FAILs with the warehouse's error, the run
	// FAILs, and the skipped dependent never starts.
	wh := strings.TrimSuffix(filepath.Base(h.warehousePath()), ".db")
	broken := byJob[wh+".main.broken"]
	if len(broken) != 2 || broken[1].EventType != "FAIL" {
		t.Errorf("model.broken: %+v", broken)
	} else if msg := errorMessage(t, lines, broken[1].Run.RunID, "FAIL"); !strings.Contains(msg, "no_such_table") {
		t.Errorf("model.broken's errorMessage %q", msg)
	}
	if es := byJob["cli_failing"]; len(es) != 2 || es[1].EventType != "FAIL" {
		t.Errorf("the failing run: %+v", es)
	}
	if es := byJob["shop"]; len(es) != 2 || es[1].EventType != "COMPLETE" {
		t.Errorf("the shop run: %+v", es)
	}
}

func errorMessage(t *testing.T, raw [][]byte, runID, typ string) string {
	t.Helper()
	for _, b := range raw {
		var e struct {
			EventType string `json:"eventType"`
			Run       struct {
				RunID  string `json:"runId"`
				Facets struct {
					ErrorMessage struct {
						Message string `json:"message"`
					} `json:"errorMessage"`
				} `json:"facets"`
			} `json:"run"`
		}
		json.Unmarshal(b, &e)
		if e.Run.RunID == runID && e.EventType == typ {
			return e.Run.Facets.ErrorMessage.Message
		}
	}
	return ""
}

// TestOpenLineageJaffleShop imports dbt's jaffle_shop (the reference
// manifest), runs it and checks the OpenLineage file it delivers to.
func TestOpenLineageJaffleShop(t *testing.T) {
	t.Parallel()
	ref, manifest := jaffleReference(t)
	h := newHarness(t)
	planFile := filepath.Join(h.dir, "jaffle_shop.yaml")
	if r := h.run("plan", "import-dbt", manifest, "--project-dir", filepath.Join(ref, "jaffle_shop"), "-o", planFile); r.code != 0 {
		t.Fatalf("import: exit %d %s", r.code, r.stderr)
	}
	if r := h.run("run", planFile); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	cfg := filepath.Join(h.dir, "dvt.yaml")
	file := filepath.Join(h.dir, "lineage.jsonl")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "sinks:\n  - name: lineage\n    openlineage: {path: %q, namespace: analytics}\n", file), 0o644); err != nil {
		t.Fatal(err)
	}
	deliverAll(t, h, cfg)
	p, _, err := plan.Load(osSource{}, planFile)
	if err != nil {
		t.Fatal(err)
	}
	byJob := checkLineage(t, fileLines(t, file), h.warehousePath(), []*plan.Plan{p}, map[string]int64{"raw_customers": 100, "raw_orders": 99, "raw_payments": 113})
	// dbt's DAG: customers reads the three staging models (jaffle_shop's customers.sql).
	wh := strings.TrimSuffix(filepath.Base(h.warehousePath()), ".db")
	var names []string
	if es := byJob[wh+".main.customers"]; len(es) == 2 {
		for _, in := range es[0].Inputs {
			names = append(names, in.Name)
		}
	}
	slices.Sort(names)
	if want := []string{"main.stg_customers", "main.stg_orders", "main.stg_payments"}; !slices.Equal(names, want) {
		t.Errorf("customers reads %v, want %v", names, want)
	}
}

// TestOpenLineageOnSnowflake runs plans/shop with its warehouse on the
// Snowflake-protocol test server: datasets are snowflake://<account> and
// DB.SCHEMA.TABLE (upper-case, as Snowflake resolves dvtrun's unquoted
// names), and each COMPLETE's externalQuery is the last query id its
// StepCompleted recorded.
func TestOpenLineageOnSnowflake(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a Snowflake-protocol test server")
	}
	wh := sftest.Start(t)
	h := newHarness(t)
	h.env["DVT_TARGET_PATH"] = filepath.Join(h.dir, "target")
	h.env["DVT_WAREHOUSE"] = "snowflake://" + wh.DSN("ANALYTICS", "PUBLIC")
	shop := filepath.Join(repoRoot(t), "plans", "shop", "plan.yaml")
	if r := h.run("run", shop); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	cfg := filepath.Join(h.dir, "dvt.yaml")
	file := filepath.Join(h.dir, "lineage.jsonl")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "sinks:\n  - name: lineage\n    openlineage: {path: %q}\n", file), 0o644); err != nil {
		t.Fatal(err)
	}
	deliverAll(t, h, cfg)
	raw := fileLines(t, file)
	evs, err := lineagetest.Check(raw)
	if err != nil {
		t.Fatal(err)
	}
	// The last query id of each step, from the log.
	lastQuery := map[string]string{}
	for _, e := range h.events(h.onlyRun()) {
		var p struct {
			QueryIDs []string `json:"queryIds"`
		}
		if e.EventType == engine.StepCompleted && json.Unmarshal(e.Payload, &p) == nil && len(p.QueryIDs) > 0 {
			lastQuery[e.StepID] = p.QueryIDs[len(p.QueryIDs)-1]
		}
	}
	checked := 0
	for i, e := range evs {
		if !strings.HasPrefix(e.Job.Name, "ANALYTICS.PUBLIC.") && e.Job.Name != "shop" {
			t.Errorf("job %q is not ANALYTICS.PUBLIC.<TABLE>", e.Job.Name)
		}
		for _, d := range slices.Concat(e.Inputs, e.Outputs) {
			if d.Namespace != "snowflake://sftest" || !strings.HasPrefix(d.Name, "ANALYTICS.PUBLIC.") || d.Name != strings.ToUpper(d.Name) {
				t.Errorf("dataset %v is not snowflake://sftest ANALYTICS.PUBLIC.<TABLE>", d)
			}
		}
		if e.EventType != "COMPLETE" || e.Job.Name == "shop" {
			continue
		}
		var q struct {
			Run struct {
				Facets struct {
					ExternalQuery struct {
						ID     string `json:"externalQueryId"`
						Source string `json:"source"`
					} `json:"externalQuery"`
				} `json:"facets"`
			} `json:"run"`
		}
		json.Unmarshal(raw[i], &q)
		stepID := ""
		for id := range lastQuery {
			if strings.EqualFold("ANALYTICS.PUBLIC."+strings.SplitN(id, ".", 2)[1], e.Job.Name) {
				stepID = id
			}
		}
		if got := q.Run.Facets.ExternalQuery; stepID == "" || got.ID != lastQuery[stepID] || got.Source != "snowflake" {
			t.Errorf("%s: externalQuery %+v, want the last query id %q of its step", e.Job.Name, got, lastQuery[stepID])
		}
		checked++
	}
	if checked != 10 {
		t.Errorf("%d step COMPLETEs carry a query id, want the 3 seeds, 6 models and the sql step", checked)
	}
}

// TestOpenLineageRetry: `dvtrun retry` after a fix is a new plan run, and
// the retried model a new run of the same job under it: the job has a FAIL
// run (under the first plan run) and a COMPLETE run (under the second),
// with different run ids. The retry runs the fixed plan, whose SQL the
// second run's facet shows.
func TestOpenLineageRetry(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	planFile := retryFixture(t)
	r := h.run("run", "--threads", "1", planFile)
	wantError(t, r, exitFailed, "STEP_FAILED", "model.flaky")
	parent := runIDFrom(t, r.stdout)
	fixRetryFixture(t, planFile)
	if r := h.run("retry", parent, planFile); r.code != 0 {
		t.Fatalf("retry: %+v", r)
	}
	cfg := filepath.Join(h.dir, "dvt.yaml")
	file := filepath.Join(h.dir, "lineage.jsonl")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "sinks:\n  - name: lineage\n    openlineage: {path: %q}\n", file), 0o644); err != nil {
		t.Fatal(err)
	}
	deliverAll(t, h, cfg)
	raw := fileLines(t, file)
	evs, err := lineagetest.Check(raw)
	if err != nil {
		t.Fatal(err)
	}
	type stepRun struct{ parent, last, sql string }
	runs := map[string]*stepRun{} // model.flaky's runs by run id
	var order []string
	for i, e := range evs {
		if e.Job.Name != "warehouse.main.flaky" {
			continue
		}
		var f struct {
			Job struct {
				Facets struct {
					SQL struct {
						Query string `json:"query"`
					} `json:"sql"`
				} `json:"facets"`
			} `json:"job"`
		}
		json.Unmarshal(raw[i], &f)
		sr := runs[e.Run.RunID]
		if sr == nil {
			sr = &stepRun{parent: e.Run.Facets.Parent.Run.RunID}
			runs[e.Run.RunID] = sr
			order = append(order, e.Run.RunID)
		}
		sr.last, sr.sql = e.EventType, f.Job.Facets.SQL.Query
	}
	if len(order) != 2 {
		t.Fatalf("model.flaky has %d runs, want 2 (the failure and the retry)", len(order))
	}
	// Runs are delivered in runId order, not in the order they ran: the
	// first is the one under the failed run's plan run.
	first, second := runs[order[0]], runs[order[1]]
	if second.parent == lineage.PlanRunID(parent) {
		first, second = second, first
	}
	if first.parent != lineage.PlanRunID(parent) || first.last != "FAIL" || second.last != "COMPLETE" || first.parent == second.parent {
		t.Errorf("model.flaky's runs: %+v then %+v; want FAIL then COMPLETE under two plan runs", first, second)
	}
	if !strings.Contains(first.sql, "not_built_yet") || !strings.Contains(second.sql, "from customers") {
		t.Errorf("sql facets %q then %q; want the broken SQL, then the fix", first.sql, second.sql)
	}
}

// TestOpenLineageTargets: with targets, a run's datasets are named after
// the warehouse of the target it ran on, whichever target the delivering
// process itself uses.
func TestOpenLineageTargets(t *testing.T) {
	// Not parallel: it changes the working directory (t.Chdir).
	h := newHarness(t)
	file := filepath.Join(h.dir, "lineage.jsonl")
	proj, sub := targetsProject(t, h, fmt.Sprintf("sinks:\n  - name: lineage\n    openlineage: {path: %q}\n", file))
	okPlan := filepath.Join(repoRoot(t), "cmd", "dvtrun", "testdata", "ok", "plan.yaml")
	t.Chdir(sub)
	if r := h.run("run", okPlan); r.code != 0 {
		t.Fatalf("run on dev: %+v", r)
	}
	if r := h.run("run", "--target", "prod", okPlan); r.code != 0 {
		t.Fatalf("run on prod: %+v", r)
	}
	deliverAll(t, h, filepath.Join(proj, configFileName)) // delivered by a process on the default target, dev
	raw := fileLines(t, file)
	evs, err := lineagetest.Check(raw)
	if err != nil {
		t.Fatal(err)
	}
	perPlanRun := map[string]map[string]bool{} // plan run → namespaces of its datasets
	for _, e := range evs {
		if e.Run.Facets.Parent == nil {
			continue
		}
		id := e.Run.Facets.Parent.Run.RunID
		if perPlanRun[id] == nil {
			perPlanRun[id] = map[string]bool{}
		}
		for _, d := range slices.Concat(e.Inputs, e.Outputs) {
			perPlanRun[id][d.Namespace] = true
		}
	}
	want := map[string]bool{}
	for _, db := range []string{"dev.db", "prod.db"} {
		want["sqlite://"+filepath.ToSlash(filepath.Join(proj, ".dvt", db))] = true
	}
	got := map[string]bool{}
	for id, nss := range perPlanRun {
		if len(nss) != 1 {
			t.Errorf("plan run %s has datasets in %v, want one warehouse", id, nss)
		}
		for ns := range nss {
			got[ns] = true
		}
	}
	if len(perPlanRun) != 2 || len(got) != 2 || !want[slices.Collect(maps.Keys(got))[0]] || !want[slices.Collect(maps.Keys(got))[1]] {
		t.Errorf("the two runs' datasets are in %v, want one run in each of %v", got, want)
	}
}

// TestOpenLineageOnPostgresWarehouse: plans/shop built in a Postgres
// warehouse (the pgtest server, reached through its socket) names its
// datasets postgres://localhost:<port> and <db>.public.<table>.
func TestOpenLineageOnPostgresWarehouse(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	wh := pgtest.URL(t)
	h.env["DVT_WAREHOUSE"] = wh
	if r := h.run("run", filepath.Join(repoRoot(t), "plans", "shop", "plan.yaml")); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	cfg := filepath.Join(h.dir, "dvt.yaml")
	file := filepath.Join(h.dir, "lineage.jsonl")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "sinks:\n  - name: lineage\n    openlineage: {path: %q}\n", file), 0o644); err != nil {
		t.Fatal(err)
	}
	deliverAll(t, h, cfg)
	evs, err := lineagetest.Check(fileLines(t, file))
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(wh)
	if err != nil {
		t.Fatal(err)
	}
	ns, db := "postgres://localhost:"+u.Query().Get("port"), strings.TrimPrefix(u.Path, "/")
	outputs := 0
	for _, e := range evs {
		for _, d := range slices.Concat(e.Inputs, e.Outputs) {
			if d.Namespace != ns || !strings.HasPrefix(d.Name, db+".public.") {
				t.Errorf("dataset %v, want %s %s.public.<table>", d, ns, db)
			}
		}
		if e.EventType == "COMPLETE" {
			outputs += len(e.Outputs)
		}
	}
	if outputs != 9 { // 3 seeds, 6 models
		t.Errorf("%d outputs completed, want 9", outputs)
	}
}

func TestPostgresNaming(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ dsn, namespace, dataset string }{
		{"postgres://u@db.example:5433/wh", "postgres://db.example:5433", "wh.public.t"},
		{"postgres://u@db.example/wh?search_path=marts", "postgres://db.example:5432", "wh.marts.t"},
		{"host=/run/pg port=5544 dbname=wh options='-c search_path=\"$user\",dev'", "postgres://localhost:5544", "wh.dev.t"},
	} {
		n, err := postgresNaming(tc.dsn)
		if err != nil || n.Namespace != tc.namespace || n.DatasetName("t") != tc.dataset {
			t.Errorf("%s: %q %q %v; want %q %q", tc.dsn, n.Namespace, n.DatasetName("t"), err, tc.namespace, tc.dataset)
		}
	}
	if _, err := postgresNaming("postgres://u@db.example:5433"); engine.CodeOf(err) != engine.CodeInvalidArgument {
		t.Errorf("no database: %v", err)
	}
}
