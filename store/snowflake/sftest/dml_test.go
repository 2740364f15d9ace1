package sftest

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/snowflakedb/gosnowflake"
)

// TestRowsAffected checks the statement type ids and count columns that make
// RowsAffected work for each kind of DML.
func TestRowsAffected(t *testing.T) {
	_, db := openDB(t)
	mustExec(t, db, "CREATE TABLE t (id INT PRIMARY KEY, v STRING)")
	tests := []struct {
		name string
		sql  string
		want int64
	}{
		{"insert", "INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')", 3},
		{"update", "UPDATE t SET v = 'z' WHERE id >= 2", 2},
		{"delete", "DELETE FROM t WHERE id = 3", 1},
		{"merge insert", `MERGE INTO t USING (SELECT 4 AS id, 'd' AS v UNION ALL SELECT 1, 'dup') s ON t.id = s.id
			WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, s.v)`, 1},
		{"merge update", `MERGE INTO t USING (SELECT 4 AS id, 'e' AS v) s ON t.id = s.id
			WHEN MATCHED THEN UPDATE SET v = s.v`, 1},
		{"insert select none", "INSERT INTO t SELECT * FROM t WHERE 1 = 0", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := mustExec(t, db, tc.sql).RowsAffected()
			if err != nil {
				t.Fatalf("RowsAffected: %v", err)
			}
			if n != tc.want {
				t.Fatalf("RowsAffected = %d, want %d", n, tc.want)
			}
		})
	}
	// MERGE reports a count per kind of clause, under Snowflake's names.
	rows, err := db.QueryContext(ctxT(t), `MERGE INTO t USING (SELECT 4 AS id, 'f' AS v UNION ALL SELECT 9, 'g') s
		ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, s.v)`)
	if err != nil {
		t.Fatal(err)
	}
	cols, _ := rows.Columns()
	var ins, upd int64
	if !rows.Next() {
		t.Fatal("MERGE returned no count row")
	}
	if err := rows.Scan(&ins, &upd); err != nil {
		t.Fatal(err)
	}
	_ = rows.Close()
	if len(cols) != 2 || cols[0] != "number of rows inserted" || cols[1] != "number of rows updated" || ins != 1 || upd != 1 {
		t.Fatalf("MERGE result %v = %d, %d; want inserted 1, updated 1", cols, ins, upd)
	}

	// PRIMARY KEY is not enforced, as in Snowflake.
	mustExec(t, db, "INSERT INTO t VALUES (1, 'again')")
	var n int
	if err := db.QueryRowContext(ctxT(t), "SELECT COUNT(*) FROM t WHERE id = 1").Scan(&n); err != nil || n != 2 {
		t.Fatalf("duplicate key rows = %d, %v; want 2", n, err)
	}
}

// TestStatementsReturningRows checks that rows come back whatever the
// statement starts with.
func TestStatementsReturningRows(t *testing.T) {
	_, db := openDB(t)
	tests := []struct{ name, sql string }{
		{"with", "WITH x AS (SELECT 7 AS n) SELECT n FROM x"},
		{"line comment", "-- leading comment\nSELECT 7"},
		{"slash comment", "// snowflake comment\nSELECT 7"},
		{"block comment", "/* c */ SELECT 7"},
		{"parenthesis", "(SELECT 7)"},
		{"union in parens", "(SELECT 7) UNION ALL (SELECT 7) LIMIT 1"},
		{"trailing semicolon", "SELECT 7;"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var n int
			if err := db.QueryRowContext(ctxT(t), tc.sql).Scan(&n); err != nil {
				t.Fatalf("%q: %v", tc.sql, err)
			}
			if n != 7 {
				t.Fatalf("got %d", n)
			}
		})
	}
}

// TestStringLiterals checks that literals reach DuckDB with Snowflake's
// meaning: doubled quotes and backslash-quote are quotes, a double backslash
// is one backslash, backslash-n a newline.
func TestStringLiterals(t *testing.T) {
	_, db := openDB(t)
	tests := []struct{ name, lit, want string }{
		{"doubled quote", `'it''s'`, "it's"},
		{"backslash quote", `'it\'s'`, "it's"},
		{"backslash", `'a\\b'`, `a\b`},
		{"escaped newline", `'a\nb'`, "a\nb"},
		{"raw newline", "'a\nb'", "a\nb"},
		{"double quotes", `'say "hi"'`, `say "hi"`},
		{"hex, unicode and octal escapes", `'\x41\u00e9\101\q'`, "AéAq"},
		{"semicolon and comment markers", `'a; -- b /* c */'`, "a; -- b /* c */"},
		{"dollar quoted", `$$it's \n$$`, `it's \n`},
		{"question mark", `'?'`, "?"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			if err := db.QueryRowContext(ctxT(t), "SELECT "+tc.lit).Scan(&got); err != nil {
				t.Fatalf("select %s: %v", tc.lit, err)
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
	// A bound value is stored verbatim.
	mustExec(t, db, "CREATE TABLE s (v STRING)")
	v := "q' \" \\ \n ; --"
	mustExec(t, db, "INSERT INTO s VALUES (?)", v)
	var got string
	if err := db.QueryRowContext(ctxT(t), "SELECT v FROM s").Scan(&got); err != nil || got != v {
		t.Fatalf("bound string = %q, %v; want %q", got, err, v)
	}
}

// TestTransactionsPerSession checks that each session has its own
// transaction: uncommitted rows are invisible to others and one session's
// ROLLBACK does not undo another's writes.
func TestTransactionsPerSession(t *testing.T) {
	_, db := openDB(t)
	ctx := ctxT(t)
	mustExec(t, db, "CREATE TABLE tx (id INT)")

	tx1, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	tx2, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, tx1, "INSERT INTO tx VALUES (1)")
	mustExec(t, tx2, "INSERT INTO tx VALUES (2)")

	count := func(q interface {
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}) int {
		t.Helper()
		var n int
		if err := q.QueryRowContext(ctx, "SELECT COUNT(*) FROM tx").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(db); n != 0 {
		t.Fatalf("uncommitted rows visible outside: %d", n)
	}
	if n := count(tx1); n != 1 {
		t.Fatalf("tx1 sees %d rows, want its own 1", n)
	}
	if err := tx2.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := tx1.Commit(); err != nil {
		t.Fatal(err)
	}
	var ids []int
	rows, err := db.QueryContext(ctx, "SELECT id FROM tx")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("after commit/rollback rows = %v, want [1]", ids)
	}
}

// TestUpdateWaitsForLock checks Snowflake's lock wait: a second
// transaction's UPDATE of the same table blocks until the first commits,
// then runs on the committed data.
func TestUpdateWaitsForLock(t *testing.T) {
	_, db := openDB(t)
	ctx := ctxT(t)
	mustExec(t, db, "CREATE TABLE seq (run_id STRING, next_seq INT)")
	mustExec(t, db, "INSERT INTO seq VALUES ('r1', 1)")

	tx1, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	tx2, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, tx1, "UPDATE seq SET next_seq = next_seq + 1 WHERE run_id = 'r1'")
	done := make(chan error, 1)
	go func() {
		_, err := tx2.ExecContext(ctx, "UPDATE seq SET next_seq = next_seq + 10 WHERE run_id = 'r1'")
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("second UPDATE did not wait for the lock: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := tx1.Commit(); err != nil {
		t.Fatalf("first commit: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("second UPDATE after the lock was released: %v", err)
	}
	if err := tx2.Commit(); err != nil {
		t.Fatalf("second commit: %v", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT next_seq FROM seq").Scan(&n); err != nil || n != 12 {
		t.Fatalf("next_seq = %d, %v; want 12 (both increments)", n, err)
	}
}

// TestConflictErrors checks the cases DuckDB cannot wait out: they fail with
// Snowflake's 000625/57014, which the store treats as retryable, and the
// failed transaction ends cleanly.
func TestConflictErrors(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, db *sql.DB, tx1, tx2 *sql.Tx) error // returns tx2's error
	}{
		{"stale snapshot", func(t *testing.T, db *sql.DB, tx1, tx2 *sql.Tx) error {
			// tx2 reads first, so its snapshot predates tx1's commit.
			var n int
			if err := tx2.QueryRowContext(ctxT(t), "SELECT next_seq FROM seq").Scan(&n); err != nil {
				t.Fatal(err)
			}
			mustExec(t, tx1, "UPDATE seq SET next_seq = next_seq + 1")
			if err := tx1.Commit(); err != nil {
				t.Fatal(err)
			}
			_, err := tx2.ExecContext(ctxT(t), "UPDATE seq SET next_seq = next_seq + 1")
			return err
		}},
		{"lock timeout", func(t *testing.T, db *sql.DB, tx1, tx2 *sql.Tx) error {
			mustExec(t, tx2, "ALTER SESSION SET LOCK_TIMEOUT = 0")
			mustExec(t, tx1, "UPDATE seq SET next_seq = next_seq + 1")
			start := time.Now()
			_, err := tx2.ExecContext(ctxT(t), "UPDATE seq SET next_seq = next_seq + 1")
			if d := time.Since(start); d > time.Second {
				t.Fatalf("LOCK_TIMEOUT = 0 waited %v", d)
			}
			if cerr := tx1.Commit(); cerr != nil {
				t.Fatal(cerr)
			}
			return err
		}},
		{"deadlock", func(t *testing.T, db *sql.DB, tx1, tx2 *sql.Tx) error {
			mustExec(t, tx1, "UPDATE seq SET next_seq = next_seq + 1")
			mustExec(t, tx2, "DELETE FROM other")
			waiting := make(chan error, 1)
			go func() {
				_, err := tx1.ExecContext(ctxT(t), "DELETE FROM other")
				waiting <- err
			}()
			time.Sleep(100 * time.Millisecond) // let tx1 queue on tx2's lock
			_, err := tx2.ExecContext(ctxT(t), "UPDATE seq SET next_seq = next_seq + 1")
			if err == nil {
				t.Fatal("deadlock not detected")
			}
			if rerr := tx2.Rollback(); rerr != nil {
				t.Fatal(rerr)
			}
			if werr := <-waiting; werr != nil {
				t.Fatalf("survivor of the deadlock: %v", werr)
			}
			if cerr := tx1.Commit(); cerr != nil {
				t.Fatal(cerr)
			}
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, db := openDB(t)
			ctx := ctxT(t)
			mustExec(t, db, "CREATE TABLE seq (next_seq INT)")
			mustExec(t, db, "CREATE TABLE other (x INT)")
			mustExec(t, db, "INSERT INTO seq VALUES (1)")
			tx1, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			tx2, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = tc.run(t, db, tx1, tx2)
			var se *gosnowflake.SnowflakeError
			if !errors.As(err, &se) || se.Number != 625 || se.SQLState != "57014" {
				t.Fatalf("error = %v, want SnowflakeError 000625/57014", err)
			}
			_ = tx2.Rollback()
			var n int
			if err := db.QueryRowContext(ctx, "SELECT next_seq FROM seq").Scan(&n); err != nil || n != 2 {
				t.Fatalf("next_seq = %d, %v; want 2 (only the winner's update)", n, err)
			}
		})
	}
}

// TestFailedStatementInTransaction checks what follows a failed statement
// in a transaction: a compilation error leaves the transaction usable, as in
// Snowflake; an execution error, which aborts DuckDB's transaction, makes
// every later statement and COMMIT fail instead of losing writes silently.
func TestFailedStatementInTransaction(t *testing.T) {
	tests := []struct {
		name      string
		bad       string
		badCode   int
		afterCode int // of the next INSERT and of COMMIT; 0: they succeed
		wantRows  int
	}{
		{"compilation error", "SELECT * FROM no_such_table", 2003, 0, 2},
		{"execution error", "SELECT 'abc'::INT", 100038, 603, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, db := openDB(t)
			ctx := ctxT(t)
			mustExec(t, db, "CREATE TABLE f (id INT)")
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			mustExec(t, conn, "BEGIN")
			mustExec(t, conn, "INSERT INTO f VALUES (1)")
			if _, err := conn.ExecContext(ctx, tc.bad); sfCode(err) != tc.badCode {
				t.Fatalf("bad statement: %v, want %d", err, tc.badCode)
			}
			_, err = conn.ExecContext(ctx, "INSERT INTO f VALUES (2)")
			if got := max(sfCode(err), 0); got != tc.afterCode {
				t.Fatalf("insert after: %v, want code %d", err, tc.afterCode)
			}
			_, err = conn.ExecContext(ctx, "COMMIT")
			if got := max(sfCode(err), 0); got != tc.afterCode {
				t.Fatalf("commit: %v, want code %d", err, tc.afterCode)
			}
			var n int
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM f").Scan(&n); err != nil || n != tc.wantRows {
				t.Fatalf("rows = %d, %v; want %d", n, err, tc.wantRows)
			}
			mustExec(t, conn, "INSERT INTO f VALUES (3)") // the session works again
		})
	}
}

// TestDDLCommitsTransaction checks Snowflake's implicit commit: DDL in an
// open transaction commits it first and leaves the session in autocommit.
func TestDDLCommitsTransaction(t *testing.T) {
	_, db := openDB(t)
	ctx := ctxT(t)
	mustExec(t, db, "CREATE TABLE a (id INT)")
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mustExec(t, conn, "BEGIN")
	mustExec(t, conn, "INSERT INTO a VALUES (1)")
	mustExec(t, conn, "CREATE TABLE b (id INT)")
	mustExec(t, conn, "INSERT INTO a VALUES (2)") // autocommit again
	mustExec(t, conn, "ROLLBACK")                 // nothing to roll back
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM a").Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows = %d, %v; want 2", n, err)
	}
}
