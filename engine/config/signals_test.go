package config

import (
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
)

func TestSignalPolicyAllows(t *testing.T) {
	c, err := Parse([]byte(`
signals:
  rules:
    - {actors: [alice, bob], signals: [PAUSE, RESUME], environments: [prod]}
    - {actors: [oncall], signals: ["*"]}
    - {actors: ["*"], environments: [dev]}
`), "dvt.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		actor string
		sig   engine.SignalType
		env   string
		want  bool
	}{
		{"alice", engine.SignalPause, "prod", true},
		{"bob", engine.SignalResume, "prod", true},
		{"alice", engine.SignalCancel, "prod", false}, // not her signal
		{"alice", engine.SignalPause, "staging", false},
		{"oncall", engine.SignalCancel, "prod", true}, // every signal, every environment
		{"oncall", engine.SignalRetryStep, "staging", true},
		{"mallory", engine.SignalCancel, "dev", true}, // anyone in dev
		{"mallory", engine.SignalPause, "prod", false},
		{"", engine.SignalPause, "prod", false}, // no actor matches no named actor
		{"", engine.SignalPause, "dev", true},   // ... but "*" admits it
		{"Alice", engine.SignalPause, "prod", false},
	}
	for _, tc := range cases {
		ok, why := c.Signals.Allows(tc.actor, tc.sig, tc.env)
		if ok != tc.want {
			t.Errorf("%q %s in %s: allowed=%v, want %v", tc.actor, tc.sig, tc.env, ok, tc.want)
		}
		if !ok && (!strings.Contains(why, string(tc.sig)) || !strings.Contains(why, tc.env) || !strings.Contains(why, "signals policy")) {
			t.Errorf("reason %q does not name the signal, the environment and the policy", why)
		}
	}
	if ok, _ := (SignalPolicy{}).Allows("anyone", engine.SignalCancel, "prod"); !ok {
		t.Error("no rules must allow everything")
	}
}

func TestSignalPolicyInvalid(t *testing.T) {
	cases := []struct{ text, want string }{
		{`signals: {rules: [{actors: [""]}]}`, "signals.rules[0].actors[0]: is empty"},
		{`signals: {rules: [{actors: [a]}, {environments: [prod, ""]}]}`, "signals.rules[1].environments[1]: is empty"},
		{`signals: {rules: [{signals: [pause]}]}`, `signals.rules[0].signals[0]: unknown signal "pause"`},
		{`signals: {rule: []}`, "field rule not found"},
	}
	for _, tc := range cases {
		_, err := Parse([]byte(tc.text), "dvt.yaml")
		if engine.CodeOf(err) != engine.CodeConfigInvalid || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want CONFIG_INVALID with %q", tc.text, err, tc.want)
		}
	}
}
