package engine_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// verifyBase is a run with two steps (one failed, one succeeded with an
// artifact) and one ignored event.
func verifyBase() engine.Snapshot {
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	var events []engine.RunEventRecord
	add := func(t engine.EventType, step string, attempt int, payload string) {
		at = at.Add(1500 * time.Millisecond)
		e := engine.RunEventRecord{RunSeq: int64(len(events) + 1), PersistedAt: at.Add(time.Millisecond)}
		e.EventID = "ev-" + string(rune('a'+len(events)))
		e.RunID, e.TenantID, e.ProjectID, e.EnvironmentID = "run-v", "t", "p", "e"
		e.EventType, e.StepID, e.LogicalAttemptID, e.EngineAttemptID, e.EmittedAt = t, step, attempt, 1, at
		if payload != "" {
			e.Payload = json.RawMessage(payload)
		}
		events = append(events, e)
	}
	add(engine.RunQueued, "", 1, "")
	add(engine.RunStarted, "", 1, "")
	add(engine.StepStarted, "a", 1, "")
	add(engine.StepStarted, "b", 1, "")
	add(engine.StepFailed, "a", 1, `{"error":{"code":"E1","message":"boom"}}`)
	add(engine.StepCompleted, "b", 1, `{"artifacts":[{"uri":"file:///x","kind":"csv"}]}`)
	add(engine.RunQueued, "", 2, "") // ignored: the run is RUNNING
	return engine.Project("run-v", events)
}

func TestDiffSnapshots(t *testing.T) {
	base := verifyBase()
	if len(base.Steps) != 2 || len(base.Violations) != 1 || base.Steps[0].Error == nil || len(base.Steps[1].Artifacts) != 1 {
		t.Fatalf("fixture is not what the cases assume: %+v", base)
	}
	type want struct{ step, field, sql, goV string }
	cases := []struct {
		name   string
		mutate func(s *engine.Snapshot) // applied to a copy playing the SQL side
		want   []want
	}{
		{"equal", func(*engine.Snapshot) {}, nil},
		{"run status", func(s *engine.Snapshot) { s.Status = engine.StatusFailed }, []want{{"", "status", "FAILED", "RUNNING"}}},
		{"inconsistent flag", func(s *engine.Snapshot) { s.Inconsistent = false }, []want{{"", "inconsistent", "false", "true"}}},
		{"watermark", func(s *engine.Snapshot) { s.LastEventSeq = 9 }, []want{{"", "lastEventSeq", "9", "7"}}},
		{"stale is not compared", func(s *engine.Snapshot) { s.Stale = true }, nil},
		{"step missing in SQL", func(s *engine.Snapshot) { s.Steps = s.Steps[:1] }, []want{{"b", "step", engine.Absent, "present"}}},
		{"extra step in SQL", func(s *engine.Snapshot) {
			s.Steps = append(s.Steps, engine.StepSnapshot{StepID: "c", Status: engine.StepStatusPending})
		}, []want{{"c", "step", "present", engine.Absent}}},
		{"steps in another order", func(s *engine.Snapshot) { slices.Reverse(s.Steps) }, []want{{"a", "position", "1", "0"}, {"b", "position", "0", "1"}}},
		{"step error missing", func(s *engine.Snapshot) { s.Steps[0].Error = nil }, []want{{"a", "error", "", `{"code":"E1","message":"boom"}`}}},
		{"step error code", func(s *engine.Snapshot) { s.Steps[0].Error = &engine.ErrorInfo{Code: "E2", Message: "boom"} }, []want{{"a", "error.code", "E2", "E1"}}},
		{"step duration", func(s *engine.Snapshot) { s.Steps[1].DurationMs++ }, []want{{"b", "durationMs", "3001", "3000"}}},
		{"step time", func(s *engine.Snapshot) { s.Steps[1].StartedAt = time.Time{} }, []want{{"b", "startedAt", "", "2026-03-01T10:00:06.000000000Z"}}},
		{"attempts", func(s *engine.Snapshot) { s.Steps[0].LogicalAttemptID, s.Steps[0].EngineAttemptID = 2, 3 },
			[]want{{"a", "logicalAttemptId", "2", "1"}, {"a", "engineAttemptId", "3", "1"}}},
		{"artifacts differ", func(s *engine.Snapshot) { s.Steps[1].Artifacts = nil },
			[]want{{"b", "artifacts", "", `[{"uri":"file:///x","kind":"csv"}]`}}},
		{"violation missing in SQL", func(s *engine.Snapshot) { s.Violations = nil }, []want{{"", "violations[7]", engine.Absent, "present"}}},
		{"violation prior state", func(s *engine.Snapshot) { s.Violations[0].PriorState = "QUEUED" }, []want{{"", "violations[7].priorState", "QUEUED", "RUNNING"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sqlSide := verifyBase() // a fresh value: mutations must not reach base
			c.mutate(&sqlSide)
			got := engine.DiffSnapshots(sqlSide, base)
			if len(got) != len(c.want) {
				t.Fatalf("got %d diffs %+v, want %d %+v", len(got), got, len(c.want), c.want)
			}
			for i, w := range c.want {
				g := got[i]
				if g.RunID != "run-v" || g.StepID != w.step || g.Field != w.field || g.SQL != w.sql || g.Go != w.goV {
					t.Errorf("diff %d = %+v, want step %q field %q sql %q go %q", i, g, w.step, w.field, w.sql, w.goV)
				}
			}
		})
	}
}

// Empty and missing artifact lists read the same in a snapshot's JSON, so
// they are not a difference.
func TestDiffSnapshotsEmptyArtifacts(t *testing.T) {
	a, b := verifyBase(), verifyBase()
	a.Steps[0].Artifacts = []engine.ArtifactRef{}
	if d := engine.DiffSnapshots(a, b); len(d) != 0 {
		t.Fatalf("diffs for [] vs nil artifacts: %+v", d)
	}
}

func TestSnapshotOfIndexesSteps(t *testing.T) {
	base := verifyBase()
	s := engine.SnapshotOf(engine.Snapshot{RunID: "r", Steps: base.Steps})
	st, ok := s.Step("b")
	if !ok || st.Status != engine.StepStatusSuccess {
		t.Fatalf("Step(b) = %+v, %v", st, ok)
	}
	if _, ok := s.Step("zz"); ok {
		t.Fatal("Step found a step the snapshot lacks")
	}
	if empty := engine.SnapshotOf(engine.Snapshot{RunID: "r"}); empty.Steps == nil {
		t.Fatal("SnapshotOf left Steps nil: a snapshot's JSON lists steps as []")
	}
}
