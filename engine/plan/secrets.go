package plan

import (
	"fmt"
	"regexp"

	"github.com/dvtrun/dvtrun/engine"
)

// secretRefRE matches {{ secret('NAME') }} (single or double quotes).
var secretRefRE = regexp.MustCompile(`\{\{\s*secret\(\s*['"]([A-Za-z_][A-Za-z0-9_]*)['"]\s*\)\s*\}\}`)

// SecretLookup resolves a secret's value by name at step time.
type SecretLookup func(name string) (string, bool)

// ResolveSecrets turns each {{ secret('NAME') }} in sql into a ? placeholder
// and returns the values to bind, in order: secret values never become SQL
// text. A reference to a secret the step does not declare, or one the
// lookup cannot find, is an error that names the secret, never its value.
func ResolveSecrets(sql string, refs []SecretRef, lookup SecretLookup) (string, []any, error) {
	declared := map[string]bool{}
	for _, r := range refs {
		declared[r.Name] = true
	}
	var params []any
	var firstErr error
	out := secretRefRE.ReplaceAllStringFunc(sql, func(m string) string {
		name := secretRefRE.FindStringSubmatch(m)[1]
		if !declared[name] {
			if firstErr == nil {
				firstErr = engine.Errorf(engine.CodeSecretNotFound, "the SQL references secret %s, which the step does not declare in secrets", name)
			}
			return m
		}
		v, ok := lookup(name)
		if !ok {
			if firstErr == nil {
				firstErr = engine.Errorf(engine.CodeSecretNotFound, "secret %s is not set (set DVT_SECRET_%s or add it to the secrets file)", name, name)
			}
			return m
		}
		params = append(params, v)
		return "?"
	})
	if firstErr != nil {
		return "", nil, firstErr
	}
	return out, params, nil
}

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
