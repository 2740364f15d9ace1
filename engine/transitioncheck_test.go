package engine_test

import (
	"reflect"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
)

func TestCheckTransitions(t *testing.T) {
	ev := func(typ engine.EventType, step string, attempt int) engine.RunEventWrite {
		e := validEvent(typ, step)
		e.LogicalAttemptID = attempt
		return rekey(e)
	}
	tests := []struct {
		name    string
		run     engine.RunStatus
		steps   map[string]engine.StepState
		events  []engine.RunEventWrite
		wantRun engine.RunStatus
		wantErr bool
	}{
		{"start and finish a step", engine.StatusRunning, nil,
			[]engine.RunEventWrite{ev(engine.StepStarted, "a", 1), ev(engine.StepCompleted, "a", 1), ev(engine.RunCompleted, "", 1)}, engine.StatusCompleted, false},
		{"unknown types pass", engine.StatusRunning, nil, []engine.RunEventWrite{ev("StepDelayed", "a", 1)}, engine.StatusRunning, false},
		{"retry needs a higher attempt", engine.StatusRunning, map[string]engine.StepState{"a": {engine.StepStatusFailed, 1}},
			[]engine.RunEventWrite{ev(engine.StepStarted, "a", 2)}, engine.StatusRunning, false},
		{"same attempt restart refused", engine.StatusRunning, map[string]engine.StepState{"a": {engine.StepStatusFailed, 1}},
			[]engine.RunEventWrite{ev(engine.StepStarted, "a", 1)}, engine.StatusRunning, true},
		{"step before run start", engine.StatusQueued, nil, []engine.RunEventWrite{ev(engine.StepStarted, "a", 1)}, engine.StatusQueued, true},
		{"completed run is final", engine.StatusCompleted, nil, []engine.RunEventWrite{ev(engine.RunFailed, "", 1)}, engine.StatusCompleted, true},
		{"second event of the batch is the bad one", engine.StatusRunning, nil,
			[]engine.RunEventWrite{ev(engine.StepStarted, "a", 1), ev(engine.StepSkipped, "a", 1)}, engine.StatusRunning, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := map[string]engine.StepState{}
			for k, v := range tc.steps {
				before[k] = v
			}
			run, _, err := engine.CheckTransitions(tc.run, tc.steps, tc.events)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v", err)
			}
			if tc.wantErr {
				if engine.CodeOf(err) != engine.CodeInvalidTransition {
					t.Fatalf("code %s", engine.CodeOf(err))
				}
				_, _, again := engine.CheckTransitions(tc.run, tc.steps, tc.events)
				if again.Error() != err.Error() || !reflect.DeepEqual(again.(*engine.Error).Meta, err.(*engine.Error).Meta) {
					t.Fatalf("not deterministic: %v vs %v", err, again)
				}
				return
			}
			if run != tc.wantRun {
				t.Fatalf("run %s, want %s", run, tc.wantRun)
			}
			if len(tc.steps) > 0 && !reflect.DeepEqual(before, tc.steps) {
				t.Fatalf("input steps modified")
			}
		})
	}
}

func TestSkipInvalidTransitions(t *testing.T) {
	ev := func(typ engine.EventType, step string, attempt int) engine.RunEventWrite {
		e := validEvent(typ, step)
		e.LogicalAttemptID = attempt
		return rekey(e)
	}
	steps := map[string]engine.StepState{"a": {Status: engine.StepStatusFailed, LogicalAttemptID: 1}}
	events := []engine.RunEventWrite{
		ev(engine.StepStarted, "a", 1),   // same attempt after FAILED: skipped
		ev(engine.StepStarted, "b", 1),   // valid
		ev(engine.StepSkipped, "b", 1),   // RUNNING -> SKIPPED: skipped
		ev(engine.StepCompleted, "b", 1), // valid: b was left RUNNING
		ev(engine.RunCompleted, "", 1),   // valid
		ev(engine.RunFailed, "", 1),      // terminal: skipped
	}
	run, after := engine.SkipInvalidTransitions(engine.StatusRunning, steps, events)
	if run != engine.StatusCompleted {
		t.Errorf("run %s, want COMPLETED", run)
	}
	want := map[string]engine.StepState{
		"a": {Status: engine.StepStatusFailed, LogicalAttemptID: 1},
		"b": {Status: engine.StepStatusSuccess, LogicalAttemptID: 1},
	}
	if !reflect.DeepEqual(after, want) {
		t.Errorf("steps %v, want %v", after, want)
	}
	if steps["a"].Status != engine.StepStatusFailed || len(steps) != 1 {
		t.Errorf("the input map was modified: %v", steps)
	}
}
