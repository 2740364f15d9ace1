package engine_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/eventgen"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// stream builds records for run "r1" with consecutive runSeq and emittedAt
// one second apart.
type stream struct {
	recs []engine.RunEventRecord
}

func (s *stream) add(t engine.EventType, step string, attempt int, payload string) *stream {
	seq := int64(len(s.recs) + 1)
	e := engine.RunEventWrite{
		EventID: fmt.Sprintf("00000000-0000-4000-8000-%012d", seq), EventType: t,
		EmittedAt: t0.Add(time.Duration(seq) * time.Second), RunID: "r1",
		TenantID: "t", ProjectID: "p", EnvironmentID: "e", PlanID: "plan", PlanVersion: "1",
		EngineAttemptID: 1, LogicalAttemptID: attempt, StepID: step,
	}
	if payload != "" {
		e.Payload = json.RawMessage(payload)
	}
	e.IdempotencyKey, _ = engine.KeyOf(e).IdempotencyKey()
	s.recs = append(s.recs, engine.RunEventRecord{RunEventWrite: e, RunSeq: seq, PersistedAt: e.EmittedAt})
	return s
}

func (s *stream) dup(i int) *stream {
	d := s.recs[i]
	d.RunSeq = int64(len(s.recs) + 1)
	s.recs = append(s.recs, d)
	return s
}

func running() *stream {
	return (&stream{}).add(engine.RunQueued, "", 1, "").add(engine.RunStarted, "", 1, "")
}

func TestRunTransitions(t *testing.T) {
	// Every RUN row of the table, reached from a prefix that lands in its
	// from-state, applies; the result is its to-state.
	prefixes := map[string][]engine.EventType{
		"NONE":     nil,
		"QUEUED":   {engine.RunQueued},
		"APPROVED": {engine.RunQueued, engine.RunApproved},
		"RUNNING":  {engine.RunQueued, engine.RunStarted},
		"PAUSED":   {engine.RunQueued, engine.RunStarted, engine.RunPaused},
	}
	for _, tr := range engine.Transitions {
		if tr.Entity != engine.EntityRun {
			continue
		}
		t.Run(tr.From+"_"+string(tr.Event), func(t *testing.T) {
			s := &stream{}
			for _, et := range prefixes[tr.From] {
				s.add(et, "", 1, "")
			}
			s.add(tr.Event, "", 2, `{"error":{"code":"X","message":"m"}}`) // attempt 2: never a duplicate of the prefix
			snap := engine.Project("r1", s.recs)
			if string(snap.Status) != tr.To || snap.Inconsistent {
				t.Fatalf("status %s inconsistent=%v, want %s", snap.Status, snap.Inconsistent, tr.To)
			}
		})
	}
}

func TestRunInvalidTransitionsArePolicyA(t *testing.T) {
	tests := []struct {
		name   string
		prefix []engine.EventType
		event  engine.EventType
		want   engine.RunStatus
	}{
		{"started before queued", nil, engine.RunStarted, engine.StatusNone},
		{"completed while queued", []engine.EventType{engine.RunQueued}, engine.RunCompleted, engine.StatusQueued},
		{"paused while queued", []engine.EventType{engine.RunQueued}, engine.RunPaused, engine.StatusQueued},
		{"resumed while running", []engine.EventType{engine.RunQueued, engine.RunStarted}, engine.RunResumed, engine.StatusRunning},
		{"completed while paused", []engine.EventType{engine.RunQueued, engine.RunStarted, engine.RunPaused}, engine.RunCompleted, engine.StatusPaused},
		{"terminal is immutable", []engine.EventType{engine.RunQueued, engine.RunStarted, engine.RunCompleted}, engine.RunFailed, engine.StatusCompleted},
		{"cancelled stays cancelled", []engine.EventType{engine.RunQueued, engine.RunCancelled}, engine.RunStarted, engine.StatusCancelled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &stream{}
			for _, et := range tc.prefix {
				s.add(et, "", 1, "")
			}
			s.add(tc.event, "", 3, `{"error":{"code":"X","message":"m"}}`)
			snap := engine.Project("r1", s.recs)
			if snap.Status != tc.want {
				t.Fatalf("status %s, want %s", snap.Status, tc.want)
			}
			if !snap.Inconsistent || len(snap.Violations) != 1 {
				t.Fatalf("want one violation, got inconsistent=%v %v", snap.Inconsistent, snap.Violations)
			}
			v := snap.Violations[0]
			wantTarget, _ := engine.TargetOf(tc.event)
			if v.PriorState != string(tc.want) || v.AttemptedState != wantTarget || v.RunSeq != int64(len(s.recs)) || v.Entity != engine.EntityRun {
				t.Fatalf("violation %+v", v)
			}
		})
	}
}

func TestStepTransitions(t *testing.T) {
	const step = "model.orders"
	type ev struct {
		t       engine.EventType
		attempt int
	}
	tests := []struct {
		name     string
		run      []engine.EventType // after RunQueued, RunStarted
		events   []ev
		want     engine.StepStatus
		attempt  int
		violates bool
	}{
		{"pending to running", nil, []ev{{engine.StepStarted, 1}}, engine.StepStatusRunning, 1, false},
		{"running to success", nil, []ev{{engine.StepStarted, 1}, {engine.StepCompleted, 1}}, engine.StepStatusSuccess, 1, false},
		{"running to failed", nil, []ev{{engine.StepStarted, 1}, {engine.StepFailed, 1}}, engine.StepStatusFailed, 1, false},
		{"pending to skipped", nil, []ev{{engine.StepSkipped, 1}}, engine.StepStatusSkipped, 1, false},
		{"failed to running with higher attempt", nil, []ev{{engine.StepStarted, 1}, {engine.StepFailed, 1}, {engine.StepStarted, 2}}, engine.StepStatusRunning, 2, false},
		{"retry then success", nil, []ev{{engine.StepStarted, 1}, {engine.StepFailed, 1}, {engine.StepStarted, 2}, {engine.StepCompleted, 2}}, engine.StepStatusSuccess, 2, false},
		{"completes while paused (draining)", []engine.EventType{engine.RunPaused}, []ev{{engine.StepCompleted, 1}}, engine.StepStatusSuccess, 1, false},
		{"skipped while paused", []engine.EventType{engine.RunPaused}, []ev{{engine.StepSkipped, 1}}, engine.StepStatusSkipped, 1, false},

		// An invalid first event creates no step (Policy A): want "" is absent.
		{"completed while pending", nil, []ev{{engine.StepCompleted, 1}}, "", 0, true},
		{"failed to running with same attempt", nil, []ev{{engine.StepStarted, 1}, {engine.StepFailed, 1}, {engine.StepSkipped, 2}}, engine.StepStatusFailed, 1, true},
		{"success is final", nil, []ev{{engine.StepStarted, 1}, {engine.StepCompleted, 1}, {engine.StepStarted, 2}}, engine.StepStatusSuccess, 1, true},
		{"skipped is final", nil, []ev{{engine.StepSkipped, 1}, {engine.StepStarted, 2}}, engine.StepStatusSkipped, 1, true},
		{"completion of another attempt", nil, []ev{{engine.StepStarted, 1}, {engine.StepCompleted, 2}}, engine.StepStatusRunning, 1, true},
		{"start while paused", []engine.EventType{engine.RunPaused}, []ev{{engine.StepStarted, 1}}, "", 0, true},
		{"start after run completed", []engine.EventType{engine.RunCompleted}, []ev{{engine.StepStarted, 1}}, "", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := running()
			// Draining cases need the step running before the pause.
			if len(tc.run) > 0 && tc.run[0] == engine.RunPaused && tc.events[0].t == engine.StepCompleted {
				s.add(engine.StepStarted, step, 1, "")
			}
			for _, rt := range tc.run {
				s.add(rt, "", 1, "")
			}
			for _, e := range tc.events {
				p := ""
				switch e.t {
				case engine.StepFailed:
					p = `{"error":{"code":"STEP_FAILED","message":"boom"}}`
				case engine.StepSkipped:
					p = `{"reason":"upstream failed"}`
				}
				s.add(e.t, step, e.attempt, p)
			}
			snap := engine.Project("r1", s.recs)
			st, ok := snap.Step(step)
			wantSteps := 0
			if tc.want != "" {
				wantSteps = 1
			}
			if ok != (wantSteps == 1) || len(snap.Steps) != wantSteps {
				t.Fatalf("step present %v (%d steps), want %d steps", ok, len(snap.Steps), wantSteps)
			}
			if st.Status != tc.want || st.LogicalAttemptID != tc.attempt {
				t.Fatalf("step %s attempt %d, want %s attempt %d", st.Status, st.LogicalAttemptID, tc.want, tc.attempt)
			}
			if snap.Inconsistent != tc.violates || (tc.violates && len(snap.Violations) != 1) {
				t.Fatalf("inconsistent=%v violations=%v, want violation=%v", snap.Inconsistent, snap.Violations, tc.violates)
			}
		})
	}
}

// TestInvalidFirstEventCreatesNoStep (issue 8, Found 7): an event the
// table does not allow about a step the log never started is a violation
// and nothing else: no step appears, in Project or Incremental. A later
// valid event creates the step then (ordered by it), and a re-delivery of
// the invalid event's key stays a re-delivery.
func TestInvalidFirstEventCreatesNoStep(t *testing.T) {
	s := running().
		add(engine.StepCompleted, "ghost", 1, "").
		add(engine.StepStarted, "a", 1, "").
		add(engine.StepFailed, "ghost", 1, `{"error":{"code":"X","message":"m"}}`)
	snap := engine.Project("r1", s.recs)
	if _, ok := snap.Step("ghost"); ok || len(snap.Steps) != 1 || len(snap.Violations) != 2 || !snap.Inconsistent {
		t.Fatalf("steps %+v violations %+v", snap.Steps, snap.Violations)
	}
	if v := snap.Violations[0]; v.StepID != "ghost" || v.PriorState != "PENDING" || v.AttemptedState != "SUCCESS" {
		t.Errorf("violation %+v", v)
	}
	// The step starts for real; the repeated StepCompleted of attempt 1 is
	// a re-delivery of the invalid one (its key was seen), so it changes
	// nothing, as the SQL projection's first-occurrence rule says.
	s.add(engine.StepStarted, "ghost", 1, "").add(engine.StepCompleted, "ghost", 1, "")
	full := engine.Project("r1", s.recs)
	st, ok := full.Step("ghost")
	if !ok || st.Status != engine.StepStatusRunning || full.Steps[1].StepID != "ghost" || len(full.Violations) != 2 {
		t.Fatalf("after a valid start: %+v, steps %+v, violations %d", st, full.Steps, len(full.Violations))
	}
	// Incremental from every split point gives the same snapshot and leaves
	// its input as it was.
	for cut := range s.recs {
		base := engine.Project("r1", s.recs[:cut])
		before := len(base.Steps)
		inc := engine.Incremental(base, s.recs[cut:])
		if d := engine.DiffSnapshots(inc, full); len(d) != 0 {
			t.Fatalf("split at %d: %v", cut, d)
		}
		if len(base.Steps) != before {
			t.Fatalf("Incremental changed its input")
		}
	}
}

func TestStepDetails(t *testing.T) {
	s := running().
		add(engine.StepStarted, "a", 1, "").
		add(engine.StepFailed, "a", 1, `{"error":{"code":"STEP_FAILED","message":"no such table","retryable":true}}`).
		add(engine.StepSkipped, "b", 1, `{"reason":"dependency a failed"}`).
		add(engine.StepStarted, "c", 1, "").
		add(engine.StepCompleted, "c", 1, `{"artifacts":[{"uri":"file:///x.csv","kind":"csv"}]}`).
		add(engine.RunFailed, "", 1, `{"error":{"code":"STEP_FAILED","message":"a failed"}}`)
	snap := engine.Project("r1", s.recs)
	a, _ := snap.Step("a")
	b, _ := snap.Step("b")
	c, _ := snap.Step("c")
	if a.Error == nil || a.Error.Code != "STEP_FAILED" || a.Error.Message != "no such table" || !a.Error.Retryable {
		t.Errorf("a.Error = %+v", a.Error)
	}
	if a.DurationMs != 1000 || !a.StartedAt.Equal(t0.Add(3*time.Second)) {
		t.Errorf("a times %v %v %d", a.StartedAt, a.CompletedAt, a.DurationMs)
	}
	if b.SkipReason != "dependency a failed" || b.Status != engine.StepStatusSkipped {
		t.Errorf("b = %+v", b)
	}
	if len(c.Artifacts) != 1 || c.Artifacts[0].URI != "file:///x.csv" {
		t.Errorf("c artifacts %+v", c.Artifacts)
	}
	if snap.Status != engine.StatusFailed || snap.Error == nil || snap.Error.Message != "a failed" {
		t.Errorf("run %s %+v", snap.Status, snap.Error)
	}
	if snap.DurationMs != 6000 || snap.LastEventSeq != 8 {
		t.Errorf("run duration %d lastSeq %d", snap.DurationMs, snap.LastEventSeq)
	}
}

func TestDurationTruncatesToMilliseconds(t *testing.T) {
	s := running().add(engine.StepStarted, "a", 1, "").add(engine.StepCompleted, "a", 1, "")
	s.recs[2].EmittedAt = t0.Add(400 * time.Microsecond)  // .0004 -> ms 0
	s.recs[3].EmittedAt = t0.Add(1600 * time.Microsecond) // .0016 -> ms 1
	if got := step(engine.Project("r1", s.recs), "a").DurationMs; got != 1 {
		t.Fatalf("duration %d, want 1 (truncate each end to ms, then subtract)", got)
	}
}

func TestUnknownTypeMidStreamIsSkipped(t *testing.T) {
	s := running().
		add(engine.StepStarted, "a", 1, "").
		add("StepDelayed", "a", 1, `{"reason":"throttled"}`).
		add("SomethingNew", "", 1, "").
		add(engine.StepCompleted, "a", 1, "").
		add(engine.RunCompleted, "", 1, "")
	snap := engine.Project("r1", s.recs)
	if snap.Inconsistent || snap.Status != engine.StatusCompleted || step(snap, "a").Status != engine.StepStatusSuccess {
		t.Fatalf("snapshot %+v", snap)
	}
	if snap.LastEventSeq != 7 {
		t.Fatalf("watermark %d, want 7", snap.LastEventSeq)
	}
}

func TestRedeliveryAdvancesWatermarkOnly(t *testing.T) {
	s := running().add(engine.StepStarted, "a", 1, "").add(engine.StepCompleted, "a", 1, "")
	s.dup(2) // StepStarted again, same key: would be invalid (SUCCESS -> RUNNING) if applied
	snap := engine.Project("r1", s.recs)
	if snap.Inconsistent || step(snap, "a").Status != engine.StepStatusSuccess || snap.LastEventSeq != 5 {
		t.Fatalf("snapshot %+v", snap)
	}
	if step(snap, "a").LastEventSeq != 4 {
		t.Fatalf("step watermark %d, want 4", step(snap, "a").LastEventSeq)
	}
}

func TestInvalidEventAlertsOncePerEvent(t *testing.T) {
	s := running().add(engine.StepCompleted, "a", 1, "")
	first := engine.Project("r1", s.recs).InvalidTransitionAlerts()
	again := engine.Project("r1", s.recs).InvalidTransitionAlerts()
	if len(first) != 1 {
		t.Fatalf("%d alerts, want 1", len(first))
	}
	if !reflect.DeepEqual(first, again) {
		t.Fatalf("alerts differ between projections: %v vs %v", first, again)
	}
	a := first[0]
	if a.Key != "INVALID_TRANSITION:r1:"+s.recs[2].EventID || a.Code != engine.CodeInvalidTransition {
		t.Fatalf("alert %+v", a)
	}
	var p map[string]any
	if err := json.Unmarshal(a.Payload, &p); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"runId", "tenantId", "projectId", "environmentId", "eventId", "eventType", "runSeq", "persistedAt", "priorState", "attemptedState", "code"} {
		if _, ok := p[k]; !ok {
			t.Errorf("alert payload lacks %s (RunEvents §5.4)", k)
		}
	}
	if p["priorState"] != "PENDING" || p["attemptedState"] != "SUCCESS" {
		t.Errorf("payload states %v -> %v", p["priorState"], p["attemptedState"])
	}
}

func TestSubstatusDraining(t *testing.T) {
	s := running().add(engine.StepStarted, "a", 1, "").add(engine.RunPaused, "", 1, "")
	if got := engine.Project("r1", s.recs); got.Status != engine.StatusPaused || got.Substatus != engine.SubstatusDraining {
		t.Fatalf("%s/%s, want PAUSED/DRAINING", got.Status, got.Substatus)
	}
	s.add(engine.StepCompleted, "a", 1, "")
	if got := engine.Project("r1", s.recs); got.Status != engine.StatusPaused || got.Substatus != "" {
		t.Fatalf("%s/%q, want PAUSED with no substatus once drained", got.Status, got.Substatus)
	}
}

func TestDetectNonContiguous(t *testing.T) {
	for _, tc := range []struct {
		last, next int64
		want       bool
	}{{0, 1, false}, {10, 11, false}, {10, 12, true}, {10, 10, true}, {5, 3, true}} {
		if got := engine.DetectNonContiguous(tc.last, tc.next); got != tc.want {
			t.Errorf("DetectNonContiguous(%d, %d) = %v", tc.last, tc.next, got)
		}
	}
}

func TestIncrementalDoesNotMutateInput(t *testing.T) {
	s := running().add(engine.StepStarted, "a", 1, "")
	base := engine.Project("r1", s.recs[:3])
	before := fmt.Sprintf("%+v", base)
	s.add(engine.StepCompleted, "a", 1, "").add(engine.StepCompleted, "b", 1, "")
	_ = engine.Incremental(base, s.recs[3:])
	if after := fmt.Sprintf("%+v", base); after != before {
		t.Fatalf("Incremental changed its input:\n%s\n%s", before, after)
	}
}

// TestIncrementalEqualsProject is the property of ExecutionSemantics §1.5:
// for every generated stream and every split point,
// Incremental(Project(a), b) == Project(a ++ b).
func TestIncrementalEqualsProject(t *testing.T) {
	n := 500
	if testing.Short() {
		n = 100
	}
	opts := eventgen.Options{Duplicates: true, AllowGaps: true, Noise: 0.2}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		events := eventgen.Stream(seed, "run-prop", opts)
		whole := engine.Project("run-prop", events)
		for split := 0; split <= len(events); split++ {
			inc := engine.Incremental(engine.Project("run-prop", events[:split]), events[split:])
			if !reflect.DeepEqual(inc, whole) {
				t.Fatalf("seed %d split %d/%d: Incremental != Project\nincremental: %+v\nproject:     %+v", seed, split, len(events), inc, whole)
			}
		}
	}
}

// TestGeneratedStreamsCoverTheCases guards the generator: the property
// tests are only as good as the variety of streams it makes.
func TestGeneratedStreamsCoverTheCases(t *testing.T) {
	var inconsistent, paused, retried, cancelled, completed, failed, unknown, dups int
	opts := eventgen.Options{Duplicates: true, AllowGaps: true}
	for seed := uint64(1); seed <= 1000; seed++ {
		events := eventgen.Stream(seed, "r", opts)
		snap := engine.Project("r", events)
		keys := map[string]bool{}
		for _, e := range events {
			if keys[e.IdempotencyKey] {
				dups++
			}
			keys[e.IdempotencyKey] = true
			if !e.EventType.Known() {
				unknown++
			}
			if e.EventType == engine.RunPaused {
				paused++
			}
		}
		for _, st := range snap.Steps {
			if st.LogicalAttemptID > 1 && !snap.Inconsistent {
				retried++
			}
		}
		if snap.Inconsistent {
			inconsistent++
		}
		switch snap.Status {
		case engine.StatusCancelled:
			cancelled++
		case engine.StatusCompleted:
			completed++
		case engine.StatusFailed:
			failed++
		}
	}
	for name, n := range map[string]int{"inconsistent": inconsistent, "paused": paused, "retried": retried, "cancelled": cancelled, "completed": completed, "failed": failed, "unknown": unknown, "duplicates": dups} {
		if n < 20 {
			t.Errorf("only %d streams/events with %s in 1000 seeds", n, name)
		}
	}
}

func step(s engine.Snapshot, id string) engine.StepSnapshot {
	st, _ := s.Step(id)
	return st
}

// TestStepOfDecodedSnapshot: a snapshot read back from JSON (status --json,
// the live snapshots table) finds its steps as the reducer's own does.
func TestStepOfDecodedSnapshot(t *testing.T) {
	s := running().
		add(engine.StepStarted, "a", 1, "").
		add(engine.StepCompleted, "a", 1, "").
		add(engine.StepSkipped, "b", 1, `{"reason":"dependency a failed"}`)
	snap := engine.Project("r1", s.recs)
	js, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	var back engine.Snapshot
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		want, _ := snap.Step(id)
		got, ok := back.Step(id)
		if !ok || got.StepID != id || got.Status != want.Status {
			t.Errorf("decoded Step(%q) = %+v, %v; want %+v", id, got, ok, want)
		}
	}
	if _, ok := back.Step("nope"); ok {
		t.Error("decoded Step(nope) found a step")
	}
}
