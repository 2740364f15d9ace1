package store

import (
	"database/sql"
	"time"
	"unicode/utf8"

	"github.com/dvtrun/dvtrun/engine"
)

// SampleValueMax bounds each text value of a RowSample: a sample shows
// why a test failed, it is no copy of the data.
const SampleValueMax = 1024

// ScanSample reads at most max rows of rows (the caller closes rows) as a
// RowSample: the warehouses keep a failing test's first rows with it.
// Bytes become text and times engine.TimeFormat, so the sample encodes as
// JSON whatever the driver returned; longer text is cut to SampleValueMax.
func ScanSample(rows *sql.Rows, max int) (*engine.RowSample, error) {
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	out := &engine.RowSample{Columns: cols, Rows: [][]any{}}
	for len(out.Rows) < max && rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		for i, v := range vals {
			switch x := v.(type) {
			case []byte:
				vals[i] = cut(string(x))
			case string:
				vals[i] = cut(x)
			case time.Time:
				vals[i] = x.UTC().Format(engine.TimeFormat)
			}
		}
		out.Rows = append(out.Rows, vals)
	}
	return out, rows.Err()
}

// cut shortens s to SampleValueMax bytes at a rune boundary, marked "…".
func cut(s string) string {
	if len(s) <= SampleValueMax {
		return s
	}
	n := SampleValueMax
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
