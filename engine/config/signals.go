package config

import "fmt"

// SignalPolicy says which actors may send which signal types in which
// environments. With no rules every actor may send every signal, as before
// the policy existed.
type SignalPolicy struct {
	Rules []SignalRule `yaml:"rules"`
}

// SignalRule allows Actors to send Signals in Environments; an empty list
// or "*" matches everything.
type SignalRule struct {
	Actors       []string `yaml:"actors"`
	Signals      []string `yaml:"signals"`
	Environments []string `yaml:"environments"`
}

var signalNames = map[string]bool{"*": true, "PAUSE": true, "RESUME": true, "CANCEL": true, "RETRY_STEP": true}

func (p SignalPolicy) validate() error {
	for i, r := range p.Rules {
		for j, s := range r.Signals {
			if !signalNames[s] {
				return keyError(fmt.Sprintf("signals.rules[%d].signals[%d]", i, j), "unknown signal %q (want PAUSE, RESUME, CANCEL, RETRY_STEP or *)", s)
			}
		}
	}
	return nil
}
