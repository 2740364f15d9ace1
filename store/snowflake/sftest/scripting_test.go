package sftest

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/snowflakedb/gosnowflake"
)

// Each behaviour of the Snowflake Scripting subset is pinned to the
// documentation it follows, quoted in the case.

func TestScriptingBlocks(t *testing.T) {
	cases := []struct {
		name string
		doc  string // the Snowflake documentation the case follows
		sql  string
		want []string // rows of the single result column
	}{
		{
			name: "statement order, DECLARE, LET, assignment and :var in SQL",
			doc: `Understanding blocks: "DECLARE: If you need to use any variables … you can either declare these in the DECLARE section ` +
				`of the block or in the BEGIN … END section"; variables are used in SQL with a colon prefix.`,
			sql: `EXECUTE IMMEDIATE $$
DECLARE
  x INTEGER DEFAULT 1;
BEGIN
  LET y INTEGER := x + 1;
  INSERT INTO s1 (a) VALUES (:x);
  INSERT INTO s1 (a) VALUES (:y);
  x := (SELECT SUM(a) FROM s1);
  RETURN x;
END;
$$`,
			want: []string{"3"},
		},
		{
			name: "SQLROWCOUNT after DML, NULL after any other statement",
			doc: `Determining the number of rows affected by DML commands: "SQLROWCOUNT: Number of rows affected by the last DML ` +
				`statement"; "When the bundle [2025_01, enabled by default] is enabled, the variables return NULL when a ` +
				`non-DML statement is executed after the last DML statement".`,
			sql: `EXECUTE IMMEDIATE $$
DECLARE
  ins INTEGER;
  upd INTEGER;
  none INTEGER DEFAULT 7;
BEGIN
  INSERT INTO s1 (a) VALUES (1), (2), (3);
  ins := SQLROWCOUNT;
  UPDATE s1 SET a = a + 10 WHERE a >= 2;
  upd := SQLROWCOUNT;
  SELECT COUNT(*) FROM s1;
  none := SQLROWCOUNT;
  RETURN ins || ',' || upd || ',' || COALESCE(CAST(none AS VARCHAR), 'NULL');
END;
$$`,
			want: []string{"3,2,NULL"},
		},
		{
			name: "SELECT … INTO :variables",
			doc:  `INTO: "Sets Snowflake Scripting variables to the values in a row returned by a SELECT statement." "The SELECT statement must return a single row."`,
			sql: `EXECUTE IMMEDIATE $$
DECLARE
  n INTEGER;
  m INTEGER;
BEGIN
  INSERT INTO s1 (a) VALUES (4), (5);
  SELECT COUNT(*), MAX(a) INTO :n, :m FROM s1 WHERE a > 0;
  RETURN n * 10 + m;
END;
$$`,
			want: []string{"25"},
		},
		{
			name: "a TIMESTAMP_TZ variable keeps its instant in SQL and in DATEADD",
			doc: `Working with variables: a variable's type can be any SQL data type, and "you can use variables in expressions, ` +
				`Snowflake Scripting statements, and SQL statements"; INTO sets it from a SELECT; DATEADD: "Adds the specified ` +
				`value for the specified date or time part to a date, time, or timestamp." Checked to the microsecond: the ` +
				`server's DATEADD drops nanoseconds (package doc, Known gaps).`,
			sql: `EXECUTE IMMEDIATE $$
DECLARE
  ts TIMESTAMP_TZ(9);
BEGIN
  SELECT MAX(c.ts) INTO :ts
    FROM (SELECT CAST('2026-04-01 10:00:00.123456789+02:00' AS TIMESTAMP_TZ(9)) AS ts) c LEFT JOIN s1 ON s1.a = 1;
  RETURN (CASE WHEN :ts = CAST('2026-04-01 08:00:00.123456789+00:00' AS TIMESTAMP_TZ(9)) THEN 'instant kept' ELSE 'instant lost' END)
      || ', ' || (CASE WHEN DATEADD(microsecond, 1500000, :ts) >= CAST('2026-04-01 08:00:01.623456+00:00' AS TIMESTAMP_TZ(9))
                        AND DATEADD(microsecond, 1500000, :ts) < CAST('2026-04-01 08:00:01.623457+00:00' AS TIMESTAMP_TZ(9))
                       THEN 'added' ELSE 'not added' END);
END;
$$`,
			want: []string{"instant kept, added"},
		},
		{
			name: "RETURN TABLE(resultset)",
			doc: `Working with RESULTSETs: "For a RESULTSET, the query is executed when you assign the query to the RESULTSET"; ` +
				`"Use the TABLE(...) syntax to retrieve the results as a table."`,
			sql: `EXECUTE IMMEDIATE $$
BEGIN
  INSERT INTO s2 (a) VALUES (1), (2);
  LET res RESULTSET := (SELECT a FROM s2 ORDER BY a);
  INSERT INTO s2 (a) VALUES (3);
  RETURN TABLE(res);
END;
$$`,
			want: []string{"1", "2"},
		},
		{
			name: "IF / ELSEIF / ELSE",
			doc:  `IF (Snowflake Scripting): IF ( <condition> ) THEN … [ ELSEIF ( <condition> ) THEN … ] [ ELSE … ] END IF;`,
			sql: `EXECUTE IMMEDIATE $$
DECLARE
  n INTEGER DEFAULT 2;
BEGIN
  IF (n = 1) THEN
    RETURN 'one';
  ELSEIF (n = 2) THEN
    RETURN 'two';
  ELSE
    RETURN 'many';
  END IF;
END;
$$`,
			want: []string{"two"},
		},
		{
			name: "a handler runs instead of the statements after the failure",
			doc: `Handling exceptions: "An exception prevents the next lines of code from executing." "If the block in which the ` +
				`exception occurred has a handler for that exception, then execution resumes at the beginning of that exception handler."`,
			sql: `EXECUTE IMMEDIATE $$
DECLARE
  my_exception EXCEPTION (-20002, 'Raised MY_EXCEPTION.');
BEGIN
  RAISE my_exception;
  RETURN 'not reached';
EXCEPTION
  WHEN my_exception THEN
    RETURN 'caught ' || SQLCODE;
END;
$$`,
			want: []string{"caught -20002"},
		},
		{
			name: "anonymous block without EXECUTE IMMEDIATE",
			doc:  `BEGIN … END: "A BEGIN/END block can be the top-level construct inside an anonymous block."`,
			sql: `BEGIN
  RETURN 'Completed';
END;`,
			want: []string{"Completed"},
		},
		{
			name: "no RETURN gives NULL",
			doc:  `EXECUTE IMMEDIATE: "EXECUTE IMMEDIATE returns the result of the executed statement."`,
			sql:  `EXECUTE IMMEDIATE $$ BEGIN CREATE TABLE IF NOT EXISTS s3 (a INT); END; $$`,
			want: []string{"NULL"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, db := openDB(t)
			for _, tbl := range []string{"s1", "s2"} {
				mustExec(t, db, "CREATE TABLE "+tbl+" (a INT)")
			}
			got := queryColumn(t, db, c.sql)
			if strings.Join(got, ",") != strings.Join(c.want, ",") {
				t.Fatalf("got %v, want %v\ndocumentation: %s", got, c.want, c.doc)
			}
		})
	}
}

func queryColumn(t *testing.T, db interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, q string) []string {
	t.Helper()
	rows, err := db.QueryContext(ctxT(t), q)
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v sql.NullString
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		if !v.Valid {
			v.String = "NULL"
		}
		out = append(out, v.String)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestScriptingTransactions: BEGIN TRANSACTION/COMMIT inside a block, and
// what a failure inside the block's transaction leaves behind.
func TestScriptingTransactions(t *testing.T) {
	cases := []struct {
		name    string
		doc     string
		block   string
		wantErr string // Snowflake error code, "" for success
		wantN   int    // rows in t afterwards, seen from another session
	}{
		{
			name: "transaction inside the block commits",
			doc: `BEGIN … END: "the statements are grouped into a block and are also inside a transaction within that block: ` +
				`BEGIN TRANSACTION; … COMMIT;"`,
			block: `BEGIN
  BEGIN TRANSACTION;
  UPDATE t SET a = a WHERE a = 0;
  INSERT INTO t (a) VALUES (1);
  INSERT INTO t (a) VALUES (2);
  COMMIT;
  RETURN 'ok';
END;`,
			wantN: 2,
		},
		{
			name: "handler rolls back and re-raises: nothing written, the original error reaches the client",
			doc: `EXCEPTION (Snowflake Scripting): a handler runs its statements and exits the block; RAISE (Snowflake ` +
				`Scripting): "RAISE; … re-raises the exception" inside a handler.`,
			block: `BEGIN
  BEGIN TRANSACTION;
  UPDATE t SET a = a WHERE a = 0;
  INSERT INTO t (a) VALUES (1);
  SELECT * FROM no_such_table;
  COMMIT;
EXCEPTION
  WHEN OTHER THEN
    ROLLBACK;
    RAISE;
END;`,
			wantErr: CodeObjectNotFound,
		},
		{
			name: "a user exception raised in the transaction: code and sqlState of the declaration",
			doc: `Handling exceptions: "DECLARE my_exception EXCEPTION (-20002, 'Raised MY_EXCEPTION.');" and an uncaught one is ` +
				`reported to the client as "-20002 (P0001): Uncaught exception of type 'MY_EXCEPTION' …".`,
			block: `DECLARE
  lease_lost EXCEPTION (-20001, 'LEASE_LOST');
BEGIN
  BEGIN TRANSACTION;
  INSERT INTO t (a) VALUES (1);
  IF ((SELECT COUNT(*) FROM t) > 0) THEN
    RAISE lease_lost;
  END IF;
  COMMIT;
EXCEPTION
  WHEN OTHER THEN
    ROLLBACK;
    RAISE;
END;`,
			wantErr: "-20001",
		},
		{
			// sftest's rule, not verified against Snowflake: an unhandled
			// failure ends the block's own transaction with a rollback, as a
			// failed multi-statement request does. dvtrun's blocks never rely
			// on it: they roll back in their handler.
			name: "unhandled failure: the block's transaction is rolled back",
			doc:  `Handling exceptions: "If there is no handler for the exception … execution of the block stops".`,
			block: `BEGIN
  BEGIN TRANSACTION;
  INSERT INTO t (a) VALUES (1);
  SELECT * FROM no_such_table;
  COMMIT;
END;`,
			wantErr: CodeObjectNotFound,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, db := openDB(t)
			mustExec(t, db, "CREATE TABLE t (a INT)")
			ctx := ctxT(t)
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_, err = conn.ExecContext(ctx, "EXECUTE IMMEDIATE $$"+c.block+"$$")
			var se *gosnowflake.SnowflakeError
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("block failed: %v (documentation: %s)", err, c.doc)
			case c.wantErr != "" && (!errors.As(err, &se) || se.Number != atoi(t, c.wantErr)):
				t.Fatalf("error %v, want code %s (documentation: %s)", err, c.wantErr, c.doc)
			}
			if c.wantErr == "-20001" && (se.SQLState != "P0001" || !strings.Contains(se.Message, "LEASE_LOST")) {
				t.Errorf("user exception: sqlState %q message %q", se.SQLState, se.Message)
			}
			// Another session sees the outcome, and can take the table
			// lock at once: the block left no transaction open.
			other := srv.OpenDB(t, "DVT", "PUBLIC")
			mustExec(t, other, "ALTER SESSION SET LOCK_TIMEOUT = 0")
			if _, err := other.ExecContext(ctx, "UPDATE t SET a = a"); err != nil {
				t.Errorf("the block left a lock behind: %v", err)
			}
			var n int
			if err := other.QueryRowContext(ctx, "SELECT COUNT(*) FROM t").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != c.wantN {
				t.Errorf("%d rows committed, want %d (documentation: %s)", n, c.wantN, c.doc)
			}
			// The session itself is usable and not in a transaction.
			if _, err := conn.ExecContext(ctx, "INSERT INTO t (a) VALUES (9)"); err != nil {
				t.Errorf("session after the block: %v", err)
			}
		})
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("wantErr %q is not an error number: %v", s, err)
	}
	return n
}

// TestScriptingIsOneRoundTrip: a block with several DML statements and a
// returned table costs one HTTP round trip ("A block is considered one
// statement, even if the body of the block contains multiple statements",
// EXECUTE IMMEDIATE), where a multi-statement request costs one more per DML
// child.
func TestScriptingIsOneRoundTrip(t *testing.T) {
	srv := Start(t)
	ct := &CountingTransport{}
	cfg := srv.Config("DVT", "PUBLIC")
	cfg.Transporter = ct
	db := sql.OpenDB(gosnowflake.NewConnector(gosnowflake.SnowflakeDriver{}, *cfg))
	t.Cleanup(func() { _ = db.Close() })
	mustExec(t, db, "CREATE TABLE t (a INT, s VARCHAR)")
	ct.Reset()
	// Hostile text travels through a variable intact.
	hostile := "it's $$ a \\ back\nslash \"q\" é 🚀"
	got := queryColumn(t, db, `EXECUTE IMMEDIATE $$
DECLARE
  v VARCHAR DEFAULT HEX_DECODE_STRING('`+hex.EncodeToString([]byte(hostile))+`');
BEGIN
  BEGIN TRANSACTION;
  INSERT INTO t (a, s) VALUES (1, :v);
  INSERT INTO t (a, s) SELECT 2, s FROM t WHERE s = :v;
  UPDATE t SET a = a + 10;
  COMMIT;
  LET res RESULTSET := (SELECT s FROM t ORDER BY a);
  RETURN TABLE(res);
END;
$$`)
	if len(got) != 2 || got[0] != hostile || got[1] != hostile {
		t.Fatalf("got %q, want the hostile string twice", got)
	}
	if q, r := ct.Count(TripQuery), ct.Count(TripResult); q != 1 || r != 0 {
		t.Errorf("a block cost %d query requests and %d result fetches, want 1 and 0", q, r)
	}
}
