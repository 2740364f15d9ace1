package dag

import (
	"slices"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// diamond: a → b, a → c, b,c → d; e independent.
func diamond() *plan.Plan {
	return &plan.Plan{PlanID: "p", PlanVersion: "1", Steps: []plan.Step{
		{ID: "a"}, {ID: "b", DependsOn: []string{"a"}}, {ID: "c", DependsOn: []string{"a"}},
		{ID: "d", DependsOn: []string{"b", "c"}}, {ID: "e"},
	}}
}

func ids(s *State, is []int) []string {
	var out []string
	for _, i := range is {
		out = append(out, s.Steps[i].ID)
	}
	return out
}

func skipIDs(s *State, sk []Skip) []string {
	var out []string
	for _, x := range sk {
		out = append(out, s.Steps[x.I].ID)
	}
	slices.Sort(out)
	return out
}

func TestPickFollowsDependenciesAndThreads(t *testing.T) {
	s := New(diamond())
	s.Run = engine.StatusRunning
	s.Seed()
	if got := ids(s, s.Pick(1)); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("first pick with 1 thread = %v, want [a]", got)
	}
	if got := ids(s, s.Pick(5)); !slices.Equal(got, []string{"e"}) {
		t.Fatalf("second pick = %v, want [e] (b and c wait for a)", got)
	}
	s.Succeeded(0)
	if got := ids(s, s.Pick(5)); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("after a succeeded = %v, want [b c]", got)
	}
	s.Succeeded(1)
	if got := s.Pick(5); len(got) != 0 {
		t.Fatalf("d started before c succeeded: %v", ids(s, got))
	}
	s.Succeeded(2)
	if got := ids(s, s.Pick(5)); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("after b and c = %v, want [d]", got)
	}
	s.Run = engine.StatusPaused
	if _, ok := s.Final(false); ok {
		t.Fatal("a PAUSED run closed")
	}
}

func TestFailureSkips(t *testing.T) {
	cases := []struct {
		name     string
		failFast bool
		want     []string
		final    engine.EventType
	}{
		{"dependents only", false, []string{"b", "c", "d"}, engine.RunFailed},
		{"fail-fast skips every pending step", true, []string{"b", "c", "d", "e"}, engine.RunFailed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := New(diamond())
			s.Run = engine.StatusRunning
			s.Seed()
			s.Pick(1) // a
			got := skipIDs(s, s.Failed(0, tc.failFast))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("skipped %v, want %v", got, tc.want)
			}
			if rest := s.Pick(5); !tc.failFast && !slices.Equal(ids(s, rest), []string{"e"}) {
				t.Fatalf("without fail-fast e should still start, got %v", ids(s, rest))
			} else if tc.failFast && len(rest) != 0 {
				t.Fatalf("fail-fast started %v", ids(s, rest))
			}
			if !tc.failFast {
				s.Succeeded(4)
			}
			x, ok := s.Final(false)
			if !ok || x.Type != tc.final {
				t.Fatalf("Final = %v %v, want %s", x.Type, ok, tc.final)
			}
		})
	}
}

func TestBlockedFromALog(t *testing.T) {
	s := New(diamond())
	s.Run = engine.StatusRunning
	s.Set(0, engine.StepStatusSuccess)
	s.Set(1, engine.StepStatusFailed)
	s.Seed()
	sk := s.Blocked()
	if got := skipIDs(s, sk); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("Blocked = %v, want [d]", got)
	}
	if sk[0].Reason != "upstream step b is FAILED" {
		t.Fatalf("reason %q", sk[0].Reason)
	}
}

func TestRefuseAndRetry(t *testing.T) {
	s := New(diamond())
	s.Run = engine.StatusRunning
	s.Seed()
	s.Pick(1)
	s.Failed(0, false)
	cases := []struct {
		sg     engine.Signal
		refuse bool
	}{
		{engine.Signal{Type: engine.SignalPause}, false},
		{engine.Signal{Type: engine.SignalResume}, true},
		{engine.Signal{Type: engine.SignalCancel}, false},
		{engine.Signal{Type: engine.SignalRetryStep, StepID: "a"}, false},
		{engine.Signal{Type: engine.SignalRetryStep, StepID: "e"}, true},
		{engine.Signal{Type: engine.SignalRetryStep, StepID: "zz"}, true},
		{engine.Signal{Type: "NOPE"}, true},
	}
	for _, tc := range cases {
		if why := s.Refuse(tc.sg, "r1", "p"); (why != "") != tc.refuse {
			t.Errorf("Refuse(%s %s) = %q, want refused %v", tc.sg.Type, tc.sg.StepID, why, tc.refuse)
		}
	}
	s.QueueRetry(0, 2)
	if why := s.Refuse(engine.Signal{Type: engine.SignalRetryStep, StepID: "a"}, "r1", "p"); why == "" {
		t.Error("a second RETRY_STEP of a queued step was accepted")
	}
	if got := ids(s, s.Pick(1)); !slices.Equal(got, []string{"a"}) || s.Logical(0) != 2 {
		t.Fatalf("retry pick = %v at attempt %d, want [a] at 2", got, s.Logical(0))
	}
}
