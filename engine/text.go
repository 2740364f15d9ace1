package engine

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// EscapeControl returns s with every character a terminal could act on
// written as a Go escape: C0 and C1 controls (ESC, BEL, newline, tab…),
// DEL, Unicode format characters (bidi overrides) and invalid UTF-8 bytes.
// Printable text, including non-ASCII letters, is kept as is. Everything the
// CLI prints that came from input or the store goes through it.
func EscapeControl(s string) string {
	if !strings.ContainsFunc(s, needsEscape) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !needsEscape(r):
			b.WriteString(s[i : i+size])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += size
	}
	return b.String()
}

func needsEscape(r rune) bool {
	return r == utf8.RuneError || r != ' ' && !unicode.IsPrint(r)
}

// HasControl reports whether s holds a character EscapeControl escapes.
func HasControl(s string) bool { return strings.ContainsFunc(s, needsEscape) }

// maxQuoted bounds the text QuoteText keeps of a value.
const maxQuoted = 80

// QuoteText renders an input value for an error message: quoted, control
// characters escaped, and cut to 80 characters with the length said, so a
// 32 KB id or CSV header does not become a 32 KB error line.
func QuoteText(s string) string {
	if utf8.RuneCountInString(s) <= maxQuoted {
		return `"` + EscapeControl(s) + `"`
	}
	cut, n := 0, 0
	for i := range s {
		if n == maxQuoted {
			cut = i
			break
		}
		n++
	}
	return fmt.Sprintf(`"%s…" (%d bytes)`, EscapeControl(s[:cut]), len(s))
}

// ShowText is s as it is when it is short plain text, QuoteText(s) otherwise.
func ShowText(s string) string {
	if len(s) <= maxQuoted && !HasControl(s) {
		return s
	}
	return QuoteText(s)
}

// JoinLimited joins at most max items with sep and says how many it left
// out ("… and 990 more"), so that a one-line error about a thousand steps
// stays one readable line.
func JoinLimited(items []string, sep string, max int) string {
	if len(items) <= max {
		return strings.Join(items, sep)
	}
	return strings.Join(items[:max], sep) + sep + fmt.Sprintf("… and %d more", len(items)-max)
}
