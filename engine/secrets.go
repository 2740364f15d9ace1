package engine

import (
	"regexp"
	"strings"
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
				firstErr = Errorf(CodeSecretNotFound, "the SQL references secret %s, which the step does not declare in secrets", name)
			}
			return m
		}
		v, ok := lookup(name)
		if !ok {
			if firstErr == nil {
				firstErr = Errorf(CodeSecretNotFound, "secret %s is not set (set DVT_SECRET_%s or add it to the secrets file)", name, name)
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

// Redact replaces every occurrence of the given secret values in s.
func Redact(s string, values []string) string {
	for _, v := range values {
		if len(v) >= 3 { // shorter values would redact ordinary text
			s = strings.ReplaceAll(s, v, "[REDACTED]")
		}
	}
	return s
}
