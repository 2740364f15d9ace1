package postgres

import (
	"regexp"
	"strconv"
	"strings"
)

// Postgres's lexical rules where a statement splitter and the ? numbering
// must not look inside: '…' (E'…' with backslash escapes), "…", $tag$…$tag$
// bodies, -- and (nested) /* */ comments.

// dollarTag matches the opening of a dollar-quoted string: $$ or $tag$.
var dollarTag = regexp.MustCompile(`^\$([A-Za-z_][A-Za-z0-9_]*)?\$`)

// scan walks sql and calls visit with the index of every byte outside
// quotes and comments; visit returns false to stop.
func scan(sql string, visit func(i int) bool) {
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '\'':
			escapes := i > 0 && (sql[i-1] == 'E' || sql[i-1] == 'e') && (i == 1 || !isIdentByte(sql[i-2]))
			i = skipString(sql, i, escapes)
		case c == '"':
			i = skipString(sql, i, false)
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			if k := strings.IndexByte(sql[i:], '\n'); k >= 0 {
				i += k + 1
			} else {
				i = len(sql)
			}
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			i = skipComment(sql, i)
		case c == '$' && (i == 0 || !isIdentByte(sql[i-1])):
			if tag := dollarTag.FindString(sql[i:]); tag != "" {
				if k := strings.Index(sql[i+len(tag):], tag); k >= 0 {
					i += len(tag) + k + len(tag)
				} else {
					i = len(sql)
				}
				continue
			}
			if !visit(i) {
				return
			}
			i++
		default:
			if !visit(i) {
				return
			}
			i++
		}
	}
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// skipString returns the index after the quoted token at i (quote sql[i]);
// a doubled quote is an escaped one, and with escapes a backslash escapes
// the next byte.
func skipString(sql string, i int, escapes bool) int {
	q := sql[i]
	for j := i + 1; j < len(sql); j++ {
		switch {
		case escapes && sql[j] == '\\':
			j++
		case sql[j] == q:
			if j+1 < len(sql) && sql[j+1] == q {
				j++
				continue
			}
			return j + 1
		}
	}
	return len(sql)
}

// skipComment returns the index after the /* */ comment at i; Postgres
// nests them.
func skipComment(sql string, i int) int {
	depth := 0
	for j := i; j < len(sql)-1; j++ {
		switch {
		case sql[j] == '/' && sql[j+1] == '*':
			depth++
			j++
		case sql[j] == '*' && sql[j+1] == '/':
			depth--
			j++
			if depth == 0 {
				return j + 1
			}
		}
	}
	return len(sql)
}

// statements cuts sql at top-level ';' and drops the pieces that hold only
// blanks and comments.
func statements(sql string) []string {
	var out []string
	start := 0
	add := func(st string) {
		if hasCode(st) {
			out = append(out, strings.TrimSpace(st))
		}
	}
	scan(sql, func(i int) bool {
		if sql[i] == ';' {
			add(sql[start:i])
			start = i + 1
		}
		return true
	})
	add(sql[start:])
	return out
}

// hasCode reports whether st has anything outside comments but blanks.
func hasCode(st string) bool {
	found := false
	scan(st, func(i int) bool {
		if !strings.ContainsRune(" \t\r\n\f\v;", rune(st[i])) {
			found = true
			return false
		}
		return true
	})
	return found
}

// firstWord is the statement's first word outside comments ("" if none).
func firstWord(st string) string {
	word := ""
	scan(st, func(i int) bool {
		c := st[i]
		if c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v' || c == '(' {
			return true
		}
		j := i
		for j < len(st) && (st[j] >= 'a' && st[j] <= 'z' || st[j] >= 'A' && st[j] <= 'Z' || st[j] == '_') {
			j++
		}
		word = st[i:j]
		return false
	})
	return word
}

// numberPlaceholders replaces each ? outside quotes and comments with $1,
// $2… in order and returns how many there were.
func numberPlaceholders(stmt string) (string, int) {
	var b strings.Builder
	n, last := 0, 0
	scan(stmt, func(i int) bool {
		if stmt[i] == '?' {
			n++
			b.WriteString(stmt[last:i])
			b.WriteString("$" + strconv.Itoa(n))
			last = i + 1
		}
		return true
	})
	b.WriteString(stmt[last:])
	return b.String(), n
}
