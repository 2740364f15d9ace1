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

// Suggest returns the candidate closest to s by edit distance when it is
// close enough to be a typo (a third of s's length, at least 1), else the
// one candidate s is a prefix of; "" when neither.
func Suggest(s string, candidates []string) string {
	best, bestD := "", max(1, len(s)/3)+1
	var prefixed []string
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
		if s != "" && strings.HasPrefix(c, s) {
			prefixed = append(prefixed, c)
		}
	}
	if best == "" && len(prefixed) == 1 {
		return prefixed[0]
	}
	return best
}

// editDistance is the optimal-string-alignment distance between a and b,
// in bytes: Levenshtein's, with a swap of neighbours ("rnu") counting one.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
