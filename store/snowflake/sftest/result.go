package sftest

import (
	"bytes"
	"database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/duckdb/duckdb-go/v2"
)

// Statement type ids as Snowflake reports them (the driver checks the DML
// range 0x3000–0x3500, 0x1000 for SELECT and 0xA000 for multi-statement).
const (
	stmtSelect  = int64(0x1000)
	stmtInsert  = int64(0x3100)
	stmtUpdate  = int64(0x3200)
	stmtDelete  = int64(0x3300)
	stmtMerge   = int64(0x3400)
	stmtSession = int64(0x4100) // ALTER SESSION
	stmtUse     = int64(0x4300)
	stmtTCL     = int64(0x5000)
	stmtDDL     = int64(0x6000)
	stmtMulti   = int64(0xA000)
)

// rowType is one column of a result as the driver decodes it.
type rowType struct {
	Name       string `json:"name"`
	Database   string `json:"database"`
	Schema     string `json:"schema"`
	Table      string `json:"table"`
	Type       string `json:"type"`
	ByteLength int64  `json:"byteLength"`
	Length     int64  `json:"length"`
	Precision  int64  `json:"precision"`
	Scale      int64  `json:"scale"`
	Nullable   bool   `json:"nullable"`
}

// result is the outcome of one statement.
type result struct {
	stmtType int64
	rowType  []rowType
	rowSet   [][]*string
}

func strp(s string) *string { return &s }

// statusResult is what Snowflake answers for DDL, session and transaction
// statements: one "status" column.
func statusResult(stmtType int64, msg string) *result {
	return &result{
		stmtType: stmtType,
		rowType:  []rowType{textCol("status")},
		rowSet:   [][]*string{{strp(msg)}},
	}
}

// countResult is the DML answer: one fixed column per count, with the
// column names Snowflake uses.
func countResult(stmtType int64, names []string, counts []int64) *result {
	r := &result{stmtType: stmtType, rowSet: [][]*string{make([]*string, len(names))}}
	for i, n := range names {
		r.rowType = append(r.rowType, rowType{Name: n, Type: "fixed", Precision: 19, Nullable: false})
		r.rowSet[0][i] = strp(strconv.FormatInt(counts[i], 10))
	}
	return r
}

func textCol(name string) rowType {
	return rowType{Name: name, Type: "text", Length: 16777216, ByteLength: 16777216, Nullable: true}
}

var decimalType = regexp.MustCompile(`^DECIMAL\((\d+),\s*(\d+)\)$`)

// columnType maps a DuckDB column type name to the Snowflake rowtype.
func columnType(name, dbType string) rowType {
	rt := rowType{Name: name, Nullable: true}
	switch t := strings.ToUpper(dbType); {
	case t == "JSON":
		rt.Type = "variant"
	case t == "BOOLEAN":
		rt.Type = "boolean"
	case strings.HasSuffix(t, "INT") || t == "INTEGER" || strings.HasPrefix(t, "U") && strings.Contains(t, "INT"):
		rt.Type, rt.Precision = "fixed", 38
	case decimalType.MatchString(t):
		m := decimalType.FindStringSubmatch(t)
		rt.Type = "fixed"
		rt.Precision, _ = strconv.ParseInt(m[1], 10, 64)
		rt.Scale, _ = strconv.ParseInt(m[2], 10, 64)
	case t == "FLOAT" || t == "DOUBLE":
		rt.Type = "real"
	case t == "DATE":
		rt.Type = "date"
	case t == "TIME" || t == "TIME WITH TIME ZONE":
		rt.Type, rt.Scale = "time", 9
	case t == "TIMESTAMPTZ" || t == "TIMESTAMP WITH TIME ZONE":
		rt.Type, rt.Scale = "timestamp_ltz", 9
	case strings.HasPrefix(t, "TIMESTAMP"):
		rt.Type, rt.Scale = "timestamp_ntz", 9
	case t == "BLOB":
		rt.Type, rt.Length, rt.ByteLength = "binary", 8388608, 8388608
	case strings.HasSuffix(t, "[]") || strings.HasPrefix(t, "LIST") || strings.Contains(t, "[") && strings.HasSuffix(t, "]"):
		rt.Type = "array"
	case strings.HasPrefix(t, "STRUCT") || strings.HasPrefix(t, "MAP"):
		rt.Type = "object"
	default:
		rt = textCol(name)
	}
	return rt
}

// encodeValue renders v in Snowflake's JSON wire form for column type rt;
// nil stays nil (JSON null).
func encodeValue(rt rowType, v driver.Value) (*string, error) {
	if v == nil {
		return nil, nil
	}
	switch rt.Type {
	case "variant", "array", "object":
		return jsonText(v)
	case "boolean":
		if b, ok := v.(bool); ok && b {
			return strp("1"), nil
		}
		return strp("0"), nil
	case "date":
		t := v.(time.Time)
		return strp(strconv.FormatInt(floorDiv(t.Unix(), 86400), 10)), nil
	case "time":
		t := v.(time.Time)
		h, m, s := t.Clock()
		return strp(fmt.Sprintf("%d.%09d", h*3600+m*60+s, t.Nanosecond())), nil
	case "timestamp_ntz", "timestamp_ltz":
		t := v.(time.Time)
		// time.Unix floors and Nanosecond is non-negative, which is how
		// the driver's extractTimestamp reads "sec.fraction".
		return strp(fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond())), nil
	case "binary":
		b, _ := v.([]byte)
		return strp(strings.ToUpper(hex.EncodeToString(b))), nil
	}
	switch x := v.(type) {
	case string:
		return &x, nil
	case []byte:
		if len(x) == 16 { // UUID
			u := hex.EncodeToString(x)
			return strp(u[0:8] + "-" + u[8:12] + "-" + u[12:16] + "-" + u[16:20] + "-" + u[20:]), nil
		}
		return strp(string(x)), nil
	case duckdb.Decimal:
		return strp(formatDecimal(x.Value, int(x.Scale))), nil
	case *big.Int:
		return strp(x.String()), nil
	case float64:
		return strp(strconv.FormatFloat(x, 'g', -1, 64)), nil
	case float32:
		return strp(strconv.FormatFloat(float64(x), 'g', -1, 32)), nil
	case bool:
		return strp(strconv.FormatBool(x)), nil
	case time.Time:
		return strp(x.Format(time.RFC3339Nano)), nil
	}
	return strp(fmt.Sprint(v)), nil
}

// jsonText renders a VARIANT value — JSON text, or a LIST/STRUCT/MAP value
// decoded by duckdb-go — the way Snowflake prints one: JSON with two-space
// indentation, object keys sorted, no HTML escaping.
func jsonText(v driver.Value) (*string, error) {
	if s, ok := v.(string); ok { // JSON text (see jsonAsText): keep numbers exact
		dec := json.NewDecoder(strings.NewReader(s))
		dec.UseNumber()
		var parsed any
		if err := dec.Decode(&parsed); err != nil {
			return nil, fmt.Errorf("decode variant %.40q: %w", s, err)
		}
		v = parsed
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(normalizeJSON(v)); err != nil {
		return nil, fmt.Errorf("encode variant: %w", err)
	}
	return strp(strings.TrimSuffix(b.String(), "\n")), nil
}

// normalizeJSON converts DuckDB's composite values into types encoding/json
// can marshal.
func normalizeJSON(v any) any {
	switch x := v.(type) {
	case duckdb.Map:
		m := map[string]any{}
		for k, val := range x {
			m[fmt.Sprint(k)] = normalizeJSON(val)
		}
		return m
	case map[string]any:
		for k, val := range x {
			x[k] = normalizeJSON(val)
		}
		return x
	case []any:
		for i, val := range x {
			x[i] = normalizeJSON(val)
		}
		return x
	case duckdb.Decimal:
		return json.Number(formatDecimal(x.Value, int(x.Scale)))
	case *big.Int:
		return json.Number(x.String())
	}
	return v
}

// formatDecimal prints an unscaled integer with scale digits after the point.
func formatDecimal(v *big.Int, scale int) string {
	if v == nil {
		return "0"
	}
	s := new(big.Int).Abs(v).String()
	if scale > 0 {
		for len(s) <= scale {
			s = "0" + s
		}
		s = s[:len(s)-scale] + "." + s[len(s)-scale:]
	}
	if v.Sign() < 0 {
		s = "-" + s
	}
	return s
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
