package sftest

import (
	"testing"
)

func TestLoginAndSelect(t *testing.T) {
	_, db := openDB(t)
	var n int64
	var s string
	if err := db.QueryRowContext(ctxT(t), "SELECT 1 + 1, 'x'").Scan(&n, &s); err != nil {
		t.Fatalf("select: %v", err)
	}
	if n != 2 || s != "x" {
		t.Fatalf("got %d %q", n, s)
	}
}
