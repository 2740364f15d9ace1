package sftest

import (
	"fmt"
	"strings"
)

// stmt is one statement of a request, translated for DuckDB.
type stmt struct {
	orig   string          // the statement as the client wrote it
	toks   []token         // significant tokens, Snowflake form
	duck   string          // DuckDB text after the rewrites
	quoted map[string]bool // names written as "quoted identifiers"
}

// word returns the n-th significant token upper-cased if it is a word.
func (s *stmt) word(n int) string {
	if n < len(s.toks) && s.toks[n].kind == tkWord {
		return s.toks[n].upper()
	}
	return ""
}

// parseRequest lexes sqlText and splits it into statements.
func parseRequest(sqlText string) ([]*stmt, error) {
	toks, err := lex(sqlText)
	if err != nil {
		return nil, err
	}
	return parseTokens(toks), nil
}

// parseTokens splits a lexed request into statements.
func parseTokens(toks []token) []*stmt {
	var out []*stmt
	for _, part := range splitStatements(toks) {
		s := &stmt{orig: strings.TrimSpace(render(part)), quoted: map[string]bool{}}
		s.toks = compact(part)
		for _, t := range s.toks {
			if t.kind == tkQuoted {
				s.quoted[t.val] = true
			}
		}
		s.duck = render(translate(s.toks))
		if s.word(0) == "MERGE" {
			// Snowflake reports MERGE counts per action; DuckDB tells the
			// action of each row only through RETURNING.
			s.duck += " RETURNING merge_action"
		}
		out = append(out, s)
	}
	return out
}

// compact drops space and comments, keeping one leading space in the text of
// a token that followed a separator, so that rendering keeps ">=" and "a.b"
// adjacent and everything else apart.
func compact(toks []token) []token {
	var out []token
	sep := false
	for _, t := range toks {
		if t.kind == tkSpace || t.kind == tkComment {
			sep = true
			continue
		}
		if sep && len(out) > 0 {
			t.text = " " + t.text
		}
		sep = false
		out = append(out, t)
	}
	return out
}

// bare returns the token text without the separator compact added.
func bare(t token) string { return strings.TrimPrefix(t.text, " ") }

// snowflakeTypes maps Snowflake type names to DuckDB ones. NUMBER without
// precision is NUMBER(38,0) in Snowflake; the integer aliases are also
// NUMBER(38,0) there and become 64-bit BIGINT here.
var snowflakeTypes = map[string]string{
	"NUMBER": "DECIMAL", "NUMERIC": "DECIMAL", "DECIMAL": "DECIMAL",
	"INT": "BIGINT", "INTEGER": "BIGINT", "SMALLINT": "BIGINT", "TINYINT": "BIGINT", "BYTEINT": "BIGINT",
	"STRING": "VARCHAR", "TEXT": "VARCHAR", "CHAR": "VARCHAR", "CHARACTER": "VARCHAR", "NCHAR": "VARCHAR", "NVARCHAR": "VARCHAR", "NVARCHAR2": "VARCHAR", "VARCHAR": "VARCHAR",
	"TIMESTAMP_NTZ": "TIMESTAMP", "DATETIME": "TIMESTAMP", "TIMESTAMP": "TIMESTAMP",
	"TIMESTAMP_LTZ": "TIMESTAMPTZ", "TIMESTAMP_TZ": "TIMESTAMPTZ",
	"VARIANT": "JSON", "OBJECT": "JSON", "ARRAY": "JSON",
	"FLOAT": "DOUBLE", "FLOAT4": "DOUBLE", "FLOAT8": "DOUBLE", "REAL": "DOUBLE", "DOUBLE": "DOUBLE",
	"BINARY": "BLOB", "VARBINARY": "BLOB",
}

// typeWithLength lists the types whose (n) argument DuckDB must not see.
var typeWithLength = map[string]bool{
	"VARCHAR": true, "STRING": true, "TEXT": true, "CHAR": true, "CHARACTER": true, "NCHAR": true, "NVARCHAR": true, "NVARCHAR2": true,
	"BINARY": true, "VARBINARY": true, "TIMESTAMP_NTZ": true, "TIMESTAMP_LTZ": true, "TIMESTAMP_TZ": true, "TIMESTAMP": true, "DATETIME": true,
	"FLOAT": true, "DOUBLE": true,
}

// translate applies the documented rewrites (see the package doc) to the
// significant tokens of one statement.
func translate(in []token) []token {
	toks := append([]token(nil), in...)
	toks = rewriteLiterals(toks)
	toks = rewriteVariantPaths(toks)
	toks = rewriteTypes(toks)
	toks = rewriteDateFunctions(toks)
	toks = rewriteFunctions(toks)
	toks = nameValuesColumns(toks)
	if isCreateTable(toks) {
		toks = stripConstraints(toks)
	}
	return toks
}

// rewriteLiterals re-emits string literals in DuckDB form and turns :N bind
// placeholders into $N.
func rewriteLiterals(toks []token) []token {
	var out []token
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case t.kind == tkString:
			t.text = strings.TrimSuffix(t.text, bare(t)) + duckString(t.val)
		case t.kind == tkPunct && bare(t) == ":" && i+1 < len(toks) && toks[i+1].kind == tkNumber &&
			!strings.HasPrefix(toks[i+1].text, " ") && (i == 0 || !endsOperand(toks[i-1]) || isKeyword(toks[i-1])):
			t = token{kind: tkParam, text: strings.TrimSuffix(t.text, ":") + "$" + toks[i+1].text}
			i++
		}
		out = append(out, t)
	}
	return out
}

// endsOperand reports whether t can end an expression that a VARIANT path
// (col:field) may follow.
func endsOperand(t token) bool {
	return t.kind == tkWord || t.kind == tkQuoted || t.kind == tkPunct && (bare(t) == ")" || bare(t) == "]")
}

// rewriteVariantPaths turns col:a:b into json_extract(col, '$.a.b'), and
// col:a::string (or ::varchar/::text, and other scalar casts) into
// json_extract_string(col, '$.a')::TYPE, because a JSON string cast to
// VARCHAR keeps its quotes in DuckDB while Snowflake strips them.
func rewriteVariantPaths(toks []token) []token {
	var out []token
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if !(t.kind == tkPunct && bare(t) == ":" && len(out) > 0 && endsOperand(out[len(out)-1]) &&
			i+1 < len(toks) && (toks[i+1].kind == tkWord || toks[i+1].kind == tkQuoted)) {
			out = append(out, t)
			continue
		}
		// The operand: a possibly qualified name just emitted.
		start := len(out) - 1
		for start >= 2 && bare(out[start-1]) == "." && (out[start-2].kind == tkWord || out[start-2].kind == tkQuoted) {
			start -= 2
		}
		operand := strings.TrimSpace(render(out[start:]))
		pre := ""
		if strings.HasPrefix(out[start].text, " ") {
			pre = " "
		}
		out = out[:start]
		var path strings.Builder
		j := i
		for j+1 < len(toks) {
			sep, next := bare(toks[j]), toks[j+1]
			switch {
			case (sep == ":" || sep == ".") && (next.kind == tkWord || next.kind == tkQuoted):
				name := bare(next)
				if next.kind == tkQuoted {
					name = next.val
				}
				path.WriteString("." + jsonKey(name))
				j += 2
				continue
			case sep == "[" && next.kind == tkNumber && j+2 < len(toks) && bare(toks[j+2]) == "]":
				path.WriteString("[" + bare(next) + "]")
				j += 3
				continue
			}
			break
		}
		jsonPath := "$" + path.String()
		fn := "json_extract"
		if j+1 < len(toks) && bare(toks[j]) == "::" && toks[j+1].kind == tkWord {
			switch toks[j+1].upper() {
			case "VARIANT", "OBJECT", "ARRAY":
			default:
				fn = "json_extract_string"
			}
		}
		out = append(out, token{kind: tkWord, text: pre + fn + "(" + operand + ", " + duckString(jsonPath) + ")"})
		i = j - 1
	}
	return out
}

// jsonKey quotes a JSON path key unless it is a plain identifier.
func jsonKey(name string) string {
	for i := 0; i < len(name); i++ {
		if !isIdentPart(name[i]) {
			return `"` + strings.ReplaceAll(name, `"`, `\"`) + `"`
		}
	}
	return name
}

// rewriteTypes translates Snowflake type names in type position: after ::,
// after AS inside CAST, and after a column name in a column definition.
func rewriteTypes(toks []token) []token {
	var out []token
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		duck, ok := snowflakeTypes[t.upper()]
		if t.kind != tkWord || !ok || i == 0 || !typePosition(toks, i) {
			out = append(out, t)
			continue
		}
		pre := strings.TrimSuffix(t.text, bare(t))
		hasArgs := i+1 < len(toks) && bare(toks[i+1]) == "("
		switch {
		case (t.upper() == "NUMBER" || t.upper() == "NUMERIC" || t.upper() == "DECIMAL") && !hasArgs:
			out = append(out, token{kind: tkWord, text: pre + "DECIMAL(38,0)"})
		case hasArgs && strings.HasPrefix(t.upper(), "TIMESTAMP") && i+3 < len(toks) && bare(toks[i+2]) == "9" && bare(toks[i+3]) == ")":
			// TIMESTAMP_xx(9) keeps nanoseconds, which DuckDB's TIMESTAMPTZ
			// (microseconds) would drop; TIMESTAMP_NS holds the instant in
			// UTC (a cast from text applies the offset) and reads back as
			// timestamp_ntz. Added for store/snowflake's event timestamps.
			out = append(out, token{kind: tkWord, text: pre + "TIMESTAMP_NS"})
			i += 3
		case hasArgs && typeWithLength[t.upper()]:
			out = append(out, token{kind: tkWord, text: pre + duck})
			i = skipParens(toks, i+1)
		case hasArgs && (duck == "BIGINT" || duck == "JSON"):
			out = append(out, t) // a function call such as ARRAY(…) is not a type
		default:
			out = append(out, token{kind: tkWord, text: pre + duck})
		}
	}
	return out
}

// typePosition decides whether the word at i names a type.
func typePosition(toks []token, i int) bool {
	prev := toks[i-1]
	switch {
	case bare(prev) == "::":
		return true
	case prev.is("AS"):
		return insideCast(toks, i)
	case prev.kind == tkWord || prev.kind == tkQuoted:
		// "col TYPE" inside a column list; keywords before a type are rare.
		return !isKeyword(prev) && insideParens(toks, i)
	}
	return false
}

func isKeyword(t token) bool {
	switch t.upper() {
	case "SELECT", "FROM", "WHERE", "AND", "OR", "NOT", "ON", "BY", "THEN", "ELSE", "WHEN", "AS", "SET", "VALUES", "TABLE", "INTO", "RETURNS", "IS", "IN", "CASE", "END", "DISTINCT", "LIKE", "LIMIT", "OFFSET":
		return true
	}
	return false
}

// insideParens reports whether i lies inside an unclosed parenthesis.
func insideParens(toks []token, i int) bool {
	depth := 0
	for j := i - 1; j >= 0; j-- {
		switch bare(toks[j]) {
		case ")":
			depth++
		case "(":
			if depth == 0 {
				return true
			}
			depth--
		}
	}
	return false
}

// insideCast reports whether the innermost open parenthesis before i belongs
// to CAST or TRY_CAST.
func insideCast(toks []token, i int) bool {
	depth := 0
	for j := i - 1; j >= 0; j-- {
		switch bare(toks[j]) {
		case ")":
			depth++
		case "(":
			if depth == 0 {
				return j > 0 && (toks[j-1].is("CAST") || toks[j-1].is("TRY_CAST"))
			}
			depth--
		}
	}
	return false
}

// skipParens returns the index of the ")" matching the "(" at i.
func skipParens(toks []token, i int) int {
	depth := 0
	for j := i; j < len(toks); j++ {
		switch bare(toks[j]) {
		case "(":
			depth++
		case ")":
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return len(toks) - 1
}

// functionRewrites maps a Snowflake function to a DuckDB prefix and suffix
// placed around its argument list.
var functionRewrites = map[string][2]string{
	"PARSE_JSON":            {"json(", ")"},
	"TRY_PARSE_JSON":        {"try(json(", "))"},
	"TO_VARIANT":            {"to_json(", ")"},
	"TO_JSON":               {"to_json(", ")"},
	"IFF":                   {"if(", ")"},
	"CURRENT_TIMESTAMP":     {"get_current_timestamp(", ")"},
	"SYSDATE":               {"(get_current_timestamp(", ") AT TIME ZONE 'UTC')"},
	"HEX_DECODE_STRING":     {"decode(unhex(", "))"},
	"TRY_HEX_DECODE_STRING": {"try(decode(unhex(", ")))"},
	"HEX_ENCODE":            {"hex(", ")"},
	"OBJECT_CONSTRUCT":      {"json_object(", ")"},
	"NVL":                   {"coalesce(", ")"},
	"ZEROIFNULL":            {"coalesce(", ", 0)"},
	"ARRAY_SIZE":            {"json_array_length(", ")"},
	"ARRAY_CONSTRUCT":       {"json_array(", ")"},
}

// rewriteDateFunctions (and SHA2, whose digest size argument DuckDB's
// sha256 lacks) gives DATEDIFF, TIMESTAMPDIFF, DATE_TRUNC and
// DATE_PART a quoted date part where Snowflake allows a bare word (day,
// millisecond …), and turns DATEADD/TIMESTAMPADD(part, n, ts), which DuckDB
// lacks, into (ts + (n) * INTERVAL '1 part').
func rewriteDateFunctions(toks []token) []token {
	var out []token
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if t.kind != tkWord || i+2 >= len(toks) || bare(toks[i+1]) != "(" || i > 0 && bare(toks[i-1]) == "." {
			out = append(out, t)
			continue
		}
		pre := strings.TrimSuffix(t.text, bare(t))
		switch t.upper() {
		case "DATEADD", "TIMESTAMPADD":
			closeAt := skipParens(toks, i+1)
			args := splitArgs(toks[i+2 : closeAt])
			part, ok := datePart(args)
			if !ok || len(args) != 3 {
				break
			}
			out = append(out, token{kind: tkPunct, text: pre + "(("})
			out = append(out, rewriteDateFunctions(trimLead(args[2]))...)
			out = append(out, token{kind: tkPunct, text: ") + ("})
			out = append(out, rewriteDateFunctions(trimLead(args[1]))...)
			out = append(out, token{kind: tkPunct, text: ") * INTERVAL " + duckString("1 "+part) + ")"})
			i = closeAt
			continue
		case "SHA2", "SHA2_HEX":
			// SHA2(msg [, 256]) is the hex SHA-256 of the string's UTF-8
			// bytes, lowercase (Snowflake's docs: SHA2('a', 256) =
			// 'ca978112…48bb'); DuckDB's sha256 is the same. Other digest
			// sizes are left for DuckDB to refuse.
			closeAt := skipParens(toks, i+1)
			args := splitArgs(toks[i+2 : closeAt])
			if len(args) == 2 && (len(args[1]) != 1 || bare(args[1][0]) != "256") || len(args) > 2 {
				break
			}
			out = append(out, token{kind: tkWord, text: pre + "sha256"}, token{kind: tkPunct, text: "("})
			out = append(out, rewriteDateFunctions(trimLead(args[0]))...)
			out = append(out, token{kind: tkPunct, text: ")"})
			i = closeAt
			continue
		case "DATEDIFF", "TIMESTAMPDIFF", "DATE_TRUNC", "DATE_PART":
			if toks[i+2].kind == tkWord && i+3 < len(toks) && bare(toks[i+3]) == "," {
				out = append(out, t, toks[i+1], token{kind: tkString, text: duckString(strings.ToLower(bare(toks[i+2])))})
				i += 2
				continue
			}
		}
		out = append(out, t)
	}
	return out
}

// datePart reads the first argument of a date function: a bare word or a
// string literal.
func datePart(args [][]token) (string, bool) {
	if len(args) == 0 || len(args[0]) != 1 {
		return "", false
	}
	switch a := args[0][0]; a.kind {
	case tkWord:
		return strings.ToLower(bare(a)), true
	case tkString:
		return strings.ToLower(a.val), true
	}
	return "", false
}

// trimLead drops the separator before the first token.
func trimLead(toks []token) []token {
	if len(toks) == 0 {
		return toks
	}
	out := append([]token(nil), toks...)
	out[0].text = bare(out[0])
	return out
}

// splitArgs splits a function's argument tokens at top-level commas.
func splitArgs(toks []token) [][]token {
	return splitTop(toks, func(t token) bool { return bare(t) == "," })
}

// splitTop splits toks at the separators outside parentheses.
func splitTop(toks []token, sep func(token) bool) [][]token {
	var parts [][]token
	depth, start := 0, 0
	for i, t := range toks {
		switch {
		case bare(t) == "(":
			depth++
		case bare(t) == ")":
			depth--
		case depth == 0 && sep(t):
			parts = append(parts, toks[start:i])
			start = i + 1
		}
	}
	return append(parts, toks[start:])
}

// rewriteFunctions renames the functions in functionRewrites, wrapping
// their argument lists where DuckDB needs two calls.
func rewriteFunctions(toks []token) []token {
	closers := map[int]string{} // index of ")" → extra text after it
	var out []token
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		rw, ok := functionRewrites[t.upper()]
		if t.kind == tkWord && ok && i+1 < len(toks) && bare(toks[i+1]) == "(" && (i == 0 || bare(toks[i-1]) != ".") {
			pre := strings.TrimSuffix(t.text, bare(t))
			out = append(out, token{kind: tkWord, text: pre + rw[0]})
			closeAt := skipParens(toks, i+1)
			closers[closeAt] = rw[1]
			i++ // the "(" is part of rw[0]
			continue
		}
		if extra, ok := closers[i]; ok {
			t.text = strings.TrimSuffix(t.text, ")") + extra
		}
		out = append(out, t)
	}
	return out
}

// isCreateTable reports CREATE [OR REPLACE] [TRANSIENT|TEMPORARY|…] TABLE.
func isCreateTable(toks []token) bool {
	if len(toks) == 0 || !toks[0].is("CREATE") {
		return false
	}
	for _, t := range toks[1:] {
		switch t.upper() {
		case "OR", "REPLACE", "TRANSIENT", "TEMPORARY", "TEMP", "LOCAL", "GLOBAL", "VOLATILE":
			continue
		case "TABLE":
			return true
		}
		return false
	}
	return false
}

// stripConstraints removes PRIMARY KEY, UNIQUE and FOREIGN KEY constraints
// (Snowflake does not enforce them, DuckDB would), the TRANSIENT keyword and
// Snowflake-only options from a CREATE TABLE.
func stripConstraints(toks []token) []token {
	var out []token
	depth := 0
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch bare(t) {
		case "(":
			depth++
		case ")":
			depth--
		}
		if depth == 0 && t.is("TRANSIENT") {
			continue
		}
		if n := snowflakeTableOption(toks, i, depth); n > 0 {
			i += n - 1
			continue
		}
		if depth != 1 {
			out = append(out, t)
			continue
		}
		// Table-level constraint: an element starting with CONSTRAINT name,
		// PRIMARY KEY, UNIQUE or FOREIGN KEY, right after "(" or ",".
		prev := ""
		if len(out) > 0 {
			prev = bare(out[len(out)-1])
		}
		if prev == "," || prev == "(" {
			j := i
			if t.is("CONSTRAINT") && i+2 < len(toks) {
				j = i + 2
			}
			if toks[j].is("PRIMARY") || toks[j].is("UNIQUE") || toks[j].is("FOREIGN") {
				end := endOfElement(toks, j)
				if prev == "," {
					out = out[:len(out)-1]
				}
				i = end - 1
				if prev == "(" && end < len(toks) && bare(toks[end]) == "," {
					i = end // drop the following comma instead
				}
				continue
			}
		}
		// Column-level: PRIMARY KEY, UNIQUE, REFERENCES t(c), CONSTRAINT name.
		switch {
		case t.is("CONSTRAINT") && i+2 < len(toks) && (toks[i+2].is("PRIMARY") || toks[i+2].is("UNIQUE") || toks[i+2].is("REFERENCES") || toks[i+2].is("FOREIGN")):
			i++ // drop CONSTRAINT name; the constraint itself follows
		case t.is("PRIMARY") && i+1 < len(toks) && toks[i+1].is("KEY"):
			i++
		case t.is("UNIQUE"):
		case t.is("REFERENCES"):
			i++ // table name
			if i+1 < len(toks) && bare(toks[i+1]) == "(" {
				i = skipParens(toks, i+1)
			}
		default:
			out = append(out, t)
		}
	}
	return out
}

// snowflakeTableOption returns how many tokens at i form a Snowflake-only
// table or column option DuckDB does not know (CLUSTER BY (…), COMMENT =
// '…', DATA_RETENTION_TIME_IN_DAYS = n, CHANGE_TRACKING = b, COPY GRANTS,
// column COMMENT '…'), or 0.
func snowflakeTableOption(toks []token, i, depth int) int {
	t := toks[i]
	next := func(k int) token {
		if i+k < len(toks) {
			return toks[i+k]
		}
		return token{}
	}
	switch {
	case depth == 0 && t.is("CLUSTER") && next(1).is("BY") && bare(next(2)) == "(":
		return skipParens(toks, i+2) - i + 1
	case depth == 0 && (t.is("COMMENT") || t.is("DATA_RETENTION_TIME_IN_DAYS") || t.is("CHANGE_TRACKING")) && bare(next(1)) == "=":
		return 3
	case depth == 0 && t.is("COPY") && next(1).is("GRANTS"):
		return 2
	case depth == 1 && t.is("COMMENT") && next(1).kind == tkString:
		return 2
	}
	return 0
}

// endOfElement returns the index of the "," or ")" that ends the column list
// element containing i.
func endOfElement(toks []token, i int) int {
	depth := 0
	for j := i; j < len(toks); j++ {
		switch bare(toks[j]) {
		case "(":
			depth++
		case ")":
			if depth == 0 {
				return j
			}
			depth--
		case ",":
			if depth == 0 {
				return j
			}
		}
	}
	return len(toks)
}

// nameValuesColumns gives a VALUES list in FROM/USING Snowflake's column
// names COLUMN1, COLUMN2, … (DuckDB names them col0, col1, …) unless the
// statement names them itself: (VALUES …) [AS] alias (a, b) is left alone,
// (VALUES …) [[AS] alias] gets the column list, and the parenthesis-free
// FROM VALUES (…), (…) is wrapped.
func nameValuesColumns(toks []token) []token {
	var out []token
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case bare(t) == "(" && i+2 < len(toks) && toks[i+1].is("VALUES") && bare(toks[i+2]) == "(":
			end := skipParens(toks, i)
			cols := valuesColumns(toks, i+2)
			out = append(out, toks[i:end+1]...)
			i = end
			out = append(out, valuesAlias(toks, &i, cols)...)
		case t.is("VALUES") && i > 0 && toks[i-1].is("FROM") && i+1 < len(toks) && bare(toks[i+1]) == "(":
			// FROM VALUES (…), (…): rows up to the first token after a row
			// that is not a comma followed by "(".
			end := skipParens(toks, i+1)
			for end+2 < len(toks) && bare(toks[end+1]) == "," && bare(toks[end+2]) == "(" {
				end = skipParens(toks, end+2)
			}
			cols := valuesColumns(toks, i+1)
			out = append(out, token{kind: tkPunct, text: " ("})
			out = append(out, toks[i:end+1]...)
			out = append(out, token{kind: tkPunct, text: ")"})
			i = end
			out = append(out, valuesAlias(toks, &i, cols)...)
		default:
			out = append(out, t)
		}
	}
	return out
}

// valuesAlias returns the tokens that follow a VALUES list at *i: its alias
// (consumed) and the COLUMNn list, or nothing when the statement lists the
// columns itself.
func valuesAlias(toks []token, i *int, cols int) []token {
	j := *i + 1
	var alias []token
	if j < len(toks) && toks[j].is("AS") {
		alias = append(alias, toks[j])
		j++
	}
	if j < len(toks) && (toks[j].kind == tkWord && !clauseWord[toks[j].upper()] || toks[j].kind == tkQuoted) {
		alias = append(alias, toks[j])
		j++
	} else if len(alias) > 0 {
		return nil // AS without a name: leave the statement to DuckDB
	}
	if j < len(toks) && bare(toks[j]) == "(" {
		return nil // the statement names the columns
	}
	if len(alias) == 0 {
		alias = []token{{kind: tkWord, text: " AS"}, {kind: tkWord, text: " sftest_values"}}
	}
	*i = j - 1
	names := make([]string, cols)
	for c := range names {
		names[c] = fmt.Sprintf("column%d", c+1)
	}
	return append(alias, token{kind: tkPunct, text: "(" + strings.Join(names, ", ") + ")"})
}

// clauseWord lists the words that can follow a FROM item where an alias
// could stand.
var clauseWord = map[string]bool{
	"WHERE": true, "ON": true, "JOIN": true, "LEFT": true, "RIGHT": true, "INNER": true, "FULL": true, "CROSS": true,
	"NATURAL": true, "GROUP": true, "ORDER": true, "UNION": true, "EXCEPT": true, "MINUS": true, "INTERSECT": true,
	"LIMIT": true, "HAVING": true, "QUALIFY": true, "WHEN": true, "USING": true, "WINDOW": true, "OFFSET": true, "FETCH": true,
}

// valuesColumns counts the values of the row tuple opening at i (an
// unclosed "(" last in the statement counts one).
func valuesColumns(toks []token, i int) int {
	return len(splitArgs(toks[i+1 : max(i+1, skipParens(toks, i))]))
}
