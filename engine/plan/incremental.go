package plan

import (
	"fmt"
	"strings"

	"github.com/dvtrun/dvtrun/engine"
)

// incrementalProblems lists what is wrong with s's incremental settings.
func incrementalProblems(s Step) []string {
	var out []string
	incremental := s.Kind == KindModel && s.Materialized == MaterializedIncremental
	if !incremental {
		if len(s.UniqueKey) > 0 {
			out = append(out, "uniqueKey applies to incremental models only")
		}
		if s.IncrementalFilter != "" {
			out = append(out, "incrementalFilter applies to incremental models only")
		}
		return out
	}
	seen := map[string]bool{}
	for _, k := range s.UniqueKey {
		switch {
		case !identRE.MatchString(k):
			out = append(out, fmt.Sprintf("uniqueKey column %q is not a valid identifier", k))
		case seen[strings.ToLower(k)]:
			out = append(out, fmt.Sprintf("uniqueKey column %q is listed twice", k))
		}
		seen[strings.ToLower(k)] = true
	}
	if s.IncrementalFilter != "" {
		if strings.TrimSpace(s.IncrementalFilter) == "" {
			out = append(out, "incrementalFilter is blank")
		}
	}
	return out
}

func isEphemeral(s Step) bool {
	return s.Kind == KindModel && s.Materialized == MaterializedEphemeral
}

// Merge is how an incremental model's new rows go into its table: the
// table's columns to write (in the table's spelling and order) and the
// unique key's columns (the table's spelling; empty: append).
type Merge struct {
	Columns []string
	Key     []string
}

// MergeColumns matches a table's columns with the columns of the model's
// new rows, as dbt's default on_schema_change (ignore) does: columns only
// the new rows have are not written; a table column the new rows lack, or
// a key column either side lacks, is an error naming it. Names match
// exactly, else case-insensitively (an unquoted name in a model's SQL).
// incoming nil means unknown: the table's columns are not checked against
// it (the merge statement itself fails on a missing one).
func MergeColumns(stepID string, table, incoming, key []string) (Merge, error) {
	find := func(names []string, want string) (string, bool) {
		for _, n := range names {
			if n == want {
				return n, true
			}
		}
		for _, n := range names {
			if strings.EqualFold(n, want) {
				return n, true
			}
		}
		return "", false
	}
	var m Merge
	for _, c := range table {
		if _, ok := find(incoming, c); !ok && incoming != nil {
			return Merge{}, engine.Errorf(engine.CodeStepFailed, "incremental model %s: the model's new rows have no column %s, which its table has (run with --full-refresh to rebuild the table)", stepID, c)
		}
		m.Columns = append(m.Columns, c)
	}
	for _, k := range key {
		c, ok := find(table, k)
		if !ok {
			return Merge{}, engine.Errorf(engine.CodeStepFailed, "incremental model %s: unique key column %s is not a column of its table", stepID, k)
		}
		m.Key = append(m.Key, c)
	}
	return m, nil
}

// DuplicateKeyError is the failure of a merge whose new rows repeat a
// unique key value (n of them), on every warehouse alike: which of two rows
// would win is undefined (Snowflake's MERGE fails with "Duplicate row
// detected" when they match a row of the table).
func DuplicateKeyError(stepID string, key []string, n int64) error {
	return engine.Errorf(engine.CodeStepFailed, "incremental model %s: %d value(s) of the unique key (%s) occur more than once in the new rows; the table was left as it was", stepID, n, strings.Join(key, ", "))
}
