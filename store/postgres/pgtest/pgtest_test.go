package pgtest_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/dvtrun/dvtrun/store/postgres/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestDatabasesAreSeparate: each DSN is its own database, on a server that
// runs with fsync off and not as root.
func TestDatabasesAreSeparate(t *testing.T) {
	ctx := context.Background()
	for _, dsn := range []string{pgtest.DSN(t), pgtest.URL(t)} {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.ExecContext(ctx, "CREATE TABLE only_here (x int)"); err != nil {
			t.Fatalf("%s: %v", dsn, err)
		}
		var fsync string
		if err := db.QueryRowContext(ctx, "SHOW fsync").Scan(&fsync); err != nil || fsync != "off" {
			t.Fatalf("fsync = %q, %v; want off", fsync, err)
		}
	}
}
