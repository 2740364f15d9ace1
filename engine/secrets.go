package engine

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"sync"
)

// Redacted is what a secret becomes in any output.
const Redacted = "[REDACTED]"

// minSecretLen: shorter values would redact ordinary text; they are not
// redacted (README says so).
const minSecretLen = 3

// Redactor removes secret values from everything a run writes or prints:
// events, errors, status, exports, the console. It knows each value in the
// forms it travels in — as is; SQL-escaped (each quote doubled, as a warehouse echoes
// a literal); JSON-escaped (inside a payload or a --json output); with
// backslashes doubled (a C-style string literal); upper- and lower-cased
// (upper(), lower()) — and each of those JSON-escaped. Derived values it
// cannot know (a substring, a hash, an encoding) are not covered. Safe for
// concurrent use; the zero value redacts nothing.
type Redactor struct {
	mu     sync.RWMutex
	values map[string]bool
	forms  []string // every form of every value, longest first
}

// NewRedactor returns a Redactor for values.
func NewRedactor(values ...string) *Redactor {
	r := &Redactor{}
	r.Add(values...)
	return r
}

// Add registers more secret values.
func (r *Redactor) Add(values ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := false
	for _, v := range values {
		if len(v) < minSecretLen || r.values[v] {
			continue
		}
		if r.values == nil {
			r.values = map[string]bool{}
		}
		r.values[v] = true
		changed = true
	}
	if !changed {
		return
	}
	seen := map[string]bool{}
	r.forms = r.forms[:0]
	for v := range r.values {
		for _, f := range secretForms(v) {
			if len(f) >= minSecretLen && !seen[f] {
				seen[f] = true
				r.forms = append(r.forms, f)
			}
		}
	}
	// Longest first, so a value containing another is redacted whole.
	slices.SortFunc(r.forms, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
}

// secretForms lists the texts a value v may appear as.
func secretForms(v string) []string {
	base := []string{v, strings.ToUpper(v), strings.ToLower(v)}
	var out []string
	for _, b := range base {
		sqlEsc := strings.ReplaceAll(b, "'", "''")
		bsEsc := strings.ReplaceAll(b, `\`, `\\`)
		for _, f := range []string{b, sqlEsc, bsEsc} {
			out = append(out, f, jsonInner(f), jsonInnerHTML(f))
		}
	}
	return out
}

// jsonInner is v as it appears inside a JSON string (encoding/json without
// HTML escaping, as the CLI and the stores write JSON).
func jsonInner(v string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(b.String(), `"`), "\n"), `"`)
}

// jsonInnerHTML is v inside a JSON string written by json.Marshal (which
// escapes <, > and &).
func jsonInnerHTML(v string) string {
	b, _ := json.Marshal(v)
	return strings.Trim(string(b), `"`)
}

// Empty reports whether r redacts nothing.
func (r *Redactor) Empty() bool {
	if r == nil {
		return true
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.forms) == 0
}

// Redact replaces every form of every value in s with [REDACTED].
func (r *Redactor) Redact(s string) string {
	if r == nil {
		return s
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, f := range r.forms {
		if strings.Contains(s, f) {
			s = strings.ReplaceAll(s, f, Redacted)
		}
	}
	return s
}

// RedactJSON redacts every string (keys included) inside a JSON document
// and returns it re-encoded, or b itself when nothing needed redacting.
// Working on decoded strings keeps the result valid JSON whatever the
// value's escapes. A document that does not decode is redacted as text.
func (r *Redactor) RedactJSON(b json.RawMessage) json.RawMessage {
	if r.Empty() || len(b) == 0 {
		return b
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var doc any
	if dec.Decode(&doc) != nil {
		return json.RawMessage(r.Redact(string(b)))
	}
	changed := false
	doc = r.redactValue(doc, &changed)
	if !changed {
		return b
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if enc.Encode(doc) != nil {
		return json.RawMessage(r.Redact(string(b)))
	}
	return json.RawMessage(bytes.TrimSuffix(out.Bytes(), []byte("\n")))
}

func (r *Redactor) redactValue(v any, changed *bool) any {
	switch t := v.(type) {
	case string:
		if out := r.Redact(t); out != t {
			*changed = true
			return out
		}
	case []any:
		for i, x := range t {
			t[i] = r.redactValue(x, changed)
		}
	case map[string]any:
		for k, x := range t {
			nk := r.Redact(k)
			if nk != k {
				*changed = true
				delete(t, k)
			}
			t[nk] = r.redactValue(x, changed)
		}
	}
	return v
}
