package engine

import (
	"strings"
	"testing"
)

func TestEscapeControl(t *testing.T) {
	cases := map[string]string{
		"plain ünïcødé":                 "plain ünïcødé",
		"clear\x1b[2Jthis":              `clear\x1b[2Jthis`,
		"bell\a tab\t nl\n cr\r":        `bell\x07 tab\t nl\n cr\r`,
		"c1 \u009b del \x7f":            `c1 \x9b del \x7f`,
		"bidi \u202eevil\u2066":         `bidi \u202eevil\u2066`,
		"invalid \xff\xfe utf-8":        `invalid \xff\xfe utf-8`,
		"title \x1b]0;pwned\a":          `title \x1b]0;pwned\x07`,
		"nbsp\u00a0and zero\u200bwidth": `nbsp\xa0and zero\u200bwidth`,
	}
	for in, want := range cases {
		if got := EscapeControl(in); got != want {
			t.Errorf("EscapeControl(%q) = %q, want %q", in, got, want)
		}
		if HasControl(EscapeControl(in)) {
			t.Errorf("EscapeControl(%q) still holds control characters", in)
		}
	}
}

func TestQuoteTextAndJoinLimited(t *testing.T) {
	if got := QuoteText("a\x1bb"); got != `"a\x1bb"` {
		t.Errorf("QuoteText = %s", got)
	}
	long := strings.Repeat("é", 100)
	if got := QuoteText(long); !strings.HasPrefix(got, `"`+strings.Repeat("é", 80)+`…"`) || !strings.HasSuffix(got, "(200 bytes)") {
		t.Errorf("QuoteText(long) = %s", got)
	}
	if got := ShowText("model.a"); got != "model.a" {
		t.Errorf("ShowText = %s", got)
	}
	items := make([]string, 1000)
	for i := range items {
		items[i] = "s"
	}
	if got := JoinLimited(items, ", ", 10); got != strings.Repeat("s, ", 10)+"… and 990 more" {
		t.Errorf("JoinLimited = %q", got)
	}
	if got := JoinLimited(items[:3], ", ", 10); got != "s, s, s" {
		t.Errorf("JoinLimited short = %q", got)
	}
}

// Suggest guesses a typo of a command, a flag, a selector or a ref.
func TestSuggest(t *testing.T) {
	names := []string{"run", "resume", "retry", "runs", "status", "schedule", "scheduler"}
	cases := map[string]string{
		"rnu": "run", "retyr": "retry", "statsu": "status", "schedul": "schedule",
		"sched": "", // a prefix of two: no guess
		"x":     "", "zzzzzz": "",
	}
	for in, want := range cases {
		if got := Suggest(in, names); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", in, got, want)
		}
	}
}
