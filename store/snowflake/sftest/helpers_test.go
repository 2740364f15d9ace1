package sftest

import (
	"context"
	"database/sql"
	"testing"
	"time"
)

// openDB starts a server and opens a database/sql handle on it through
// gosnowflake.
func openDB(t *testing.T) (*Server, *sql.DB) {
	t.Helper()
	srv := Start(t)
	db := srv.OpenDB(t, "DVT", "PUBLIC")
	return srv, db
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustExec(t *testing.T, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, q string, args ...any) sql.Result {
	t.Helper()
	res, err := db.ExecContext(ctxT(t), q, args...)
	if err != nil {
		t.Fatalf("exec %q: %v", q, err)
	}
	return res
}
