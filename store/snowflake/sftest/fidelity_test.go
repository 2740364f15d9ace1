package sftest

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestFidelity pins the server's behaviour on the Snowflake features the
// state store's path depends on (issue 11, item 6), each to the
// documentation it follows; the package doc lists them with the source.
func TestFidelity(t *testing.T) {
	cases := []struct {
		name  string
		doc   string
		setup []string
		query string
		args  []any
		want  string // rows joined by ";", columns by ","
	}{
		{
			name: "SELECT ? AS a takes the type of its bind",
			doc: `Binding variables: a bind is typed by the client (the driver sends TEXT, FIXED, …), so SELECT ? is a ` +
				`column of that type; DuckDB cannot type a bare parameter, the server casts it to the bind's type.`,
			query: "SELECT ? AS a, ? AS b", args: []any{"x'y", int64(7)},
			want: "x'y,7",
		},
		{
			name: "SHA2 is the lowercase hex SHA-256 of the string's UTF-8 bytes",
			doc: `SHA2 / SHA2_HEX: "SHA2( <msg> [, <digest_size>] )" returns a hex-encoded string; digest_size ` +
				`defaults to 256; the example gives SHA2('a', 256) = 'ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb'.`,
			query: "SELECT SHA2('a', 256), SHA2('a') = SHA2_HEX('a', 256)",
			want:  "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb,1",
		},
		{
			name:  "LIMIT ? takes a bind",
			doc:   `LIMIT / FETCH: "LIMIT <count>" — count is a constant, which a bind variable is at compile time.`,
			setup: []string{"CREATE TABLE l (a INT)", "INSERT INTO l VALUES (1), (2), (3)"},
			query: "SELECT a FROM l ORDER BY a LIMIT ?", args: []any{int64(2)},
			want: "1;2",
		},
		{
			name: "VALUES in FROM without column aliases: COLUMN1, COLUMN2",
			doc: `VALUES: "SELECT * FROM (VALUES (1, 'one'), (2, 'two'), (3, 'three'));" returns columns COLUMN1 and ` +
				`COLUMN2; "SELECT column1 FROM VALUES (…), (…)" works without parentheses.`,
			query: "SELECT column2, v.column1 FROM (VALUES (1, 'one'), (2, 'two')) v WHERE column1 > (SELECT MIN(column1) FROM VALUES (1), (0))",
			want:  "one,1;two,2",
		},
		{
			name: "MERGE … USING (VALUES …) AS s (cols)",
			doc: `VALUES: "FROM ( VALUES ( <expr> [ , … ] ) [ , ( … ) ] ) [ [ AS ] <table_alias> [ ( <column_alias> [ , … ] ) ] ]", ` +
				`and MERGE: "USING <source>" is a table or subquery.`,
			setup: []string{"CREATE TABLE m (id INT, v VARCHAR)", "INSERT INTO m VALUES (1, 'old')",
				"MERGE INTO m USING (VALUES (1, 'new'), (2, 'two')) AS s (id, v) ON m.id = s.id " +
					"WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, s.v)",
				"MERGE INTO m t USING (SELECT column1 AS id, column2 AS v FROM VALUES (3, 'three')) s ON t.id = s.id " +
					"WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, s.v)"},
			query: "SELECT id, v FROM m ORDER BY id",
			want:  "1,new;2,two;3,three",
		},
		{
			name: "CREATE TABLE IF NOT EXISTS … AS SELECT runs once",
			doc: `CREATE TABLE: "CREATE [ OR REPLACE ] TABLE [ IF NOT EXISTS ] <table_name> … AS SELECT <query>"; with IF NOT ` +
				`EXISTS an existing table is left as it is.`,
			setup: []string{"CREATE TABLE IF NOT EXISTS c AS SELECT 1 AS a", "INSERT INTO c VALUES (2)",
				"CREATE TABLE IF NOT EXISTS c AS SELECT 1 AS a"},
			query: "SELECT a FROM c ORDER BY a",
			want:  "1;2",
		},
		{
			name: "UPDATE … FROM a subquery updates the joined target rows",
			doc: `UPDATE: "UPDATE <target_table> SET <col_name> = <value> [ , … ] [ FROM <additional_tables> ] [ WHERE ` +
				`<condition> ]"; FROM "specifies one or more tables to use for selecting rows to update or for setting new ` +
				`values" (example: UPDATE t1 SET … FROM t2 WHERE t1.key_column = t2.t1_key). A target row joining several ` +
				`rows is updated from one of them, nondeterministically: dvtrun's sources (pulse_block) hold each key once.`,
			setup: []string{"CREATE TABLE u (k INT, f INT, v VARCHAR)", "INSERT INTO u VALUES (1, 1, 'a'), (2, 1, 'b'), (3, 1, 'c')",
				"UPDATE u SET v = s.v FROM (SELECT column1 AS k, column2 AS f, column3 AS v FROM VALUES (1, 1, 'x'), (2, 9, 'y'), " +
					"(3, 1, 'z')) s WHERE u.k = s.k AND u.f = s.f AND u.k <> 3"},
			query: "SELECT k, v FROM u ORDER BY k",
			want:  "1,x;2,b;3,c",
		},
		{
			name: "TIMESTAMP_TZ literal with an offset keeps its instant",
			doc: `TIMESTAMP_TZ: "TIMESTAMP_TZ internally stores UTC time together with an associated time zone offset." The ` +
				`server keeps the instant only (reads back in UTC); dvtrun writes UTC (+00:00), so nothing it stores has another offset.`,
			setup: []string{"CREATE TABLE z (ts TIMESTAMP_TZ(9))",
				"INSERT INTO z SELECT CAST('2026-04-01 10:00:00.123456789+02:00' AS TIMESTAMP_TZ(9))"},
			query: "SELECT ts FROM z",
			want:  "2026-04-01T08:00:00.123456789Z",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, db := openDB(t)
			for _, q := range c.setup {
				mustExec(t, db, q)
			}
			if got := rowsText(t, db, c.query, c.args...); got != c.want {
				t.Fatalf("got %q, want %q\ndocumentation: %s", got, c.want, c.doc)
			}
		})
	}
}

// rowsText renders a result as "a,b;c,d", timestamps in RFC 3339 UTC.
func rowsText(t *testing.T, db *sql.DB, q string, args ...any) string {
	t.Helper()
	rows, err := db.QueryContext(ctxT(t), q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		parts := make([]string, len(vals))
		for i, v := range vals {
			switch x := v.(type) {
			case time.Time:
				parts[i] = x.UTC().Format(time.RFC3339Nano)
			case nil:
				parts[i] = "NULL"
			default:
				parts[i] = fmt.Sprint(x)
			}
		}
		out = append(out, strings.Join(parts, ","))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, ";")
}
