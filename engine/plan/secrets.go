package plan

import (
	"fmt"

	"github.com/dvtrun/dvtrun/engine"
)

// SecretLookup resolves a secret's value by name at step time.
type SecretLookup func(name string) (string, bool)

// CheckSecrets resolves every secret the steps of p declare, so that a
// missing one is found before a run is recorded or continued rather than
// mid-run, after other steps did their work. p is the plan as the run
// executes it (ephemeral models inlined, its selection applied); the error
// names the first step and secret that do not resolve, never a value.
func CheckSecrets(p *Plan, lookup SecretLookup) error {
	var missing []string
	first := ""
	for _, s := range p.Steps {
		for _, ref := range s.Secrets {
			if lookup != nil {
				if _, ok := lookup(ref.Name); ok {
					continue
				}
			}
			if first == "" {
				first = fmt.Sprintf("step %s needs secret %s, which is not set (set DVT_SECRET_%s or add it to the secrets file)", s.ID, ref.Name, ref.Name)
			}
			missing = append(missing, s.ID+": "+ref.Name)
		}
	}
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return engine.Errorf(engine.CodeSecretNotFound, "%s; nothing was run or recorded", first)
	}
	return engine.Errorf(engine.CodeSecretNotFound, "%s; %d secrets are missing in all (%s); nothing was run or recorded", first, len(missing), engine.JoinLimited(missing, ", ", 10))
}
