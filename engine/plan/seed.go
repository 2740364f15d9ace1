package plan

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dvtrun/dvtrun/engine"
)

// Column types a seed's columns are inferred as.
const (
	TypeInteger = "INTEGER"
	TypeReal    = "REAL"
	TypeText    = "TEXT"
)

// SeedTable is a parsed CSV seed. Values are nil for empty fields, int64,
// float64 or string according to the column's inferred type.
type SeedTable struct {
	Columns []string
	Types   []string
	Rows    [][]any
}

// Seed limits, checked in pre-flight so that an unloadable seed is refused
// before a run is recorded: SQLite's default column limit is 2000 and
// Snowflake's row size is bounded; a seed wider or longer than this is not a
// seed.
const (
	MaxSeedColumns  = 1000
	MaxSeedRowBytes = 1 << 20
)

// ReadSeed parses a CSV seed: a header row, RFC 4180 quoting (quoted fields
// may hold commas, quotes and line breaks), LF or CRLF line ends, an optional
// UTF-8 byte-order mark. A column is INTEGER when every non-empty value is a
// decimal int64, REAL when every one is a finite decimal number, TEXT
// otherwise (also when it has no values at all); empty fields are NULL.
// Binary content (a NUL byte or invalid UTF-8), more than MaxSeedColumns
// columns or a row longer than MaxSeedRowBytes is refused. Errors carry
// CodePlanInvalid and name the file and line as "name:line".
func ReadSeed(r io.Reader, name string) (*SeedTable, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = false
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, engine.Errorf(engine.CodePlanInvalid, "seed %s is empty: it needs a header row", name)
	}
	if err != nil {
		return nil, seedErr(name, nil, 0, err)
	}
	// Blank lines before the header are skipped; name the header's own line.
	hline, _ := cr.FieldPos(0)
	if len(header) > MaxSeedColumns {
		return nil, engine.Errorf(engine.CodePlanInvalid, "seed %s:%d: the header has %d columns, more than the limit of %d", name, hline, len(header), MaxSeedColumns)
	}
	if err := checkRecord(name, hline, header); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for i, h := range header {
		if i == 0 {
			h = strings.TrimPrefix(h, "\ufeff")
		}
		h = strings.TrimSpace(h)
		if h == "" {
			return nil, engine.Errorf(engine.CodePlanInvalid, "seed %s:%d: column %d has no name", name, hline, i+1)
		}
		// Headers become quoted SQL names in every warehouse: any printable
		// text is safe, control and invalid characters are not.
		if strings.ContainsFunc(h, func(r rune) bool { return r == unicode.ReplacementChar || !unicode.IsPrint(r) && r != ' ' }) {
			return nil, engine.Errorf(engine.CodePlanInvalid, "seed %s:%d: column %s contains a control or invalid character", name, hline, engine.QuoteText(h))
		}
		// SQL names are case-insensitive: Id and ID would be one column.
		if seen[strings.ToLower(h)] {
			return nil, engine.Errorf(engine.CodePlanInvalid, "seed %s:%d: column %s appears twice", name, hline, engine.QuoteText(h))
		}
		seen[strings.ToLower(h)] = true
		header[i] = h
	}
	var raw [][]string
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, seedErr(name, rec, len(header), err)
		}
		line, _ := cr.FieldPos(0)
		if err := checkRecord(name, line, rec); err != nil {
			return nil, err
		}
		raw = append(raw, rec)
	}
	t := &SeedTable{Columns: header, Types: make([]string, len(header)), Rows: make([][]any, len(raw))}
	for c := range header {
		isInt, isReal, hasValue := true, true, false
		for _, rec := range raw {
			v := rec[c]
			if v == "" {
				continue
			}
			hasValue = true
			if _, err := strconv.ParseInt(v, 10, 64); err != nil {
				isInt = false
				if integerRE.MatchString(v) {
					// Beyond int64: a REAL would silently round the
					// digits (ids, card numbers); keep them as text.
					isReal = false
				}
			}
			if !decimalRE.MatchString(v) {
				isReal = false
			} else if f, err := strconv.ParseFloat(v, 64); err != nil || math.IsInf(f, 0) {
				isReal = false
			}
		}
		switch {
		case !hasValue:
			t.Types[c] = TypeText
		case isInt:
			t.Types[c] = TypeInteger
		case isReal:
			t.Types[c] = TypeReal
		default:
			t.Types[c] = TypeText
		}
	}
	for i, rec := range raw {
		row := make([]any, len(header))
		for c, v := range rec {
			if v == "" {
				continue
			}
			switch t.Types[c] {
			case TypeInteger:
				row[c], _ = strconv.ParseInt(v, 10, 64)
			case TypeReal:
				row[c], _ = strconv.ParseFloat(v, 64)
			default:
				row[c] = v
			}
		}
		t.Rows[i] = row
	}
	return t, nil
}

// checkRecord refuses binary content and over-long rows.
func checkRecord(name string, line int, rec []string) error {
	size := 0
	for i, v := range rec {
		size += len(v)
		if strings.IndexByte(v, 0) >= 0 || !utf8.ValidString(v) {
			return engine.Errorf(engine.CodePlanInvalid, "seed %s:%d: column %d holds binary content (a NUL byte or invalid UTF-8); a seed is UTF-8 text", name, line, i+1)
		}
	}
	if size > MaxSeedRowBytes {
		return engine.Errorf(engine.CodePlanInvalid, "seed %s:%d: the row is %d bytes, more than the limit of %d", name, line, size, MaxSeedRowBytes)
	}
	return nil
}

// decimalRE is what a REAL value looks like. strconv.ParseFloat alone would
// also take "NaN", "Inf", hex floats and "1_000", which are text in a CSV.
var (
	integerRE = regexp.MustCompile(`^[+-]?[0-9]+$`)
	decimalRE = regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$`)
)

func seedErr(name string, rec []string, want int, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		if errors.Is(pe.Err, csv.ErrFieldCount) {
			// The record's first line: a quoted field may span several.
			return engine.Errorf(engine.CodePlanInvalid, "seed %s:%d: the row has %d fields, the header %d", name, pe.StartLine, len(rec), want)
		}
		return engine.Errorf(engine.CodePlanInvalid, "seed %s:%d: %v", name, pe.Line, pe.Err)
	}
	return engine.Errorf(engine.CodePlanInvalid, "seed %s: %w", name, err)
}

// String renders a short description for messages.
func (t *SeedTable) String() string {
	return fmt.Sprintf("%d columns, %d rows", len(t.Columns), len(t.Rows))
}
