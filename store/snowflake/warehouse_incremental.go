package snowflake

import (
	"database/sql"
	"slices"
	"strings"
	"sync"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
)

var warehouseQueries = sync.OnceValues(func() (map[string]string, error) {
	return sqlfiles.Queries(sqlfiles.Snowflake, "warehouse.sql")
})

// Aliases of the two sides of an incremental MERGE, dbt's names, so that
// the statement reads in QUERY_HISTORY as dbt-snowflake's does.
const (
	mergeSource = "DBT_INTERNAL_SOURCE"
	mergeDest   = "DBT_INTERNAL_DEST"
)

// incremental builds an incremental model (dbt-snowflake's merge
// strategy). On its first run, when the relation is not a table, or with
// FullRefresh, CREATE OR REPLACE TABLE … AS the full select. Afterwards the
// new rows — the select filtered by IncrementalFilter — are merged into the
// table: one MERGE on UniqueKey (matched rows updated, others inserted), or
// one INSERT without a key. Either is a single statement, so a failure
// leaves the table as it was. New rows that repeat a key value fail the
// step before the MERGE, as on SQLite (Snowflake's MERGE itself fails only
// when such rows match a row of the table).
func (r *stepRun) incremental(req engine.StepRequest, rel, body string) (engine.StepResult, error) {
	q, err := warehouseQueries()
	if err != nil {
		return engine.StepResult{}, err
	}
	kind, table, err := r.relation(q["relation_columns"], req.Relation)
	if err != nil {
		return engine.StepResult{}, err
	}
	if !strings.HasSuffix(kind, "TABLE") || req.FullRefresh {
		if kind == "VIEW" {
			// CREATE OR REPLACE TABLE does not replace a view.
			if _, err := r.exec("DROP VIEW " + rel); err != nil {
				return engine.StepResult{}, err
			}
		}
		if _, err := r.exec("CREATE OR REPLACE TABLE "+rel+" AS\n"+body+"\n", req.Params...); err != nil {
			return engine.StepResult{}, err
		}
		n, err := r.count("SELECT COUNT(*) FROM " + rel)
		if err != nil {
			return engine.StepResult{}, err
		}
		return engine.StepResult{RowCount: n, RowsAffected: n}, nil
	}

	source := "SELECT * FROM (\n" + body + "\n)"
	if req.IncrementalFilter != "" {
		filter, err := plan.RenderThis(req.IncrementalFilter, rel)
		if err != nil {
			return engine.StepResult{}, err
		}
		source += "\nWHERE (\n" + filter + "\n)"
	}
	// The new rows' columns are not fetched (a round trip): a table column
	// they lack fails the MERGE itself.
	m, err := plan.MergeColumns(req.StepID, table, nil, req.UniqueKey)
	if err != nil {
		return engine.StepResult{}, err
	}
	cols := make([]string, len(m.Columns))
	src := make([]string, len(m.Columns))
	for i, c := range m.Columns {
		cols[i] = quoteExact(c)
		src[i] = mergeSource + "." + cols[i]
	}
	var stmt string
	if len(m.Key) == 0 {
		stmt = "INSERT INTO " + rel + " (" + strings.Join(cols, ", ") + ")\nSELECT " + strings.Join(cols, ", ") + " FROM (\n" + source + "\n)"
	} else {
		keys := make([]string, len(m.Key))
		notNull := make([]string, len(m.Key))
		on := make([]string, len(m.Key))
		for i, k := range m.Key {
			keys[i] = quoteExact(k)
			notNull[i] = keys[i] + " IS NOT NULL"
			on[i] = mergeSource + "." + keys[i] + " = " + mergeDest + "." + keys[i]
		}
		dups, err := r.count("SELECT COUNT(*) FROM (SELECT 1 FROM (\n"+source+"\n) WHERE "+strings.Join(notNull, " AND ")+
			" GROUP BY "+strings.Join(keys, ", ")+" HAVING COUNT(*) > 1)", req.Params...)
		if err != nil {
			return engine.StepResult{}, err
		}
		if dups > 0 {
			return engine.StepResult{}, plan.DuplicateKeyError(req.StepID, m.Key, dups)
		}
		set := make([]string, len(cols))
		for i := range cols {
			set[i] = cols[i] + " = " + src[i]
		}
		stmt = "MERGE INTO " + rel + " AS " + mergeDest + "\nUSING (\n" + source + "\n) AS " + mergeSource +
			"\nON " + strings.Join(on, " AND ") +
			"\nWHEN MATCHED THEN UPDATE SET " + strings.Join(set, ", ") +
			"\nWHEN NOT MATCHED THEN INSERT (" + strings.Join(cols, ", ") + ") VALUES (" + strings.Join(src, ", ") + ")"
	}
	merge := func() (engine.StepResult, error) {
		res, err := r.exec(stmt, req.Params...)
		if err != nil {
			return engine.StepResult{}, err
		}
		merged, _ := res.RowsAffected()
		n, err := r.count("SELECT COUNT(*) FROM " + rel)
		if err != nil {
			return engine.StepResult{}, err
		}
		return engine.StepResult{RowCount: n, RowsAffected: merged, QueryIDs: slices.Clone(r.ids)}, nil
	}
	// The MERGE or INSERT is DML: it commits with the step's ledger row, so
	// a merge that took effect is not merged again on resume (issue 8).
	if conn, ok := r.conn.(*sql.Conn); ok {
		return r.ledgered(req, conn, merge)
	}
	return merge()
}

// relation returns the type and columns of relation name in the current
// schema ("" and none when there is no such relation).
func (r *stepRun) relation(q, name string) (string, []string, error) {
	ctx, ch := r.stmtCtx()
	rows, err := r.conn.QueryContext(ctx, q, storedName(name))
	r.collect(ch)
	if err != nil {
		return "", nil, err
	}
	defer rows.Close()
	var kind string
	var cols []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&kind, &c); err != nil {
			return "", nil, err
		}
		cols = append(cols, c)
	}
	return kind, cols, rows.Err()
}

// storedName is the name Snowflake stores for a relation ident quoted:
// simple names upper-cased.
func storedName(name string) string {
	if simpleIdent.MatchString(name) {
		return strings.ToUpper(name)
	}
	return name
}

// quoteExact quotes a name as Snowflake returned it, without changing its
// case.
func quoteExact(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }
