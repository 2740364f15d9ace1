package storetest

import (
	"cmp"
	"context"
	"database/sql"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/eventgen"
	"github.com/dvtrun/dvtrun/store"
)

// GenStreams makes n reproducible runs for the projection property tests:
// run ids are "run-<seed>".
func GenStreams(first, n uint64, o eventgen.Options) map[string][]engine.RunEventRecord {
	out := make(map[string][]engine.RunEventRecord, n)
	for seed := first; seed < first+n; seed++ {
		id := fmt.Sprintf("run-%06d", seed)
		out[id] = eventgen.Stream(seed, id, o)
	}
	return out
}

// ReportDiffs fails t with the first ten differences of a comparison of
// snapshots.
func ReportDiffs(t testing.TB, what string, diffs []engine.SnapshotDiff) {
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

// DocQueries returns the named queries of docs/reference/sql.md (name, SQL), read
// from path (the tests of store/<backend> pass "../../docs/reference/sql.md").
func DocQueries(t testing.TB, path string) [][2]string {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [][2]string
	for _, m := range docQuery.FindAllStringSubmatch(string(doc), -1) {
		out = append(out, [2]string{m[1], m[2]})
	}
	if len(out) == 0 {
		t.Fatalf("%s has no named queries", path)
	}
	return out
}

var docQuery = regexp.MustCompile("(?s)<!-- query: ([a-z_]+) -->\\s*```sql\\n(.*?)```")

// DocRows runs q and renders each row in a dialect-neutral form: NULL,
// integers, text, booleans as 0/1, times in engine.TimeFormat.
func DocRows(t testing.TB, db *sql.DB, q string) []string {
	t.Helper()
	rows, err := db.Query(q)
	if err != nil {
		t.Fatalf("query: %v\n%s", err, q)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		parts := make([]string, len(vals))
		for i, v := range vals {
			switch v := v.(type) {
			case nil:
				parts[i] = "NULL"
			case []byte:
				parts[i] = string(v)
			case bool:
				parts[i] = "0"
				if v {
					parts[i] = "1"
				}
			case time.Time:
				parts[i] = v.UTC().Format(engine.TimeFormat)
			default:
				parts[i] = fmt.Sprint(v)
			}
		}
		out = append(out, strings.Join(parts, " | "))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// ProjectionStore is what the projection suite reads of a backend's store.
type ProjectionStore interface {
	store.Store
	ProjectSQL(ctx context.Context, runID string) (engine.Snapshot, error)
	ProjectAllSQL(ctx context.Context) (map[string]engine.Snapshot, error)
	ProjectAllGo(ctx context.Context) (map[string]engine.Snapshot, error)
	ProjectRows(ctx context.Context, query string, args ...any) (map[string]engine.Snapshot, error)
}

// ProjectionBackend is a backend of the projection suite (RunProjection).
type ProjectionBackend struct {
	// Open returns a store on a new, empty database, closed when the test
	// ends; unchecked turns Layer 2 off (DisableTransitionChecks), so that
	// the append path stores an invalid event too.
	Open func(t testing.TB, unchecked bool) ProjectionStore
	// DB is the store's database, for the documented audit queries.
	DB func(s ProjectionStore) *sql.DB
	// LoadRaw writes streams straight into dvt_run_events, bypassing the
	// append path: the projections must cope with logs Layer 2 would have
	// refused, as Snowflake's (unenforced uniqueness) and older logs can
	// hold. A re-delivery repeats an earlier idempotency key, which a unique
	// index forbids: it may be stored under a derived key (no projection
	// reads keys).
	LoadRaw func(t testing.TB, s ProjectionStore, streams map[string][]engine.RunEventRecord)
	// Runs is how many generated streams the property holds over (default
	// 1,000). ProjectSQL, a statement per run, is checked on the runs whose
	// id ends in ScopedSuffix (default "5": a tenth of them).
	Runs         uint64
	ScopedSuffix string
	// LossyPayloads: a payload that is not JSON is not stored as it was
	// (Snowflake's VARIANT holds NULL instead); the stored log then projects
	// like the generated one in shape only.
	LossyPayloads bool
	// Reference, when set, is the backend whose rows the documented audit
	// queries (docs/reference/sql.md) must return on this one too.
	Reference *ProjectionBackend
}

// RunProjection holds a backend's SQL projection (sql/<dialect>/
// projection.sql) and its audit views to the Go reducer, on generated
// streams (RunEvents' property: the same snapshot field for field), on the
// hand-written cases of testdata/projection_cases.json, and on a run the
// store's own append path wrote.
func RunProjection(t *testing.T, b ProjectionBackend) {
	t.Run("SQLEqualsGo", func(t *testing.T) { testProjectionEqualsGo(t, b) })
	t.Run("Cases", func(t *testing.T) { testProjectionCases(t, b) })
	t.Run("UnknownRun", func(t *testing.T) {
		s := b.Open(t, false)
		if _, err := s.ProjectSQL(context.Background(), "no-such-run"); engine.CodeOf(err) != engine.CodeRunNotFound {
			t.Fatalf("unknown run: err = %v, want %s", err, engine.CodeRunNotFound)
		}
	})
	t.Run("AppendedRun", func(t *testing.T) { testProjectionOfAppendedRun(t, b) })
	if b.Reference != nil {
		t.Run("AuditDocQueries", func(t *testing.T) { testAuditDocQueries(t, b) })
	}
}

// testProjectionEqualsGo: for generated streams (fixed seeds) the SQL
// projection equals the Go reducer field for field — over all runs in one
// statement, through the audit views, and run by run.
func testProjectionEqualsGo(t *testing.T, b ProjectionBackend) {
	ctx := context.Background()
	n := cmp.Or(b.Runs, 1000)
	streams := GenStreams(1, n, eventgen.Options{Duplicates: true, AllowGaps: true, Noise: 0.2, Odd: true})
	if n >= 1000 {
		requireVariety(t, streams)
	}
	s := b.Open(t, false)
	start := time.Now()
	b.LoadRaw(t, s, streams)
	t.Logf("loaded %d runs in %v", len(streams), time.Since(start).Round(time.Millisecond))
	// The Go reducer over what the store holds is the reference the CLI
	// uses (`dvtrun verify`).
	goSnaps, err := s.ProjectAllGo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	sqlSnaps, err := s.ProjectAllSQL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ProjectAllSQL over %d runs: %v", len(streams), time.Since(start).Round(time.Millisecond))
	if len(goSnaps) != len(streams) || len(sqlSnaps) != len(streams) {
		t.Fatalf("%d runs loaded, Go projected %d, SQL %d", len(streams), len(goSnaps), len(sqlSnaps))
	}
	views, err := s.ProjectRows(ctx, viewsQuery)
	if err != nil {
		t.Fatal(err)
	}
	suffix := cmp.Or(b.ScopedSuffix, "5")
	failures := 0
	for runID, events := range streams {
		want := goSnaps[runID]
		// The stored log must not depend on how re-deliveries were keyed
		// (nor, but for lossy payloads, on how a payload was stored).
		gen := engine.Project(runID, events)
		if b.LossyPayloads {
			if gen.Status != want.Status || gen.LastEventSeq != want.LastEventSeq || len(gen.Steps) != len(want.Steps) {
				t.Errorf("%s: the stored log projects to %s/%d/%d steps, the generated one to %s/%d/%d", runID,
					want.Status, want.LastEventSeq, len(want.Steps), gen.Status, gen.LastEventSeq, len(gen.Steps))
			}
		} else if d := engine.DiffSnapshots(want, gen); len(d) > 0 {
			ReportDiffs(t, runID+": Go over stored events vs Go over generated", d)
		}
		if d := engine.DiffSnapshots(sqlSnaps[runID], want); len(d) > 0 {
			ReportDiffs(t, runID+": ProjectAllSQL vs Go", d)
			failures++
		}
		if d := engine.DiffSnapshots(views[runID], want); len(d) > 0 {
			ReportDiffs(t, runID+": audit views vs Go", d)
			failures++
		}
		if strings.HasSuffix(runID, suffix) {
			// The run-scoped statement differs only in its scope.
			one, err := s.ProjectSQL(ctx, runID)
			if err != nil {
				t.Fatal(err)
			}
			if d := engine.DiffSnapshots(one, want); len(d) > 0 {
				ReportDiffs(t, runID+": ProjectSQL vs Go", d)
				failures++
			}
		}
		if failures > 5 {
			t.Fatal("stopping after 5 failing runs")
		}
	}
}

// viewsQuery reads the audit views dvt_run_snapshots, dvt_step_snapshots
// and dvt_violations as the projection's 28 columns (ProjectRows), in every
// dialect, so that the property holds the views to the Go reducer too.
const viewsQuery = `
SELECT 'RUN' AS kind, run_id, '' AS step_id, 0 AS ord, status, substatus, last_event_seq, inconsistent,
       tenant_id, project_id, environment_id, 0 AS logical_attempt_id, 0 AS engine_attempt_id,
       started_at, completed_at, duration_ms, has_error, error_code, error_message, error_retryable,
       NULL AS skip_reason, NULL AS artifacts, NULL AS event_id, NULL AS event_type,
       NULL AS persisted_at, NULL AS entity, NULL AS prior_state, NULL AS attempted_state
FROM dvt_run_snapshots
UNION ALL
SELECT 'STEP', run_id, step_id, first_seq, status, '', last_event_seq, FALSE, '', '', '',
       logical_attempt_id, engine_attempt_id, started_at, completed_at, duration_ms,
       has_error, error_code, error_message, error_retryable, skip_reason, artifacts,
       NULL, NULL, NULL, NULL, NULL, NULL
FROM dvt_step_snapshots
UNION ALL
SELECT 'VIOLATION', run_id, step_id, run_seq, '', '', 0, TRUE, '', '', '', 0, 0, NULL, NULL, 0,
       NULL, NULL, NULL, NULL, NULL, NULL,
       event_id, event_type, persisted_at, entity, prior_state, attempted_state
FROM dvt_violations
ORDER BY run_id, kind, ord`

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

// projectionCases are hand-written streams with the snapshot fields each
// must project to, written down independently of either projection.
//
//go:embed testdata/projection_cases.json
var projectionCases []byte

// projectionCase is one stream of testdata/projection_cases.json.
type projectionCase struct {
	Name   string `json:"name"`
	Events []struct {
		Type    engine.EventType `json:"type"`
		Step    string           `json:"step"`
		Attempt int              `json:"attempt"`
		Engine  int              `json:"engine"`
		Seq     int64            `json:"seq"`
		AtNs    int64            `json:"atNs"`
		Tenant  *string          `json:"tenant"` // the event's tenant, project and environment; default "t", "p", "e"
		Payload json.RawMessage  `json:"payload"`
	} `json:"events"`
	Want struct {
		Status       engine.RunStatus `json:"status"`
		TenantID     *string          `json:"tenantId"` // checked when given
		Substatus    string           `json:"substatus"`
		LastEventSeq int64            `json:"lastEventSeq"`
		Inconsistent bool             `json:"inconsistent"`
		Violations   []int64          `json:"violations"`
		Error        string           `json:"error"`
		Steps        []struct {
			ID               string            `json:"id"`
			Status           engine.StepStatus `json:"status"`
			LogicalAttemptID int               `json:"logicalAttemptId"`
			EngineAttemptID  int               `json:"engineAttemptId"`
			DurationMs       int64             `json:"durationMs"`
			Error            string            `json:"error"`
			LastEventSeq     int64             `json:"lastEventSeq"`
		} `json:"steps"`
	} `json:"want"`
}

func (c projectionCase) records(runID string) []engine.RunEventRecord {
	base := time.Date(2026, 2, 1, 12, 0, 0, 0, time.UTC)
	var out []engine.RunEventRecord
	seq := int64(0)
	for i, e := range c.Events {
		seq++
		if e.Seq != 0 {
			seq = e.Seq
		}
		at := base.Add(time.Duration(i) * time.Second)
		if e.AtNs != 0 {
			at = base.Add(time.Duration(e.AtNs))
		}
		r := engine.RunEventRecord{RunSeq: seq, PersistedAt: base.Add(time.Duration(i)*time.Second + time.Millisecond)}
		r.RunID, r.TenantID, r.ProjectID, r.EnvironmentID, r.PlanID, r.PlanVersion = runID, "t", "p", "e", "plan", "1"
		if e.Tenant != nil {
			r.TenantID, r.ProjectID, r.EnvironmentID = *e.Tenant, *e.Tenant, *e.Tenant
		}
		r.EventID = fmt.Sprintf("%s-ev-%d", runID, seq)
		r.IdempotencyKey = fmt.Sprintf("%s-key-%d", runID, seq)
		r.EventType, r.StepID, r.EmittedAt, r.Payload = e.Type, e.Step, at, e.Payload
		r.LogicalAttemptID, r.EngineAttemptID = max(e.Attempt, 1), max(e.Engine, 1)
		out = append(out, r)
	}
	return out
}

func errCode(e *engine.ErrorInfo) string {
	if e == nil {
		return ""
	}
	return e.Code
}

// testProjectionCases checks the hand-written cases against their expected
// snapshots, on both projections of the stored log, then the SQL
// projection against the Go reducer over the same cases.
func testProjectionCases(t *testing.T, b ProjectionBackend) {
	ctx := context.Background()
	var cases []projectionCase
	if err := json.Unmarshal(projectionCases, &cases); err != nil {
		t.Fatal(err)
	}
	s := b.Open(t, false)
	streams := map[string][]engine.RunEventRecord{}
	for i, c := range cases {
		id := fmt.Sprintf("case-%02d", i)
		streams[id] = c.records(id)
	}
	b.LoadRaw(t, s, streams)
	for i, c := range cases {
		id := fmt.Sprintf("case-%02d", i)
		t.Run(c.Name, func(t *testing.T) {
			stored, err := s.ListEvents(ctx, id, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(stored) != len(streams[id]) {
				t.Fatalf("%d events stored, %d written", len(stored), len(streams[id]))
			}
			goSnap := engine.Project(id, stored)
			sqlSnap, err := s.ProjectSQL(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			for side, snap := range map[string]engine.Snapshot{"go": goSnap, "sql": sqlSnap} {
				w := c.Want
				var seqs []int64
				for _, v := range snap.Violations {
					seqs = append(seqs, v.RunSeq)
				}
				if snap.Status != w.Status || snap.Substatus != w.Substatus || snap.LastEventSeq != w.LastEventSeq ||
					snap.Inconsistent != w.Inconsistent || !slices.Equal(seqs, w.Violations) || errCode(snap.Error) != w.Error {
					t.Errorf("%s: run = %s/%q seq %d inconsistent %v violations %v error %q; want %s/%q seq %d inconsistent %v violations %v error %q",
						side, snap.Status, snap.Substatus, snap.LastEventSeq, snap.Inconsistent, seqs, errCode(snap.Error),
						w.Status, w.Substatus, w.LastEventSeq, w.Inconsistent, w.Violations, w.Error)
				}
				if w.TenantID != nil && (snap.TenantID != *w.TenantID || snap.ProjectID != *w.TenantID || snap.EnvironmentID != *w.TenantID) {
					t.Errorf("%s: tenancy %s/%s/%s, want %s for each", side, snap.TenantID, snap.ProjectID, snap.EnvironmentID, *w.TenantID)
				}
				if len(snap.Steps) != len(w.Steps) {
					t.Fatalf("%s: %d steps, want %d", side, len(snap.Steps), len(w.Steps))
				}
				for j, ws := range w.Steps {
					st := snap.Steps[j]
					if st.StepID != ws.ID || st.Status != ws.Status || st.LogicalAttemptID != ws.LogicalAttemptID || st.EngineAttemptID != ws.EngineAttemptID ||
						st.DurationMs != ws.DurationMs || errCode(st.Error) != ws.Error || st.LastEventSeq != ws.LastEventSeq {
						t.Errorf("%s: step %d = %+v, want %+v", side, j, st, ws)
					}
				}
			}
			if d := engine.DiffSnapshots(sqlSnap, goSnap); len(d) > 0 {
				ReportDiffs(t, "ProjectSQL vs Go", d)
			}
		})
	}
}

// testProjectionOfAppendedRun projects a run written through the store's
// own append path (Layer 2 off, so an invalid event is stored too) and
// checks SQL, ProjectAllGo and the Go reducer over ListEvents against each
// other and against what the run did.
func testProjectionOfAppendedRun(t *testing.T, b ProjectionBackend) {
	ctx := context.Background()
	s := b.Open(t, true)
	f := NewFixture()
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
		ReportDiffs(t, "ProjectSQL vs Go", d)
	}
	all, err := s.ProjectAllGo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := engine.DiffSnapshots(all[f.Meta.RunID], want); len(d) > 0 || len(all) != 1 {
		ReportDiffs(t, "ProjectAllGo vs Go over ListEvents", d)
	}
}

// AuditDocStreams are the runs the documented audit queries are checked
// over: 300 generated runs (fixed seeds) of two tenants.
func AuditDocStreams() map[string][]engine.RunEventRecord {
	streams := map[string][]engine.RunEventRecord{}
	for seed := uint64(1); seed <= 300; seed++ {
		id := fmt.Sprintf("run-%06d", seed)
		tenant := "t1"
		if seed > 150 {
			tenant = "t2"
		}
		streams[id] = eventgen.Stream(seed, id, eventgen.Options{Duplicates: true, AllowGaps: true, Noise: 0.2, TenantID: tenant})
	}
	return streams
}

// testAuditDocQueries runs every query of docs/reference/sql.md on this backend's
// views and on the reference backend's over the same 300 generated runs,
// and requires the same rows: the documented queries mean the same on
// both. (The reference's own views are held to the Go reducer.)
func testAuditDocQueries(t *testing.T, b ProjectionBackend) {
	queries := DocQueries(t, "../../docs/reference/sql.md")
	streams := AuditDocStreams()
	s := b.Open(t, false)
	b.LoadRaw(t, s, streams)
	ref := b.Reference.Open(t, false)
	b.Reference.LoadRaw(t, ref, streams)
	for _, q := range queries {
		name, text := q[0], q[1]
		t.Run(name, func(t *testing.T) {
			want := DocRows(t, b.Reference.DB(ref), text)
			got := DocRows(t, b.DB(s), text)
			if len(want) == 0 {
				t.Fatalf("%s returns no rows on the reference: the fixture does not exercise it", name)
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("%s: %d rows, the reference %d\nhere:\n%s\nreference:\n%s", name, len(got), len(want), strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}
