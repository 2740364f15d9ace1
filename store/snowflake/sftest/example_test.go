package sftest_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"github.com/snowflakedb/gosnowflake"

	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
)

// Example starts a server, connects through gosnowflake and runs a
// multi-statement batch (in a test, sftest.Start(t) and srv.OpenDB do the
// set-up and clean-up).
func Example() {
	srv, err := sftest.New(sftest.Options{})
	if err != nil {
		log.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	db, err := sql.Open("snowflake", srv.DSN("DVT", "PUBLIC"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	ctx, _ := gosnowflake.WithMultiStatement(context.Background(), 0)
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (id NUMBER, payload VARIANT);
		INSERT INTO t SELECT 1, PARSE_JSON(HEX_DECODE_STRING('7b2261223a317d'))`); err != nil {
		log.Fatal(err)
	}
	var a string
	if err := db.QueryRow("SELECT payload:a::string FROM t").Scan(&a); err != nil {
		log.Fatal(err)
	}
	fmt.Println(a, srv.QueryRequests())
	// Output: 1 2
}
