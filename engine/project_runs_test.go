package engine_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/eventgen"
)

func TestProjectRuns(t *testing.T) {
	var log []engine.RunEventRecord
	want := map[string]engine.Snapshot{}
	for i := range 5 {
		runID := fmt.Sprintf("run-%d", i)
		events := eventgen.Stream(uint64(i+1), runID, eventgen.Options{})
		log = append(log, events...)
		want[runID] = engine.Project(runID, events)
	}
	all := func(yield func(engine.RunEventRecord, error) bool) {
		for _, e := range log {
			if !yield(e, nil) {
				return
			}
		}
	}
	got, err := engine.ProjectRuns(all)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ProjectRuns differs from Project per run")
	}

	broken := errors.New("the store went away")
	failing := func(yield func(engine.RunEventRecord, error) bool) {
		if yield(log[0], nil) {
			yield(engine.RunEventRecord{}, broken)
		}
	}
	if _, err := engine.ProjectRuns(failing); !errors.Is(err, broken) {
		t.Errorf("error %v, want the reader's error", err)
	}
}
