package engine

import (
	"encoding/json"
	"strings"
	"testing"
)

// hostileSecret holds every character that changes when a value is
// escaped: a quote for SQL, a double quote, a backslash and a newline for
// JSON, and letters whose case upper() and lower() change.
const hostileSecret = "Pa'ss\"w\\ord\nX<&>y"

func TestRedactorForms(t *testing.T) {
	red := NewRedactor(hostileSecret, "ab") // "ab" is too short to redact
	jsonText, _ := json.Marshal(map[string]string{"message": "bad value " + hostileSecret})
	tests := []struct{ name, in string }{
		{"as is", "error near " + hostileSecret + " here"},
		{"SQL-escaped", "no such column: '" + strings.ReplaceAll(hostileSecret, "'", "''") + "'"},
		{"JSON-escaped", string(jsonText)},
		{"JSON of SQL-escaped", mustJSONText(t, "x '"+strings.ReplaceAll(hostileSecret, "'", "''")+"'")},
		{"backslashes doubled", "E'" + strings.ReplaceAll(hostileSecret, `\`, `\\`) + "'"},
		{"upper", "value " + strings.ToUpper(hostileSecret)},
		{"lower", "value " + strings.ToLower(hostileSecret)},
		{"JSON of upper", mustJSONText(t, strings.ToUpper(hostileSecret))},
		{"twice", hostileSecret + hostileSecret},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := red.Redact(tc.in)
			if !strings.Contains(out, Redacted) {
				t.Fatalf("nothing redacted in %q", out)
			}
			for _, part := range []string{"Pa'ss", "Pa''ss", "PA'SS", "pa'ss", `w\\ord`, `w\ord`} {
				if strings.Contains(out, part) {
					t.Errorf("%q still holds %q", out, part)
				}
			}
		})
	}
	if out := red.Redact("a cab"); out != "a cab" {
		t.Errorf("a 2-character secret redacted ordinary text: %q", out)
	}
	// Not covered, and said so in README: derived values such as substrings.
	if out := red.Redact(hostileSecret[:4]); out != hostileSecret[:4] {
		t.Errorf("substring: %q", out)
	}
}

func mustJSONText(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRedactorJSON(t *testing.T) {
	red := NewRedactor(hostileSecret)
	doc, _ := json.Marshal(map[string]any{
		"error":   map[string]any{"code": "STEP_FAILED", "message": "near '" + strings.ReplaceAll(hostileSecret, "'", "''") + "'"},
		"outputs": map[string]any{hostileSecret: []any{hostileSecret, 42, 1.5, nil, true}},
		"n":       json.Number("12345678901234567890"),
	})
	out := red.RedactJSON(doc)
	if !json.Valid(out) {
		t.Fatalf("not JSON: %s", out)
	}
	if strings.Contains(string(out), "Pa") || strings.Count(string(out), Redacted) != 3 {
		t.Errorf("redacted: %s", out)
	}
	if !strings.Contains(string(out), "12345678901234567890") {
		t.Errorf("a number lost its digits: %s", out)
	}
	clean := json.RawMessage(`{"b":1,"a":"x"}`)
	if got := red.RedactJSON(clean); string(got) != string(clean) {
		t.Errorf("a clean document was rewritten: %s", got)
	}
	if got := red.RedactJSON(json.RawMessage(`{"a":"` + "Pa'ss" + `"`)); string(got) != `{"a":"Pa'ss"` {
		t.Errorf("broken JSON: %s", got)
	}
	var zero Redactor
	if zero.Redact(hostileSecret) != hostileSecret || !zero.Empty() {
		t.Error("the zero Redactor redacts")
	}
}
