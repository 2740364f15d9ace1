package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/storetest"
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

// skewProjection makes verify's SQL projection skewed until t ends. It
// swaps a package variable that every verify reads, so the tests that call
// it do not run in parallel (parallel tests wait until they have ended).
func skewProjection(t *testing.T) {
	orig := projectorFor
	projectorFor = func(st stateStore) (sqlProjector, bool) {
		p, ok := orig(st)
		return skewed{p}, ok
	}
	t.Cleanup(func() { projectorFor = orig })
}

func TestVerify(t *testing.T) {
	cases := []struct {
		name   string
		skew   bool
		args   []string
		exit   int
		stdout []string
	}{
		{"one run agrees", false, []string{"verify", fixedRunID}, 0, []string{"verified 1 runs in 1 scope(s): SQL projection == Go reducer", "default/default/dev: 1 runs"}},
		{"all runs agree", false, []string{"verify", "--all"}, 0, []string{"verified 1 runs", "`dvtrun audit verify --all` checks the tamper-evident chain"}},
		{"one run differs", true, []string{"verify", fixedRunID}, 1, []string{"RUN", "FIELD", fixedRunID + "  model.b  status  SUCCESS  FAILED"}},
		{"all: a run differs", true, []string{"verify", "--all"}, 1, []string{"model.b  status  SUCCESS  FAILED"}},
		{"another scope has no runs", false, []string{"--project", "other", "verify", "--all"}, 0, []string{"verified 0 runs"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.skew {
				skewProjection(t)
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

// TestVerifyAllScopes (issue 8, Found 8): verify --all checks every run in
// the store, whatever its tenant, project and environment, unless a scope
// flag (or DVT_TENANT…) narrows it, and says what it checked per scope.
func TestVerifyAllScopes(t *testing.T) {
	h := newHarness(t)
	seedFailedRun(t, h.statePath())
	failB := func(f *storetest.Fixture) []engine.RunEventWrite {
		return []engine.RunEventWrite{f.Event(engine.StepStarted, "model.b", 1), f.Event(engine.StepFailed, "model.b", 1)}
	}
	seedRun(t, h.statePath(), "run-acme-1", "acme", "shop", "prod", failB)
	seedRun(t, h.statePath(), "run-acme-2", "acme", "shop", "prod", failB)
	seedRun(t, h.statePath(), "run-beta-1", "beta", "x", "dev", failB)
	cases := []struct {
		name  string
		env   map[string]string
		args  []string
		want  []string
		runs  int
		skews bool
	}{
		{"every scope", nil, []string{"verify", "--all"}, []string{"verified 4 runs in 3 scope(s)", "acme/shop/prod: 2 runs", "beta/x/dev: 1 runs", "default/default/dev: 1 runs"}, 4, false},
		{"a tenant flag narrows", nil, []string{"verify", "--all", "--tenant", "acme"}, []string{"verified 2 runs in 1 scope(s)", "acme/shop/prod: 2 runs"}, 2, false},
		{"the environment narrows", map[string]string{"DVT_ENVIRONMENT": "dev"}, []string{"verify", "--all"}, []string{"verified 2 runs in 2 scope(s)", "beta/x/dev: 1 runs"}, 2, false},
		{"a difference in another tenant is found", nil, []string{"verify", "--all"}, []string{"run-beta-1"}, 4, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.skews {
				skewProjection(t)
			}
			for k, v := range c.env {
				h.env[k] = v
				defer delete(h.env, k)
			}
			r := h.run(c.args...)
			if c.skews {
				wantError(t, r, exitFailed, "PROJECTION_MISMATCH", "of 4 runs")
			} else if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("stdout does not say %q:\n%s", w, r.stdout)
				}
			}
			r = h.run(append(c.args, "--json")...)
			var got struct {
				Runs   int
				Scopes []verifiedScope
			}
			if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.Runs != c.runs {
				t.Errorf("--json: %v %+v", err, got)
			}
		})
	}
}
