package sqlite

import (
	"errors"
	"strings"
)

// singleStatement returns sql without its trailing ';' (and anything but
// blanks and comments after it), or an error when sql holds more than one
// statement or none. Models and tests are wrapped in CREATE … AS / SELECT
// count(*) FROM (…), where a second statement would either break the
// wrapper or run unwrapped. Quotes ('…', "…", `…`, […]) and comments are
// skipped so a ';' inside them does not count.
func singleStatement(sql string) (string, error) {
	end := -1 // index of the first top-level ';'
	i := 0
	for i < len(sql) && end < 0 {
		switch c := sql[i]; {
		case c == '\'' || c == '"' || c == '`':
			i = skipQuoted(sql, i, c)
		case c == '[':
			i = skipUntil(sql, i+1, "]")
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			i = skipUntil(sql, i+2, "\n")
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			i = skipUntil(sql, i+2, "*/")
		case c == ';':
			end = i
		default:
			i++
		}
	}
	body := sql
	if end >= 0 {
		body = sql[:end]
		if !blank(sql[end+1:]) {
			return "", errors.New("the SQL holds several statements; a model or test is one query")
		}
	}
	if blank(body) {
		return "", errors.New("the SQL is empty")
	}
	return strings.TrimSpace(body), nil
}

// blank reports whether s holds only whitespace, ';' and comments.
func blank(s string) bool {
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "--"):
			i = skipUntil(s, i+2, "\n")
		case strings.HasPrefix(s[i:], "/*"):
			i = skipUntil(s, i+2, "*/")
		case s[i] == ';' || s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\f' || s[i] == '\v':
			i++
		default:
			return false
		}
	}
	return true
}

// skipQuoted returns the index after the quoted token starting at i; a
// doubled quote character is an escaped one.
func skipQuoted(s string, i int, q byte) int {
	for j := i + 1; j < len(s); j++ {
		if s[j] == q {
			if j+1 < len(s) && s[j+1] == q {
				j++
				continue
			}
			return j + 1
		}
	}
	return len(s)
}

// skipUntil returns the index after the first end at or after i, or len(s).
func skipUntil(s string, i int, end string) int {
	if k := strings.Index(s[i:], end); k >= 0 {
		return i + k + len(end)
	}
	return len(s)
}
