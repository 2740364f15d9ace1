package snowflake_test

import (
	"testing"

	"github.com/dvtrun/dvtrun/engine/plan"
)

// TestDialectLiterals: a var rendered by the warehouse's dialect reads back
// as the value it was. Snowflake reads backslash escapes in single-quoted
// strings (docs.snowflake.com/en/sql-reference/data-types-text, "Escape
// sequences in single-quoted string constants": \' \" \\ \n \t \0 \ooo
// \xhh \uhhhh, any other \c is c), so a backslash is doubled before the
// quotes are; a value ending in a backslash must not escape the closing
// quote.
func TestDialectLiterals(t *testing.T) {
	w, _ := openWarehouse(t)
	for _, v := range []string{"plain", "it's", `a\b`, `a\'; select 1; --`, `ends with \`, `\\`, `\n is not a newline`, "line\nbreak", `\u0041`} {
		lit, err := plan.SQLLiteral(w, v)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		if err := w.DB().QueryRowContext(ctx, "SELECT "+lit).Scan(&got); err != nil {
			t.Fatalf("SELECT %s: %v", lit, err)
		}
		if got != v {
			t.Errorf("%q rendered as %s reads back as %q", v, lit, got)
		}
	}
	for _, c := range []struct {
		v    any
		want string
	}{{true, "TRUE"}, {false, "FALSE"}, {nil, "NULL"}, {42, "42"}, {2.5, "2.5"}} {
		if got, _ := plan.SQLLiteral(w, c.v); got != c.want {
			t.Errorf("%v renders as %s, want %s", c.v, got, c.want)
		}
	}
	if got := w.Source("", "raw", "orders"); got != `"ANALYTICS"."RAW"."ORDERS"` {
		t.Errorf("source in the DSN's database: %s", got)
	}
	if got := w.Source("lake", "Mixed Case", "t"); got != `"LAKE"."Mixed Case"."T"` {
		t.Errorf("source with its own database: %s", got)
	}
}
