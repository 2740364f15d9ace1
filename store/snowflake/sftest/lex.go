package sftest

import (
	"fmt"
	"strconv"
	"strings"
)

// tokKind classifies a lexical token of Snowflake SQL.
type tokKind int

const (
	tkSpace   tokKind = iota // white space
	tkComment                // -- … , // … or /* … */
	tkString                 // '…' or $$…$$; val holds the decoded value
	tkQuoted                 // "identifier"; val holds the unquoted name
	tkNumber                 // 12, 1.5, 1e3
	tkWord                   // unquoted identifier or keyword
	tkParam                  // ? or :N
	tkPunct                  // anything else, :: as one token
)

type token struct {
	kind tokKind
	text string // exactly as written
	val  string // decoded value for strings and quoted identifiers
}

func (t token) is(word string) bool {
	return t.kind == tkWord && strings.EqualFold(strings.TrimPrefix(t.text, " "), word)
}

// upper is the token's text upper-cased, without the separator compact adds.
func (t token) upper() string { return strings.ToUpper(strings.TrimPrefix(t.text, " ")) }

// lex splits sql into tokens. Snowflake string literals understand doubled quotes
// and backslash escapes, so the lexer decodes them into val: the rewrite
// re-emits them in DuckDB's form, where a backslash is an ordinary character.
func lex(sql string) ([]token, error) {
	var toks []token
	i := 0
	for i < len(sql) {
		c := sql[i]
		start := i
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			for i < len(sql) && strings.IndexByte(" \t\n\r\f", sql[i]) >= 0 {
				i++
			}
			toks = append(toks, token{kind: tkSpace, text: sql[start:i]})
		case c == '-' && strings.HasPrefix(sql[i:], "--"), c == '/' && strings.HasPrefix(sql[i:], "//"):
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
			toks = append(toks, token{kind: tkComment, text: sql[start:i]})
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			end := strings.Index(sql[i+2:], "*/")
			if end < 0 {
				return nil, fmt.Errorf("unterminated comment at offset %d", start)
			}
			i += 2 + end + 2
			toks = append(toks, token{kind: tkComment, text: sql[start:i]})
		case c == '\'':
			val, n, err := lexString(sql[i:])
			if err != nil {
				return nil, fmt.Errorf("offset %d: %w", start, err)
			}
			i += n
			toks = append(toks, token{kind: tkString, text: sql[start:i], val: val})
		case c == '$' && strings.HasPrefix(sql[i:], "$$"):
			end := strings.Index(sql[i+2:], "$$")
			if end < 0 {
				return nil, fmt.Errorf("unterminated $$ string at offset %d", start)
			}
			i += 2 + end + 2
			toks = append(toks, token{kind: tkString, text: sql[start:i], val: sql[start+2 : i-2]})
		case c == '"':
			var b strings.Builder
			i++
			for {
				if i >= len(sql) {
					return nil, fmt.Errorf("unterminated quoted identifier at offset %d", start)
				}
				if sql[i] == '"' {
					if i+1 < len(sql) && sql[i+1] == '"' {
						b.WriteByte('"')
						i += 2
						continue
					}
					i++
					break
				}
				b.WriteByte(sql[i])
				i++
			}
			toks = append(toks, token{kind: tkQuoted, text: sql[start:i], val: b.String()})
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(sql) && sql[i+1] >= '0' && sql[i+1] <= '9':
			for i < len(sql) && (isDigit(sql[i]) || sql[i] == '.' ||
				(sql[i] == 'e' || sql[i] == 'E') ||
				((sql[i] == '+' || sql[i] == '-') && (sql[i-1] == 'e' || sql[i-1] == 'E'))) {
				i++
			}
			toks = append(toks, token{kind: tkNumber, text: sql[start:i]})
		case isIdentStart(c):
			for i < len(sql) && isIdentPart(sql[i]) {
				i++
			}
			toks = append(toks, token{kind: tkWord, text: sql[start:i]})
		case c == '?':
			i++
			toks = append(toks, token{kind: tkParam, text: "?"})
		case c == ':' && strings.HasPrefix(sql[i:], "::"):
			i += 2
			toks = append(toks, token{kind: tkPunct, text: "::"})
		default:
			i++
			toks = append(toks, token{kind: tkPunct, text: sql[start:i]})
		}
	}
	return toks, nil
}

// lexString reads a single-quoted Snowflake literal at the start of s and
// returns its value and the number of bytes consumed.
func lexString(s string) (string, int, error) {
	var b strings.Builder
	i := 1
	for i < len(s) {
		c := s[i]
		switch c {
		case '\'':
			if i+1 < len(s) && s[i+1] == '\'' {
				b.WriteByte('\'')
				i += 2
				continue
			}
			return b.String(), i + 1, nil
		case '\\':
			if i+1 >= len(s) {
				return "", 0, fmt.Errorf("unterminated string literal")
			}
			text, n := escape(s[i+1:])
			b.WriteString(text)
			i += 1 + n
		default:
			b.WriteByte(c)
			i++
		}
	}
	return "", 0, fmt.Errorf("unterminated string literal")
}

// escape decodes the Snowflake escape sequence after a backslash: \n \t
// \r \b \f, octal \ooo, hex \xhh, Unicode \uhhhh; any other character
// stands for itself (\\, \', \"). It returns the text and the bytes used.
func escape(s string) (string, int) {
	switch s[0] {
	case 'n':
		return "\n", 1
	case 't':
		return "\t", 1
	case 'r':
		return "\r", 1
	case 'b':
		return "\b", 1
	case 'f':
		return "\f", 1
	case 'x':
		if v, err := strconv.ParseUint(prefix(s[1:], 2), 16, 8); err == nil && len(s) >= 3 {
			return string([]byte{byte(v)}), 3
		}
	case 'u':
		if v, err := strconv.ParseUint(prefix(s[1:], 4), 16, 32); err == nil && len(s) >= 5 {
			return string(rune(v)), 5
		}
	}
	if len(s) >= 3 {
		if v, err := strconv.ParseUint(s[:3], 8, 8); err == nil {
			return string([]byte{byte(v)}), 3
		}
	}
	return s[:1], 1
}

func prefix(s string, n int) string {
	if len(s) < n {
		return s + "!" // never parses
	}
	return s[:n]
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}
func isIdentPart(c byte) bool { return isIdentStart(c) || isDigit(c) || c == '$' }

// duckString renders v as a DuckDB string literal: only the quote needs
// doubling, backslashes and newlines are ordinary characters there.
func duckString(v string) string {
	return "'" + strings.ReplaceAll(v, "'", "''") + "'"
}

// splitStatements splits tokens at top-level semicolons and drops empty
// statements (only space and comments), as Snowflake counts them.
func splitStatements(toks []token) [][]token {
	var out [][]token
	var cur []token
	depth := 0
	flush := func() {
		for _, t := range cur {
			if t.kind != tkSpace && t.kind != tkComment {
				out = append(out, cur)
				break
			}
		}
		cur = nil
	}
	for _, t := range toks {
		if t.kind == tkPunct {
			switch t.text {
			case "(":
				depth++
			case ")":
				depth--
			case ";":
				if depth <= 0 {
					flush()
					continue
				}
			}
		}
		cur = append(cur, t)
	}
	flush()
	return out
}

func render(toks []token) string {
	var b strings.Builder
	for _, t := range toks {
		b.WriteString(t.text)
	}
	return b.String()
}
