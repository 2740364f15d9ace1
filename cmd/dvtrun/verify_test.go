package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
)

// skewed is an SQL projection that gets model.b's status wrong.
type skewed struct{ sqlProjector }

func (s skewed) skew(snap engine.Snapshot) engine.Snapshot {
	steps := append([]engine.StepSnapshot(nil), snap.Steps...)
	for i := range steps {
		if steps[i].StepID == "model.b" {
			steps[i].Status = engine.StepStatusSuccess
		}
	}
	snap.Steps = steps
	return snap
}

func (s skewed) ProjectSQL(ctx context.Context, runID string) (engine.Snapshot, error) {
	snap, err := s.sqlProjector.ProjectSQL(ctx, runID)
	return s.skew(snap), err
}

func (s skewed) ProjectAllSQL(ctx context.Context) (map[string]engine.Snapshot, error) {
	all, err := s.sqlProjector.ProjectAllSQL(ctx)
	for id, snap := range all {
		all[id] = s.skew(snap)
	}
	return all, err
}

func TestVerify(t *testing.T) {
	cases := []struct {
		name   string
		skew   bool
		args   []string
		exit   int
		stdout []string
	}{
		{"one run agrees", false, []string{"verify", fixedRunID}, 0, []string{"verified 1 runs: SQL projection == Go reducer"}},
		{"all runs agree", false, []string{"verify", "--all"}, 0, []string{"verified 1 runs"}},
		{"one run differs", true, []string{"verify", fixedRunID}, 1, []string{"RUN", "FIELD", fixedRunID + "  model.b  status  SUCCESS  FAILED"}},
		{"all: a run differs", true, []string{"verify", "--all"}, 1, []string{"model.b  status  SUCCESS  FAILED"}},
		{"another scope has no runs", false, []string{"--project", "other", "verify", "--all"}, 0, []string{"verified 0 runs"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.skew {
				orig := projectorFor
				projectorFor = func(st stateStore) (sqlProjector, bool) {
					p, ok := orig(st)
					return skewed{p}, ok
				}
				defer func() { projectorFor = orig }()
			}
			h := newHarness(t)
			seedFailedRun(t, h.statePath())
			r := h.run(c.args...)
			if c.exit == 0 && (r.code != 0 || r.stderr != "") {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if c.exit != 0 {
				wantError(t, r, c.exit, "PROJECTION_MISMATCH", "1 difference(s) in 1 of 1 runs")
			}
			for _, want := range c.stdout {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout does not contain %q:\n%s", want, r.stdout)
				}
			}
			r = h.run(append(c.args, "--json")...)
			var got struct {
				Runs        int
				Differences []engine.SnapshotDiff
			}
			if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != c.exit {
				t.Fatalf("--json: exit %d, %v: %q", r.code, err, r.stdout)
			}
			if c.skew != (len(got.Differences) == 1) {
				t.Errorf("--json differences: %+v", got.Differences)
			}
		})
	}
}
