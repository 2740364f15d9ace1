package plan

import (
	"errors"
	"slices"
	"strings"
)

// SingleStatement returns sql without its trailing ';' (and anything but
// blanks and comments after it), or an error when sql holds more than one
// statement or none. Models and tests are wrapped in CREATE … AS / SELECT
// count(*) FROM (…), where a second statement would either break the
// wrapper or run unwrapped. Quotes ('…', "…", `…`, […]) and comments are
// skipped so a ';' inside them does not count.
func SingleStatement(sql string) (string, error) {
	body := ""
	for _, stmt := range splitStatements(sql) {
		switch {
		case blank(stmt):
		case body != "":
			return "", errors.New("the SQL holds several statements; a model or test is one query")
		default:
			body = strings.TrimSpace(stmt)
		}
	}
	if body == "" {
		return "", errors.New("the SQL is empty")
	}
	return body, nil
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

// TransactionControl returns the first statement of sql that would end or
// nest the transaction a sql step runs in (BEGIN, COMMIT, END, ROLLBACK,
// SAVEPOINT, RELEASE), or "". A COMMIT in the middle would make the
// statements before it permanent and leave the rest outside any
// transaction. The BEGIN … END of a CREATE TRIGGER body is not one.
func TransactionControl(sql string) string {
	inTrigger := false
	for _, stmt := range splitStatements(sql) {
		words := leadingWords(stmt, 4)
		if len(words) == 0 {
			continue
		}
		if inTrigger {
			if words[0] == "END" {
				inTrigger = false
			}
			continue
		}
		if words[0] == "CREATE" && slices.Contains(words[1:], "TRIGGER") {
			inTrigger = true
			continue
		}
		switch words[0] {
		case "BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE":
			return strings.TrimSpace(stmt)
		}
	}
	return ""
}

// splitStatements cuts sql at top-level ';' (outside quotes and comments).
func splitStatements(sql string) []string {
	var out []string
	start, i := 0, 0
	for i < len(sql) {
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
			out = append(out, sql[start:i])
			i++
			start = i
		default:
			i++
		}
	}
	return append(out, sql[start:])
}

// leadingWords returns up to n upper-cased words at the start of stmt,
// after blanks and comments.
func leadingWords(stmt string, n int) []string {
	var words []string
	i := 0
	for i < len(stmt) && len(words) < n {
		switch c := stmt[i]; {
		case strings.HasPrefix(stmt[i:], "--"):
			i = skipUntil(stmt, i+2, "\n")
		case strings.HasPrefix(stmt[i:], "/*"):
			i = skipUntil(stmt, i+2, "*/")
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case isWordByte(c):
			j := i
			for j < len(stmt) && isWordByte(stmt[j]) {
				j++
			}
			words = append(words, strings.ToUpper(stmt[i:j]))
			i = j
		default:
			return words
		}
	}
	return words
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
