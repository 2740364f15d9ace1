package config

import (
	"fmt"
	"slices"

	"github.com/dvtrun/dvtrun/engine"
)

// SignalPolicy says which actors may send which signal types in which
// environments. With no rules every actor may send every signal, as before
// the policy existed; with rules, a signal is allowed when one rule matches
// it and refused otherwise.
//
// The runner that owns a run enforces it (engine/runner's Signals): the
// sender stores every signal with its actor, and the runner records
// SignalRejected, with the reason, for one the policy does not allow. A
// sender that skips the check (another binary, a hand-written INSERT)
// therefore cannot get a signal applied.
type SignalPolicy struct {
	Rules []SignalRule `yaml:"rules" doc:"A signal is allowed when one rule matches its actor, its type and the run's environment, and refused otherwise."`
}

// SignalRule allows Actors to send Signals in Environments; an empty list
// or "*" matches everything.
type SignalRule struct {
	Actors       []string `yaml:"actors" doc:"The senders the rule allows (--actor, default the OS user name); empty or '*': everyone."`
	Signals      []string `yaml:"signals" doc:"The signal types it allows: PAUSE, RESUME, CANCEL, RETRY_STEP; empty or '*': all of them."`
	Environments []string `yaml:"environments" doc:"The environment ids of the runs it applies to; empty or '*': all of them."`
}

var signalNames = map[string]bool{"*": true, "PAUSE": true, "RESUME": true, "CANCEL": true, "RETRY_STEP": true}

func (p SignalPolicy) validate() error {
	for i, r := range p.Rules {
		key := fmt.Sprintf("signals.rules[%d]", i)
		for j, s := range r.Signals {
			if !signalNames[s] {
				return keyError(fmt.Sprintf("%s.signals[%d]", key, j), "unknown signal %q (want PAUSE, RESUME, CANCEL, RETRY_STEP or *)", s)
			}
		}
		// An empty name would match nobody; it is a mistake, not a rule.
		if j := slices.Index(r.Actors, ""); j >= 0 {
			return keyError(fmt.Sprintf("%s.actors[%d]", key, j), "is empty (use \"*\" for every actor)")
		}
		if j := slices.Index(r.Environments, ""); j >= 0 {
			return keyError(fmt.Sprintf("%s.environments[%d]", key, j), "is empty (use \"*\" for every environment)")
		}
	}
	return nil
}

// Allows reports whether actor may send a signal of type t to a run in
// environment and, when not, why, in a sentence that names all three.
func (p SignalPolicy) Allows(actor string, t engine.SignalType, environment string) (bool, string) {
	if len(p.Rules) == 0 {
		return true, ""
	}
	for _, r := range p.Rules {
		if matches(r.Actors, actor) && matches(r.Signals, string(t)) && matches(r.Environments, environment) {
			return true, ""
		}
	}
	who := fmt.Sprintf("actor %q", actor)
	if actor == "" {
		who = "a signal without an actor"
	}
	return false, fmt.Sprintf("%s may not send %s in environment %q: no rule of the signals policy allows it", who, t, environment)
}

func matches(list []string, v string) bool {
	return len(list) == 0 || slices.Contains(list, "*") || (v != "" && slices.Contains(list, v))
}
