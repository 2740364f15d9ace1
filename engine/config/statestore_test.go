package config

import (
	"reflect"
	"testing"
	"time"
)

func TestParseStateStore(t *testing.T) {
	cases := []struct {
		name, text string
		want       StateStore
		budget     time.Duration
	}{
		{"absent", "limits: {}", StateStore{}, 0},
		{"the spec's section", `
stateStore:
  writeLatencyBudgetMs: 3000
  failOpenForEventClass: ['StepStarted']
  neverFailOpen: ['StepCompleted', 'StepFailed']
`, StateStore{WriteLatencyBudgetMs: 3000, FailOpenForEventClass: []string{"StepStarted"}, NeverFailOpen: []string{"StepCompleted", "StepFailed"}}, 3 * time.Second},
		{"spool dir, policy in another order", `
stateStore: {writeLatencyBudgetMs: 750, spoolDir: /var/lib/dvtrun/spool, neverFailOpen: [StepFailed, StepCompleted]}
`, StateStore{WriteLatencyBudgetMs: 750, SpoolDir: "/var/lib/dvtrun/spool", NeverFailOpen: []string{"StepCompleted", "StepFailed"}}, 750 * time.Millisecond},
		{"a numeric dir name", "stateStore: {spoolDir: 2026}", StateStore{SpoolDir: "2026"}, 0},
		{"empty section", "stateStore:", StateStore{}, 0},
		{"the bounds", "stateStore: {writeLatencyBudgetMs: 3600000}", StateStore{WriteLatencyBudgetMs: 3600000}, time.Hour},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.text), "dvt.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.StateStore, tc.want) || c.StateStore.WriteBudget() != tc.budget {
				t.Errorf("stateStore = %+v (budget %v), want %+v (%v)", c.StateStore, c.StateStore.WriteBudget(), tc.want, tc.budget)
			}
		})
	}
}
