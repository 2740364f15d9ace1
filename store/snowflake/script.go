package snowflake

import (
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Multi-statement requests cannot carry bind parameters, so the statements
// sent together get their values rendered into the SQL text. Every value is
// one of three literal forms, none of which a value's content can end:
//   - a string as a quoted hex literal ('6162…'), which the SQL decodes with
//     HEX_DECODE_STRING: hex digits cannot contain a quote, backslash, $$,
//     semicolon, comment or newline;
//   - an integer in decimal, formatted from a Go int64;
//   - NULL.
// Nothing else is ever spliced into SQL.

// hexLit renders s as a quoted hex literal.
func hexLit(s string) string { return "'" + hex.EncodeToString([]byte(s)) + "'" }

// hexOrNull renders "" as NULL, other strings as hexLit.
func hexOrNull(s string) string {
	if s == "" {
		return "NULL"
	}
	return hexLit(s)
}

func intLit(n int64) string { return strconv.FormatInt(n, 10) }

// hexRows renders strings as rows of one hex literal for a VALUES list:
// ('6162'), ('6364'); none gives one NULL row, which matches nothing.
func hexRows(ss []string) string {
	if len(ss) == 0 {
		return "(NULL)"
	}
	rows := make([]string, len(ss))
	for i, v := range ss {
		rows[i] = "(" + hexLit(v) + ")"
	}
	return strings.Join(rows, ", ")
}

// tsText is how timestamps travel to Snowflake as text (bound or hex
// encoded) before a CAST to TIMESTAMP_TZ(9): UTC, nanoseconds, explicit
// offset.
func tsText(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000000+00:00") }

var slot = regexp.MustCompile(`/\*:([a-z0-9_]+)\*/`)

// render fills the /*:name*/ slots of a statement with literals made by
// hexLit, hexOrNull or intLit, and /*rows*/ with rows of such literals. A
// slot without a value is an error, not an empty string.
func render(stmt string, vals map[string]string, rows [][]string) (string, error) {
	var missing string
	out := slot.ReplaceAllStringFunc(stmt, func(m string) string {
		name := slot.FindStringSubmatch(m)[1]
		v, ok := vals[name]
		if !ok {
			missing = name
		}
		return v
	})
	if missing != "" {
		return "", fmt.Errorf("snowflake: statement slot %q has no value", missing)
	}
	if strings.Contains(out, "/*:") {
		return "", fmt.Errorf("snowflake: statement has a malformed slot: %.80s", out[strings.Index(out, "/*:"):])
	}
	if strings.Contains(out, "/*rows*/") {
		if len(rows) == 0 {
			return "", fmt.Errorf("snowflake: statement needs rows and got none")
		}
		out = strings.Replace(out, "/*rows*/", valuesRows(rows), 1)
	}
	return out, nil
}

// valuesRows renders rows of literals (hexLit, hexOrNull, intLit) as a
// VALUES list: ('6162', 1), ('6364', 2). A statement that needs one list
// in several places takes it in a /*:name*/ slot.
func valuesRows(rows [][]string) string {
	var b strings.Builder
	for i, r := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(" + strings.Join(r, ", ") + ")")
	}
	return b.String()
}

// script is a list of statements sent as one multi-statement request.
type script []string

func (s script) text() string {
	var b strings.Builder
	for _, st := range s {
		b.WriteString(strings.TrimRight(strings.TrimSpace(st), ";"))
		b.WriteString(";\n")
	}
	return b.String()
}

// placeholders returns n comma-separated ? for an IN list; n == 0 gives
// NULL, which matches nothing.
func placeholders(n int) string {
	if n == 0 {
		return "NULL"
	}
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

// splitStatements splits a migration file into statements at semicolons
// outside quotes and comments.
func splitStatements(sql string) []string {
	var out []string
	var b strings.Builder
	inQuote, inLine, inBlock := false, false, false
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch {
		case inLine:
			if c == '\n' {
				inLine = false
			}
		case inBlock:
			if c == '*' && i+1 < len(sql) && sql[i+1] == '/' {
				inBlock = false
				b.WriteString("*/")
				i++
				continue
			}
		case inQuote:
			if c == '\'' {
				inQuote = false
			}
		case c == '\'':
			inQuote = true
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			inLine = true
			continue
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			inBlock = true
		case c == ';':
			if st := strings.TrimSpace(b.String()); st != "" {
				out = append(out, st)
			}
			b.Reset()
			continue
		}
		if !inLine {
			b.WriteByte(c)
		}
	}
	if st := strings.TrimSpace(b.String()); st != "" {
		out = append(out, st)
	}
	return out
}
