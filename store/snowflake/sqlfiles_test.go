package snowflake

import (
	"strings"
	"testing"

	sqlfiles "github.com/dvtrun/dvtrun/sql"
)

// TestStoreSQLHasNoQuotedIdentifiers: Snowflake resolves "name" exactly and
// name as NAME, where the test server (DuckDB) matches both ways; the state
// store's SQL avoids the difference by never quoting an identifier, so what
// passes on the test server names the same objects on Snowflake. (The
// warehouse quotes relation and seed column names through ident, which
// upper-cases simple names for the same reason.)
func TestStoreSQLHasNoQuotedIdentifiers(t *testing.T) {
	for text, want := range map[string]bool{
		`SELECT "a" FROM t`: true, `SELECT '"a''"' FROM t -- "b"`: false, "SELECT /* \"a\" */ a": false, `SELECT 'x\'"' AS "y"`: true,
	} {
		if got := quotedIdent(text) >= 0; got != want {
			t.Fatalf("quotedIdent(%q) found one: %v, want %v", text, got, want)
		}
	}
	texts := map[string]string{}
	for _, f := range []string{"store.sql", "projection.sql", "bundles.sql"} {
		q, err := sqlfiles.Queries(sqlfiles.Snowflake, f)
		if err != nil {
			t.Fatal(err)
		}
		for name, text := range q {
			texts[f+":"+name] = text
		}
	}
	migs, err := sqlfiles.Migrations(sqlfiles.Snowflake)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range migs {
		texts[m.Name] = m.SQL
	}
	for name, text := range texts {
		if i := quotedIdent(text); i >= 0 {
			t.Errorf("%s quotes an identifier at %q", name, text[i:min(i+30, len(text))])
		}
	}
}

// quotedIdent returns the offset of a double quote outside string literals
// and comments, or -1.
func quotedIdent(sql string) int {
	for i := 0; i < len(sql); i++ {
		switch {
		case strings.HasPrefix(sql[i:], "--"):
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
		case strings.HasPrefix(sql[i:], "/*"):
			if end := strings.Index(sql[i+2:], "*/"); end >= 0 {
				i += end + 3
			}
		case sql[i] == '\'':
			for i++; i < len(sql) && (sql[i] != '\'' || strings.HasPrefix(sql[i:], "''")); i++ {
				if sql[i] == '\'' || sql[i] == '\\' {
					i++
				}
			}
		case sql[i] == '"':
			return i
		}
	}
	return -1
}
