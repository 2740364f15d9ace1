package sftest

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/snowflakedb/gosnowflake"
)

// TestBindRoundTrip binds every scalar type the way gosnowflake sends it and
// reads it back through the same driver.
func TestBindRoundTrip(t *testing.T) {
	_, db := openDB(t)
	mustExec(t, db, `CREATE TABLE binds (
		n NUMBER(38,0), d NUMBER(10,2), f FLOAT, s VARCHAR(100), b BOOLEAN,
		ntz TIMESTAMP_NTZ, ltz TIMESTAMP_LTZ, tz TIMESTAMP_TZ, dt DATE, bin BINARY, v VARIANT,
		ns TIMESTAMP_NTZ(9), nstz TIMESTAMP_TZ(9))`)

	ts := time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.UTC)
	tsNano := time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.UTC)
	day := time.Date(2026, 3, 4, 0, 0, 0, 0, time.UTC)
	ctx := ctxT(t)
	tests := []struct {
		name string
		col  string
		args []any // bind arguments for the value, type markers included
		want any   // scanned into a value of the same type
	}{
		{"fixed", "n", []any{int64(1234567890123)}, int64(1234567890123)},
		{"fixed negative", "n", []any{int64(-42)}, int64(-42)},
		{"decimal text", "d", []any{"12.50"}, "12.50"},
		{"real", "f", []any{1.5}, 1.5},
		{"text with quotes", "s", []any{`it's "q" \ back` + "\nline"}, `it's "q" \ back` + "\nline"},
		{"boolean", "b", []any{true}, true},
		{"timestamp_ntz", "ntz", []any{ts}, ts},
		{"timestamp_ltz", "ltz", []any{gosnowflake.DataTypeTimestampLtz, ts}, ts},
		{"timestamp_tz", "tz", []any{gosnowflake.DataTypeTimestampTz, ts.In(time.FixedZone("", 2*3600))}, ts},
		{"timestamp_ntz(9) nanoseconds", "ns", []any{tsNano}, tsNano},
		{"timestamp_tz(9) nanoseconds", "nstz", []any{gosnowflake.DataTypeTimestampTz, tsNano.In(time.FixedZone("", -5*3600))}, tsNano},
		{"date", "dt", []any{gosnowflake.DataTypeDate, day}, day},
		{"binary", "bin", []any{gosnowflake.DataTypeBinary, []byte{0, 1, 0xfe}}, []byte{0, 1, 0xfe}},
		{"null", "s", []any{nil}, sql.NullString{}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := int64(1000 + i)
			if tc.col == "n" { // the key column itself is under test
				key = tc.args[0].(int64)
			}
			args := append([]any{key}, tc.args...)
			q := "INSERT INTO binds (n, " + tc.col + ") VALUES (?, ?)"
			if tc.col == "n" {
				q, args = "INSERT INTO binds (n) VALUES (?)", []any{key}
			}
			if _, err := db.ExecContext(ctx, q, args...); err != nil {
				t.Fatalf("insert: %v", err)
			}
			got := reflect.New(reflect.TypeOf(tc.want))
			if err := db.QueryRowContext(ctx, "SELECT "+tc.col+" FROM binds WHERE n = ?", key).Scan(got.Interface()); err != nil {
				t.Fatalf("select: %v", err)
			}
			switch g := got.Elem().Interface().(type) {
			case time.Time:
				if !g.Equal(tc.want.(time.Time)) {
					t.Fatalf("got %v, want %v", g, tc.want)
				}
			case []byte:
				if !bytes.Equal(g, tc.want.([]byte)) {
					t.Fatalf("got %x, want %x", g, tc.want)
				}
			default:
				if !reflect.DeepEqual(g, tc.want) {
					t.Fatalf("got %#v, want %#v", g, tc.want)
				}
			}
		})
	}
}

// TestResultTypes checks the rowtype and wire values the driver decodes.
func TestResultTypes(t *testing.T) {
	_, db := openDB(t)
	mustExec(t, db, `CREATE TABLE r (id INTEGER, amount NUMBER(12,3), name STRING, ts TIMESTAMP_TZ,
		payload VARIANT, flag BOOLEAN, ratio DOUBLE, day DATE)`)
	mustExec(t, db, `INSERT INTO r SELECT 1, 12.5, 'a', '2026-01-02 03:04:05.678+00'::TIMESTAMP_TZ,
		PARSE_JSON('{"b": 2, "a": [1, "x"], "error": {"code": "E42"}}'), TRUE, 0.25, '1969-12-31'::DATE`)
	mustExec(t, db, `INSERT INTO r (id) VALUES (2)`)

	rows, err := db.QueryContext(ctxT(t), "SELECT id, amount, name, ts, payload, flag, ratio, day FROM r ORDER BY id")
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	defer rows.Close()
	cts, err := rows.ColumnTypes()
	if err != nil {
		t.Fatal(err)
	}
	var names, dbTypes []string
	for _, ct := range cts {
		names = append(names, ct.Name())
		dbTypes = append(dbTypes, ct.DatabaseTypeName())
	}
	wantNames := []string{"ID", "AMOUNT", "NAME", "TS", "PAYLOAD", "FLAG", "RATIO", "DAY"}
	wantTypes := []string{"FIXED", "FIXED", "TEXT", "TIMESTAMP_LTZ", "VARIANT", "BOOLEAN", "REAL", "DATE"}
	if !reflect.DeepEqual(names, wantNames) || !reflect.DeepEqual(dbTypes, wantTypes) {
		t.Fatalf("columns %v %v, want %v %v", names, dbTypes, wantNames, wantTypes)
	}
	if p, s, ok := cts[1].DecimalSize(); !ok || p != 12 || s != 3 {
		t.Fatalf("amount decimal size %d,%d,%v", p, s, ok)
	}
	var (
		id      int64
		amount  float64
		name    sql.NullString
		at      sql.NullTime
		payload sql.NullString
		flag    sql.NullBool
		ratio   sql.NullFloat64
		day     sql.NullTime
	)
	if !rows.Next() {
		t.Fatal("no first row")
	}
	if err := rows.Scan(&id, &amount, &name, &at, &payload, &flag, &ratio, &day); err != nil {
		t.Fatalf("scan: %v", err)
	}
	if amount != 12.5 || name.String != "a" || !flag.Bool || ratio.Float64 != 0.25 {
		t.Fatalf("scalars: %v %v %v %v", amount, name, flag, ratio)
	}
	if want := time.Date(2026, 1, 2, 3, 4, 5, 678000000, time.UTC); !at.Time.Equal(want) {
		t.Fatalf("at = %v, want %v", at.Time, want)
	}
	if want := time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC); !day.Time.Equal(want) {
		t.Fatalf("day = %v, want %v", day.Time, want)
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(payload.String), &obj); err != nil {
		t.Fatalf("variant is not JSON text: %q: %v", payload.String, err)
	}
	if obj["error"].(map[string]any)["code"] != "E42" {
		t.Fatalf("variant = %v", obj)
	}
	if !rows.Next() {
		t.Fatal("no second row")
	}
	if err := rows.Scan(&id, &amount, &name, &at, &payload, &flag, &ratio, &day); err == nil {
		t.Fatal("NULL amount scanned into float64 without error")
	}
	var nAmount sql.NullFloat64
	if err := rows.Scan(&id, &nAmount, &name, &at, &payload, &flag, &ratio, &day); err != nil {
		t.Fatalf("scan nulls: %v", err)
	}
	if nAmount.Valid || name.Valid || at.Valid || payload.Valid || flag.Valid || ratio.Valid || day.Valid {
		t.Fatal("NULLs did not read back as SQL NULL")
	}
}

// TestVariantText checks VARIANT values come back as Snowflake prints them:
// exact numbers, JSON null as a value, sorted keys, in the query's order.
func TestVariantText(t *testing.T) {
	_, db := openDB(t)
	ctx := ctxT(t)
	mustExec(t, db, "CREATE TABLE v (id INT, payload VARIANT)")
	mustExec(t, db, `INSERT INTO v SELECT 1, PARSE_JSON('{"z": 1, "big": 12345678901234567890, "a": [true, null]}')`)
	mustExec(t, db, `INSERT INTO v SELECT 2, PARSE_JSON('null')`)
	mustExec(t, db, `INSERT INTO v SELECT 3, NULL`)
	rows, err := db.QueryContext(ctx, "SELECT id, payload FROM v ORDER BY id DESC")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.ColumnTypes()
	if err != nil || cols[1].Name() != "PAYLOAD" || cols[1].DatabaseTypeName() != "VARIANT" {
		t.Fatalf("payload column %v %v", cols, err)
	}
	want := []struct {
		id      int
		payload sql.NullString
	}{
		{3, sql.NullString{}},
		{2, sql.NullString{String: "null", Valid: true}},
		{1, sql.NullString{String: "{\n  \"a\": [\n    true,\n    null\n  ],\n  \"big\": 12345678901234567890,\n  \"z\": 1\n}", Valid: true}},
	}
	n := 0
	for i := 0; rows.Next(); i++ {
		n++
		var id int
		var p sql.NullString
		if err := rows.Scan(&id, &p); err != nil {
			t.Fatal(err)
		}
		if i >= len(want) || id != want[i].id || p != want[i].payload {
			t.Fatalf("row %d = %d %#v, want %+v", i, id, p, want[min(i, len(want)-1)])
		}
	}
	if n != len(want) {
		t.Fatalf("%d rows, want %d", n, len(want))
	}

	// The order of a larger sorted result survives the rewrite that reads
	// VARIANT columns as text.
	mustExec(t, db, "INSERT INTO v SELECT range + 10, TO_VARIANT(range) FROM range(100000)")
	big, err := db.QueryContext(ctx, "SELECT id, payload FROM v WHERE id >= 10 ORDER BY id DESC")
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	prev := 1 << 30
	for big.Next() {
		var id int
		var p string
		if err := big.Scan(&id, &p); err != nil {
			t.Fatal(err)
		}
		if id >= prev || p != strconv.Itoa(id-10) {
			t.Fatalf("row %d %q after %d", id, p, prev)
		}
		prev = id
	}
	if prev != 10 {
		t.Fatalf("last id %d, want 10", prev)
	}
}
