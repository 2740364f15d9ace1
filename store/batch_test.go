package store_test

import (
	"slices"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store"
	"github.com/dvtrun/dvtrun/store/storetest"
)

func TestFoldBatch(t *testing.T) {
	f := storetest.NewFixture()
	a, b, c := f.Event(engine.StepStarted, "model.a", 1), f.Event(engine.StepStarted, "model.b", 1), f.Event(engine.StepStarted, "model.c", 1)
	foreign := a
	foreign.PlanVersion = "other"

	tests := []struct {
		name        string
		events      []engine.RunEventWrite
		wantEvents  []string // step ids of Events
		wantRepeats []int
		wantErr     bool
	}{
		{"distinct keys", []engine.RunEventWrite{a, b, c}, []string{"model.a", "model.b", "model.c"}, []int{}, false},
		{"repeats fold onto their first occurrence, in the caller's order", []engine.RunEventWrite{a, b, b, a, c}, []string{"model.a", "model.b", "model.c"}, []int{1, 0}, false},
		{"another plan's event", []engine.RunEventWrite{a, foreign}, nil, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := store.FoldBatch(f.Meta, tc.events)
			if tc.wantErr {
				if engine.CodeOf(err) != engine.CodeSchemaValidationFailed {
					t.Fatalf("error %v, want SCHEMA_VALIDATION_FAILED", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, e := range got.Events {
				ids = append(ids, e.StepID)
			}
			if !slices.Equal(ids, tc.wantEvents) {
				t.Errorf("events %v, want %v", ids, tc.wantEvents)
			}
			if r := got.Repeats(); !slices.Equal(r, tc.wantRepeats) {
				t.Errorf("repeats %v, want %v", r, tc.wantRepeats)
			}
		})
	}
}
