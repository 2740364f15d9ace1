package sftest

import (
	"database/sql/driver"
	"encoding/hex"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// bindParam is one entry of the request's bindings map.
type bindParam struct {
	Type  string `json:"type"`
	Value any    `json:"value"`
	Fmt   string `json:"fmt"`
}

// decodeBindings turns the request's bindings into DuckDB arguments. For
// array binds (bulk inserts) it returns one argument list per row.
func decodeBindings(binds map[string]bindParam) ([][]driver.NamedValue, int, error) {
	if len(binds) == 0 {
		return [][]driver.NamedValue{nil}, -1, nil
	}
	n := len(binds)
	cols := make([][]*string, n)
	types := make([]string, n)
	arrayLen := -1
	for i := 1; i <= n; i++ {
		b, ok := binds[strconv.Itoa(i)]
		if !ok {
			return nil, 0, newSFError(CodeCompilation, "42000", "SQL compilation error: bind variable %d not set", i)
		}
		types[i-1] = strings.ToUpper(b.Type)
		switch v := b.Value.(type) {
		case nil:
			cols[i-1] = []*string{nil}
		case string:
			cols[i-1] = []*string{&v}
		case []any: // array bind: one value per row
			if arrayLen == -1 {
				arrayLen = len(v)
			} else if arrayLen != len(v) {
				return nil, 0, newSFError("002001", "22000", "Array bind variables have different lengths")
			}
			col := make([]*string, len(v))
			for j, e := range v {
				if e != nil {
					s := fmt.Sprint(e)
					col[j] = &s
				}
			}
			cols[i-1] = col
			continue
		default:
			return nil, 0, newSFError(CodeCompilation, "42000", "unsupported bind value %T", v)
		}
		if arrayLen > 0 {
			return nil, 0, newSFError("002001", "22000", "Cannot mix array and scalar binds")
		}
	}
	rows := 1
	if arrayLen >= 0 {
		rows = arrayLen
	}
	out := make([][]driver.NamedValue, rows)
	for r := 0; r < rows; r++ {
		out[r] = make([]driver.NamedValue, n)
		for c := 0; c < n; c++ {
			col := cols[c]
			var raw *string
			if len(col) == 1 && arrayLen < 0 {
				raw = col[0]
			} else {
				raw = col[r]
			}
			v, err := bindValue(types[c], raw)
			if err != nil {
				return nil, 0, newSFError(CodeConversion, "22018", "bind variable %d: %v", c+1, err)
			}
			out[r][c] = driver.NamedValue{Ordinal: c + 1, Value: v}
		}
	}
	return out, arrayLen, nil
}

// bindValue converts one wire value of a Snowflake bind type to Go.
func bindValue(typ string, raw *string) (driver.Value, error) {
	if raw == nil {
		return nil, nil
	}
	v := *raw
	switch typ {
	case "FIXED":
		if i, err := strconv.ParseInt(v, 10, 64); err == nil {
			return i, nil
		}
		return v, nil // DuckDB casts the decimal text to the target type
	case "REAL":
		return strconv.ParseFloat(v, 64)
	case "BOOLEAN":
		return strconv.ParseBool(v)
	case "TIMESTAMP_NTZ", "TIMESTAMP_LTZ":
		ns, ok := new(big.Int).SetString(v, 10)
		if !ok {
			return nil, fmt.Errorf("bad timestamp %q", v)
		}
		return nanosToTime(ns), nil
	case "TIMESTAMP_TZ":
		parts := strings.Fields(v)
		ns, ok := new(big.Int).SetString(parts[0], 10)
		if !ok {
			return nil, fmt.Errorf("bad timestamp %q", v)
		}
		t := nanosToTime(ns)
		if len(parts) == 2 {
			off, err := strconv.Atoi(parts[1])
			if err != nil {
				return nil, fmt.Errorf("bad offset in %q: %w", v, err)
			}
			t = t.In(time.FixedZone("", (off-1440)*60))
		}
		return t, nil
	case "DATE":
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad date %q: %w", v, err)
		}
		return time.UnixMilli(ms).UTC(), nil
	case "TIME":
		ns, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad time %q: %w", v, err)
		}
		return time.Unix(0, ns).UTC().Format("15:04:05.999999999"), nil
	case "BINARY":
		return hex.DecodeString(v)
	}
	return v, nil // TEXT, and JSON text for ARRAY/OBJECT/VARIANT
}

func nanosToTime(ns *big.Int) time.Time {
	sec, rem := new(big.Int).DivMod(ns, big.NewInt(1e9), new(big.Int))
	return time.Unix(sec.Int64(), rem.Int64()).UTC()
}
