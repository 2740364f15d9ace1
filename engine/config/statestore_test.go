package config

import (
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
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
`, StateStore{WriteLatencyBudgetMs: 3000}, 3 * time.Second},
		{"spool dir, policy in another order", `
stateStore: {writeLatencyBudgetMs: 750, spoolDir: /var/lib/dvtrun/spool, neverFailOpen: [StepFailed, StepCompleted]}
`, StateStore{WriteLatencyBudgetMs: 750, SpoolDir: "/var/lib/dvtrun/spool"}, 750 * time.Millisecond},
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
			if c.StateStore != tc.want || c.StateStore.WriteBudget() != tc.budget {
				t.Errorf("stateStore = %+v (budget %v), want %+v (%v)", c.StateStore, c.StateStore.WriteBudget(), tc.want, tc.budget)
			}
		})
	}
}

func TestParseStateStoreErrorsNameTheKey(t *testing.T) {
	cases := []struct{ name, text, want string }{
		{"not a mapping", "stateStore: [1]", "stateStore: want a mapping"},
		{"unknown key", "stateStore: {writeBudgetMs: 3000}", "stateStore.writeBudgetMs: unknown key"},
		{"budget in seconds", "stateStore: {writeLatencyBudgetMs: 3s}", `stateStore.writeLatencyBudgetMs: "3s" is not a whole number of milliseconds`},
		{"budget fraction", "stateStore: {writeLatencyBudgetMs: 2.5}", `stateStore.writeLatencyBudgetMs: "2.5" is not a whole number`},
		{"budget list", "stateStore: {writeLatencyBudgetMs: [1]}", `stateStore.writeLatencyBudgetMs: "[1]" is not a whole number`},
		{"budget too small", "stateStore: {writeLatencyBudgetMs: 3}", "stateStore.writeLatencyBudgetMs: 3 is not between 100 and 3600000 (milliseconds)"},
		{"budget zero", "stateStore: {writeLatencyBudgetMs: 0}", "stateStore.writeLatencyBudgetMs: 0 is not between 100 and 3600000 (milliseconds)"},
		{"budget negative", "stateStore: {writeLatencyBudgetMs: -5}", "stateStore.writeLatencyBudgetMs: -5 is not between 100 and 3600000 (milliseconds)"},
		{"budget above an hour", "stateStore: {writeLatencyBudgetMs: 3600001}", "stateStore.writeLatencyBudgetMs: 3600001 is not between"},
		{"budget overflows", "stateStore: {writeLatencyBudgetMs: 99999999999999999999}", "stateStore.writeLatencyBudgetMs: \"99999999999999999999\" is not a whole number"},
		{"budget wraps as nanoseconds", "stateStore: {writeLatencyBudgetMs: 9223372036854775}", "stateStore.writeLatencyBudgetMs: 9223372036854775 is not between"},
		{"long value cut", "stateStore: {writeLatencyBudgetMs: " + strings.Repeat("9", 500) + "}", `"` + strings.Repeat("9", 60) + `"… is not a whole number`},
		{"set twice", "stateStore: {writeLatencyBudgetMs: 500, writeLatencyBudgetMs: 600}", "stateStore.writeLatencyBudgetMs: is set twice"},
		{"spool dir empty", `stateStore: {spoolDir: ""}`, `stateStore.spoolDir: want a directory path, not ""`},
		{"spool dir null", `stateStore: {spoolDir: ~}`, `stateStore.spoolDir: want a directory path`},
		{"spool dir list", `stateStore: {spoolDir: [a]}`, `stateStore.spoolDir: want a directory path`},
		{"fail open for completions", "stateStore: {failOpenForEventClass: [StepStarted, StepCompleted]}",
			"stateStore.failOpenForEventClass: dvtrun fails open (spools) for exactly [StepStarted] (ExecutionSemantics §5) and implements no other policy"},
		{"fail open for nothing", "stateStore: {failOpenForEventClass: []}", "stateStore.failOpenForEventClass: dvtrun fails open (spools) for exactly [StepStarted]"},
		{"fail open as a string", "stateStore: {failOpenForEventClass: StepStarted}", "stateStore.failOpenForEventClass: dvtrun fails open (spools) for exactly [StepStarted]"},
		{"fail open twice", "stateStore: {failOpenForEventClass: [StepStarted, StepStarted]}", "stateStore.failOpenForEventClass:"},
		{"never fail open short", "stateStore: {neverFailOpen: [StepFailed]}",
			"stateStore.neverFailOpen: dvtrun never fails open for exactly [StepCompleted, StepFailed] (ExecutionSemantics §5)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.text), "dvt.yaml")
			if engine.CodeOf(err) != engine.CodeConfigInvalid || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "dvt.yaml") {
				t.Fatalf("got %v, want CONFIG_INVALID naming dvt.yaml and %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}
