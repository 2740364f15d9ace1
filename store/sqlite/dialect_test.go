package sqlite

import (
	"context"
	"testing"

	"github.com/dvtrun/dvtrun/engine/plan"
)

// TestDialectLiterals: a var rendered by the warehouse's dialect reads back
// as the value it was (SQLite reads no backslash escapes: only the quote
// is doubled).
func TestDialectLiterals(t *testing.T) {
	w := openWarehouseT(t)
	for _, v := range []any{"it's", `a\'; select 1; --`, `ends with \`, "line\nbreak", int64(42), 2.5, true, nil} {
		lit, err := plan.SQLLiteral(w, v)
		if err != nil {
			t.Fatal(err)
		}
		var got any
		if err := w.DB().QueryRowContext(context.Background(), "SELECT "+lit).Scan(&got); err != nil {
			t.Fatalf("SELECT %s: %v", lit, err)
		}
		want := v
		if v == true {
			want = int64(1) // SQLite has no boolean type
		}
		if got != want {
			t.Errorf("%#v rendered as %s reads back as %#v", v, lit, got)
		}
	}
}
