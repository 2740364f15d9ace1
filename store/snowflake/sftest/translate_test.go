package sftest

import (
	"database/sql"
	"strings"
	"testing"
	"time"
)

// TestTranslate pins each rewrite listed in the package doc.
func TestTranslate(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"number without precision", "CREATE TABLE t (a NUMBER, b NUMBER(10,2))", "CREATE TABLE t (a DECIMAL(38,0), b DECIMAL(10,2))"},
		{"integer aliases", "CREATE TABLE t (a INT, b INTEGER, c BYTEINT)", "CREATE TABLE t (a BIGINT, b BIGINT, c BIGINT)"},
		{"strings", "CREATE TABLE t (a VARCHAR(10), b STRING, c TEXT)", "CREATE TABLE t (a VARCHAR, b VARCHAR, c VARCHAR)"},
		{"timestamps", "CREATE TABLE t (a TIMESTAMP_NTZ, b TIMESTAMP_LTZ(9), c TIMESTAMP_TZ(9))", "CREATE TABLE t (a TIMESTAMP, b TIMESTAMP_NS, c TIMESTAMP_NS)"},
		{"timestamps without precision", "CREATE TABLE t (b TIMESTAMP_LTZ, c TIMESTAMP_TZ)", "CREATE TABLE t (b TIMESTAMPTZ, c TIMESTAMPTZ)"},
		{"semi-structured", "CREATE TABLE t (a VARIANT, b OBJECT, c ARRAY)", "CREATE TABLE t (a JSON, b JSON, c JSON)"},
		{"float", "CREATE TABLE t (a FLOAT, b DOUBLE, c BINARY)", "CREATE TABLE t (a DOUBLE, b DOUBLE, c BLOB)"},
		{"cast", "SELECT CAST(? AS TIMESTAMP_TZ(9)), x::NUMBER, y::VARIANT", "SELECT CAST(? AS TIMESTAMP_NS), x::DECIMAL(38,0), y::JSON"},
		{"column-level constraints", "CREATE TABLE t (id INT PRIMARY KEY, k STRING UNIQUE NOT NULL, r INT REFERENCES o (id))", "CREATE TABLE t (id BIGINT, k VARCHAR NOT NULL, r BIGINT)"},
		{"table-level constraints", "CREATE TABLE t (a INT, b INT, PRIMARY KEY (a), CONSTRAINT u UNIQUE (a, b), FOREIGN KEY (b) REFERENCES o (id))", "CREATE TABLE t (a BIGINT, b BIGINT)"},
		{"constraint first", "CREATE TABLE t (PRIMARY KEY (a), a INT)", "CREATE TABLE t ( a BIGINT)"},
		{"transient", "CREATE OR REPLACE TRANSIENT TABLE t AS SELECT 1 AS a", "CREATE OR REPLACE TABLE t AS SELECT 1 AS a"},
		{"snowflake table options", "CREATE TABLE t (a INT COMMENT 'the a', b INT) CLUSTER BY (a, b) COMMENT = 'table' DATA_RETENTION_TIME_IN_DAYS = 1 COPY GRANTS",
			"CREATE TABLE t (a BIGINT, b BIGINT)"},
		{"functions", "SELECT PARSE_JSON(a), TO_VARIANT(b), IFF(c, 1, 2), HEX_ENCODE(d)", "SELECT json(a), to_json(b), if(c, 1, 2), hex(d)"},
		{"hex decode", "SELECT HEX_DECODE_STRING('41'), TRY_HEX_DECODE_STRING(x)", "SELECT decode(unhex('41')), try(decode(unhex(x)))"},
		{"nested rewrites", "SELECT PARSE_JSON(HEX_DECODE_STRING(v.p))", "SELECT json(decode(unhex(v.p)))"},
		{"time functions", "SELECT CURRENT_TIMESTAMP(), SYSDATE()", "SELECT get_current_timestamp(), (get_current_timestamp() AT TIME ZONE 'UTC')"},
		{"variant path as string", "SELECT payload:error:code::string FROM t", "SELECT json_extract_string(payload, '$.error.code')::VARCHAR FROM t"},
		{"variant path qualified", "SELECT e.payload:a.b FROM t e", "SELECT json_extract(e.payload, '$.a.b') FROM t e"},
		{"variant path cast to number", "SELECT payload:n::NUMBER(10,0) FROM t", "SELECT json_extract_string(payload, '$.n')::DECIMAL(10,0) FROM t"},
		{"variant path with index", "SELECT payload:items[0]:name::string FROM t", "SELECT json_extract_string(payload, '$.items[0].name')::VARCHAR FROM t"},
		{"variant path quoted key", `SELECT payload:"my key" FROM t`, `SELECT json_extract(payload, '$."my key"') FROM t`},
		{"date parts", "SELECT DATEDIFF(millisecond, a, b), DATE_TRUNC(day, c), DATEDIFF('day', a, b)", "SELECT DATEDIFF('millisecond', a, b), DATE_TRUNC('day', c), DATEDIFF('day', a, b)"},
		{"dateadd", "SELECT DATEADD(hour, -2, CURRENT_TIMESTAMP())", "SELECT ((get_current_timestamp()) + (-2) * INTERVAL '1 hour')"},
		{"null functions", "SELECT NVL(a, 'x'), ZEROIFNULL(b), ARRAY_SIZE(c)", "SELECT coalesce(a, 'x'), coalesce(b, 0), json_array_length(c)"},
		{"numbered binds", "SELECT :1, :2", "SELECT $1, $2"},
		{"literal escapes", `SELECT 'a\'b', 'c\\d', 'e''f'`, `SELECT 'a''b', 'c\d', 'e''f'`},
		{"literals untouched", "SELECT 'PARSE_JSON(x) NUMBER a:b ::string'", "SELECT 'PARSE_JSON(x) NUMBER a:b ::string'"},
		{"quoted identifiers untouched", `SELECT "NUMBER", "a:b" FROM "VARIANT"`, `SELECT "NUMBER", "a:b" FROM "VARIANT"`},
		{"operators stay adjacent", "SELECT a >= 1 AND b <> 2 AND c || 'x'", "SELECT a >= 1 AND b <> 2 AND c || 'x'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stmts, err := parseRequest(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if len(stmts) != 1 {
				t.Fatalf("%d statements", len(stmts))
			}
			if got := stmts[0].duck; got != tc.want {
				t.Fatalf("\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestSplitStatements checks that statement counting ignores semicolons in
// literals, comments and empty statements.
func TestSplitStatements(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"SELECT 1", 1},
		{"SELECT 1;", 1},
		{"SELECT ';'; SELECT 2", 2},
		{"SELECT 1; -- two?\n", 1},
		{"SELECT 1; /* ; */ SELECT 2;;", 2},
		{"SELECT $$;$$", 1},
		{`SELECT "a;b" FROM t`, 1},
	}
	for _, tc := range tests {
		stmts, err := parseRequest(tc.in)
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if len(stmts) != tc.want {
			t.Errorf("%q: %d statements, want %d", tc.in, len(stmts), tc.want)
		}
	}
	for _, bad := range []string{"SELECT 'open", `SELECT "open`, "SELECT /* open", "SELECT $$open"} {
		if _, err := parseRequest(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestSnowflakeFunctions runs the translated functions through the driver.
func TestSnowflakeFunctions(t *testing.T) {
	_, db := openDB(t)
	ctx := ctxT(t)
	mustExec(t, db, `CREATE TABLE ev (id INT, payload VARIANT)`)
	mustExec(t, db, `INSERT INTO ev SELECT 1, PARSE_JSON('{"error": {"code": "E1", "n": 5}, "ok": false, "list": [{"k": "a"}, {"k": "b"}]}')`)
	mustExec(t, db, `INSERT INTO ev SELECT 2, TO_VARIANT('plain')`)
	tests := []struct{ name, sql, want string }{
		{"variant path string", "SELECT payload:error:code::string FROM ev WHERE id = 1", "E1"},
		{"variant path number", "SELECT (payload:error:n::NUMBER + 1)::STRING FROM ev WHERE id = 1", "6"},
		{"variant path index", "SELECT payload:list[1]:k::string FROM ev WHERE id = 1", "b"},
		{"variant path missing", "SELECT COALESCE(payload:nope::string, 'null') FROM ev WHERE id = 1", "null"},
		{"to_variant string", "SELECT payload FROM ev WHERE id = 2", `"plain"`},
		{"dateadd", "SELECT DATEADD(day, 2, '2026-01-30 10:00:00'::TIMESTAMP_NTZ)::STRING", "2026-02-01 10:00:00"},
		{"datediff", "SELECT DATEDIFF(millisecond, '2026-01-01 00:00:00'::TIMESTAMP_NTZ, '2026-01-01 00:00:01.5'::TIMESTAMP_NTZ)::STRING", "1500"},
		{"nvl", "SELECT NVL(NULL, 'x')", "x"},
		{"iff", "SELECT IFF(1 < 2, 'yes', 'no')", "yes"},
		{"hex round trip", "SELECT HEX_DECODE_STRING(HEX_ENCODE('a''b\\n'))", "a'b\n"},
		{"try hex decode invalid", "SELECT COALESCE(TRY_HEX_DECODE_STRING('zz'), 'null')", "null"},
		{"timestamp text nanoseconds", "SELECT CAST(CAST('2026-01-02T03:04:05.123456789+00:00' AS TIMESTAMP_TZ(9)) AS TIMESTAMP_NTZ(9))::STRING", "2026-01-02 03:04:05.123456789"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			if err := db.QueryRowContext(ctx, tc.sql).Scan(&got); err != nil {
				t.Fatalf("%s: %v", tc.sql, err)
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}

	var now, sys time.Time
	if err := db.QueryRowContext(ctx, "SELECT CURRENT_TIMESTAMP(), SYSDATE()").Scan(&now, &sys); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(now); d < -time.Minute || d > time.Minute {
		t.Fatalf("CURRENT_TIMESTAMP() = %v", now)
	}
	if d := now.Sub(sys); d < -time.Second || d > time.Second {
		t.Fatalf("SYSDATE() = %v, CURRENT_TIMESTAMP() = %v", sys, now)
	}
}

// TestCreateOrReplace checks CREATE OR REPLACE TABLE|VIEW … AS and the
// binds DuckDB must type from the INSERT target.
func TestCreateOrReplace(t *testing.T) {
	_, db := openDB(t)
	ctx := ctxT(t)
	mustExec(t, db, "CREATE OR REPLACE TABLE m AS SELECT 1 AS a")
	mustExec(t, db, "CREATE OR REPLACE TABLE m AS SELECT 2 AS a, 'x' AS b")
	mustExec(t, db, "CREATE OR REPLACE VIEW v AS SELECT a * 10 AS a10 FROM m")
	mustExec(t, db, "CREATE OR REPLACE VIEW v AS SELECT a * 100 AS a100 FROM m")
	var n int
	if err := db.QueryRowContext(ctx, "SELECT a100 FROM v").Scan(&n); err != nil || n != 200 {
		t.Fatalf("view = %d, %v", n, err)
	}
	mustExec(t, db, "CREATE TABLE ver (version NUMBER(38, 0) NOT NULL, name VARCHAR NOT NULL, applied_at TIMESTAMP_TZ(9) NOT NULL)")
	mustExec(t, db, "INSERT INTO ver (version, name, applied_at) SELECT ?, ?, CAST(? AS TIMESTAMP_TZ(9))",
		int64(3), "init", "2026-01-02T03:04:05.000000000+00:00")
	var name sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT name FROM ver WHERE version = ?", int64(3)).Scan(&name); err != nil || name.String != "init" {
		t.Fatalf("name = %v, %v", name, err)
	}
}

// TestUnquotedNamesUpperCase checks result column names: unquoted ones come
// back upper-case, quoted ones as written.
func TestUnquotedNamesUpperCase(t *testing.T) {
	_, db := openDB(t)
	rows, err := db.QueryContext(ctxT(t), `SELECT 1 AS run_id, 2 AS "mixedCase", 3 AS Plain`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	if got := strings.Join(cols, ","); got != "RUN_ID,mixedCase,PLAIN" {
		t.Fatalf("columns = %s", got)
	}
}
