package sqlite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// projectionCase is a hand-written stream of testdata/projection_cases.json
// with the snapshot fields it must project to, whatever the projection.
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

// TestProjectionCases checks hand-written edge cases against expected
// snapshots written down independently of either projection, then the SQL
// projection against the Go reducer on the same cases.
func TestProjectionCases(t *testing.T) {
	b, err := os.ReadFile("testdata/projection_cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []projectionCase
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	s := openProjectionStore(t)
	streams := map[string][]engine.RunEventRecord{}
	for i, c := range cases {
		id := fmt.Sprintf("case-%02d", i)
		streams[id] = c.records(id)
	}
	insertRaw(t, s, streams)
	for i, c := range cases {
		id := fmt.Sprintf("case-%02d", i)
		t.Run(c.Name, func(t *testing.T) {
			goSnap := engine.Project(id, streams[id])
			sqlSnap, err := s.ProjectSQL(context.Background(), id)
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
				storetest.ReportDiffs(t, "ProjectSQL vs Go", d)
			}
		})
	}
}

func TestProjectSQLUnknownAndEmptyRuns(t *testing.T) {
	ctx := context.Background()
	s := openProjectionStore(t)
	if _, err := s.ProjectSQL(ctx, "no-such-run"); engine.CodeOf(err) != engine.CodeRunNotFound {
		t.Fatalf("unknown run: err = %v, want %s", err, engine.CodeRunNotFound)
	}
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO dvt_runs (run_id, tenant_id, project_id, environment_id, plan_id, plan_version, plan_sha256, target_adapter, created_at)
		VALUES ('empty', 't', 'p', 'e', 'plan', '1', 'sha', 'local', '2026-01-01T00:00:00.000000000Z')`); err != nil {
		t.Fatal(err)
	}
	snap, err := s.ProjectSQL(ctx, "empty")
	if err != nil {
		t.Fatal(err)
	}
	if d := engine.DiffSnapshots(snap, engine.Project("empty", nil)); len(d) > 0 || snap.Steps == nil {
		t.Fatalf("run without events: %+v, diffs %+v", snap, d)
	}
	all, err := s.ProjectAllSQL(ctx)
	if err != nil || len(all) != 0 {
		t.Fatalf("ProjectAllSQL over a log without events = %v, %v; want no runs", all, err)
	}
}

// TestProjectionOfAppendedRun projects a run written through the store's own
// append path (Layer 2 off, so an invalid event is stored too) and checks
// SQL, ProjectAllGo and the Go reducer over ListEvents against each other
// and against what the run did.
func TestProjectionOfAppendedRun(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "state.db"), sqlite.Options{DisableTransitionChecks: true})
	if err != nil {
		t.Fatal(err)
	}
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
		len(want.Violations) != 1 || a.Status != engine.StepStatusSuccess || a.LogicalAttemptID != 2 {
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
