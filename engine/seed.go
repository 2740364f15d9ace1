package engine

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
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

// ReadSeed parses a CSV seed: a header row, RFC 4180 quoting, LF or CRLF
// line ends. A column is INTEGER when every non-empty value is an int64,
// REAL when every one is a number, TEXT otherwise; empty fields are NULL.
// Errors name the file and line.
func ReadSeed(r io.Reader, name string) (*SeedTable, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = false
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, Errorf(CodePlanInvalid, "seed %s is empty: it needs a header row", name)
	}
	if err != nil {
		return nil, seedErr(name, err)
	}
	seen := map[string]bool{}
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		if h == "" {
			return nil, Errorf(CodePlanInvalid, "seed %s line 1: column %d has no name", name, i+1)
		}
		if seen[strings.ToLower(h)] {
			return nil, Errorf(CodePlanInvalid, "seed %s line 1: column %q appears twice", name, h)
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
			return nil, seedErr(name, err)
		}
		raw = append(raw, rec)
	}
	t := &SeedTable{Columns: header, Types: make([]string, len(header)), Rows: make([][]any, len(raw))}
	for c := range header {
		isInt, isReal := true, true
		for _, rec := range raw {
			v := rec[c]
			if v == "" {
				continue
			}
			if _, err := strconv.ParseInt(v, 10, 64); err != nil {
				isInt = false
			}
			if _, err := strconv.ParseFloat(v, 64); err != nil {
				isReal = false
			}
		}
		switch {
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

func seedErr(name string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		msg := pe.Err.Error()
		if errors.Is(pe.Err, csv.ErrFieldCount) {
			msg = "wrong number of fields"
		}
		return Errorf(CodePlanInvalid, "seed %s line %d: %s", name, pe.Line, msg)
	}
	return Errorf(CodePlanInvalid, "seed %s: %v", name, err)
}

// String renders a short description for messages.
func (t *SeedTable) String() string {
	return fmt.Sprintf("%d columns, %d rows", len(t.Columns), len(t.Rows))
}
