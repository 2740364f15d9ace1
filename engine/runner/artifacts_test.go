package runner_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/runner"
	"github.com/dvtrun/dvtrun/engine/runresults"
	"github.com/dvtrun/dvtrun/engine/runresults/runresultstest"
)

// memArtifacts is an ArtifactWriter in memory; fail makes every write fail.
type memArtifacts struct {
	mu    sync.Mutex
	docs  [][]byte
	fail  bool
	kinds []string
}

func (m *memArtifacts) WriteArtifact(_ context.Context, runID, kind, name string, data []byte) (engine.ArtifactRef, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail {
		return engine.ArtifactRef{}, errors.New("disk full")
	}
	m.docs = append(m.docs, bytes.Clone(data))
	m.kinds = append(m.kinds, kind)
	sum := sha256.Sum256(data)
	return engine.ArtifactRef{URI: "mem://" + runID + "/" + name, Kind: kind, SHA256: hex.EncodeToString(sum[:]), SizeBytes: int64(len(data))}, nil
}

// TestRunResultsArtifact: when a run ends — completed, failed, or failed
// before it started — the runner writes run_results.json once through its
// ArtifactWriter, valid against dbt's v6 schema, equal to what
// runresults.Build makes of the log afterwards, and the closing event
// references it. A writer that fails costs the reference, not the run.
func TestRunResultsArtifact(t *testing.T) {
	testPlan := func() *plan.Plan {
		return &plan.Plan{PlanID: "p", PlanVersion: "1", Steps: []plan.Step{
			{ID: "model.a", Kind: plan.KindModel, SQL: "select 1"},
			{ID: "model.b", Kind: plan.KindModel, SQL: "select * from a", DependsOn: []string{"model.a"}},
			{ID: "test.t", Kind: plan.KindTest, SQL: "select * from b where 0", DependsOn: []string{"model.b"}},
		}}
	}
	tests := []struct {
		name      string
		setup     func(h *harness, w *memArtifacts)
		closing   engine.EventType
		statuses  string
		writeFail bool
	}{
		{"completed", func(*harness, *memArtifacts) {}, engine.RunCompleted, "success success pass", false},
		{"failed", func(h *harness, _ *memArtifacts) {
			h.wh.set("model.b", func(context.Context, engine.StepRequest, int) (engine.StepResult, error) {
				return engine.StepResult{}, engine.Errorf(engine.CodeStepFailed, "no such table: a")
			})
		}, engine.RunFailed, "success error skipped", false},
		{"warehouse down at start", func(h *harness, _ *memArtifacts) { h.wh.pingErr = errors.New("unreachable") }, engine.RunFailed, "", false},
		{"writer fails", func(_ *harness, w *memArtifacts) { w.fail = true }, engine.RunCompleted, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			w := &memArtifacts{}
			h.rn.Artifacts = w
			tc.setup(h, w)
			p := testPlan()
			runID := h.start(p)
			if _, err := h.rn.Execute(h.ctx, runID, p, h.wh); err != nil {
				t.Fatal(err)
			}
			evs := h.events(runID)
			last := evs[len(evs)-1]
			if last.EventType != tc.closing {
				t.Fatalf("closing event %s, want %s", last.EventType, tc.closing)
			}
			var payload struct {
				Artifacts []engine.ArtifactRef `json:"artifacts"`
			}
			if err := json.Unmarshal(last.Payload, &payload); err != nil {
				t.Fatal(err)
			}
			reports := h.progress.phase(runner.PhaseArtifact)
			if tc.writeFail {
				if len(payload.Artifacts) != 0 || len(reports) != 1 || engine.CodeOf(reports[0].Err) != engine.CodeArtifactWriteFailed {
					t.Errorf("failed write: artifacts %v, reports %+v", payload.Artifacts, reports)
				}
				return
			}
			if len(w.docs) != 1 || len(payload.Artifacts) != 1 || len(reports) != 1 || reports[0].Artifact == nil {
				t.Fatalf("%d documents, artifacts %v, %d reports", len(w.docs), payload.Artifacts, len(reports))
			}
			data := w.docs[0]
			sum := sha256.Sum256(data)
			if ref := payload.Artifacts[0]; ref.Kind != runresults.ArtifactKind || ref.SHA256 != hex.EncodeToString(sum[:]) || ref.SizeBytes != int64(len(data)) {
				t.Errorf("reference %+v does not describe the document", ref)
			}
			runresultstest.Validate(t, data)
			rebuilt, err := runresults.Build(runID, evs, p).JSON()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(rebuilt, data) {
				t.Errorf("the document rebuilt from the log differs:\n%s\n---\n%s", rebuilt, data)
			}
			var doc struct {
				Results []struct{ Status string } `json:"results"`
			}
			if err := json.Unmarshal(data, &doc); err != nil {
				t.Fatal(err)
			}
			var st []string
			for _, r := range doc.Results {
				st = append(st, r.Status)
			}
			if got := strings.Join(st, " "); got != tc.statuses {
				t.Errorf("statuses %q, want %q", got, tc.statuses)
			}
		})
	}
}

// TestIncrementalAndEphemeralRequests: the runner hands the warehouse an
// incremental model's key and filter, the run's --full-refresh (from
// RunQueued, so a resumed run keeps it), and never an ephemeral model,
// whose SQL reaches its reader as a CTE.
func TestIncrementalAndEphemeralRequests(t *testing.T) {
	for _, full := range []bool{false, true} {
		h := newHarness(t)
		p := &plan.Plan{PlanID: "p", PlanVersion: "1", Steps: []plan.Step{
			{ID: "model.eph", Kind: plan.KindModel, Materialized: plan.MaterializedEphemeral, SQL: "select 1 as id"},
			{ID: "model.inc", Kind: plan.KindModel, Materialized: plan.MaterializedIncremental, SQL: "select id from eph",
				UniqueKey: []string{"id"}, IncrementalFilter: "id > (select max(id) from {{ this }})", DependsOn: []string{"model.eph"}},
		}}
		runID, err := h.eng.StartRun(h.ctx, engine.StartRequest{Plan: p, FullRefresh: full})
		if err != nil {
			t.Fatal(err)
		}
		snap, err := h.rn.Execute(h.ctx, runID, p, h.wh)
		if err != nil || snap.Status != engine.StatusCompleted {
			t.Fatalf("run: %v %s", err, snap.Status)
		}
		if n := len(h.wh.requests("model.eph")); n != 0 {
			t.Errorf("the ephemeral model was run %d time(s)", n)
		}
		reqs := h.wh.requests("model.inc")
		if len(reqs) != 1 {
			t.Fatalf("%d requests for model.inc", len(reqs))
		}
		r := reqs[0]
		if r.Materialized != plan.MaterializedIncremental || strings.Join(r.UniqueKey, ",") != "id" || r.IncrementalFilter != p.Steps[1].IncrementalFilter ||
			r.FullRefresh != full || r.SQL != "WITH eph AS (\nselect 1 as id\n)\nselect id from eph" {
			t.Errorf("full refresh %v: request %+v", full, r)
		}
		for _, s := range snap.Steps {
			if s.StepID == "model.eph" {
				t.Error("the ephemeral model has a step in the run")
			}
		}
	}
}

// TestAbortStartWritesRunResults: a queued run the adapter could not start
// ends with RunFailed, whose run_results.json (no results) is referenced.
func TestAbortStartWritesRunResults(t *testing.T) {
	h := newHarness(t)
	w := &memArtifacts{}
	h.rn.Artifacts = w
	p := &plan.Plan{PlanID: "p", PlanVersion: "1", Steps: []plan.Step{{ID: "sql.a", Kind: plan.KindSQL, SQL: "select 1"}}}
	runID := h.start(p)
	if err := h.rn.AbortStart(h.ctx, runID, errors.New("no warehouse")); err != nil {
		t.Fatal(err)
	}
	evs := h.events(runID)
	if len(w.docs) != 1 || !strings.Contains(string(evs[len(evs)-1].Payload), `"kind":"dbt-run-results"`) {
		t.Fatalf("%d documents; closing payload %s", len(w.docs), evs[len(evs)-1].Payload)
	}
	runresultstest.Validate(t, w.docs[0])
	rebuilt, err := runresults.Build(runID, evs, nil).JSON()
	if err != nil || !bytes.Equal(rebuilt, w.docs[0]) {
		t.Errorf("rebuilt from the log: %v\n%s\n---\n%s", err, rebuilt, w.docs[0])
	}
}
