package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// runIncremental builds an incremental model. On its first run, when the
// relation is not a table, or with FullRefresh, the table is built from the
// full select as a table model is (replace: atomic). Afterwards the new
// rows — the select, filtered by IncrementalFilter when there is one — are
// merged into the table in one transaction: with a UniqueKey, the table's
// rows whose key matches a new row are deleted and the new rows inserted
// (SQLite has no MERGE; delete+insert is dbt's delete+insert strategy and
// leaves the table as MERGE would); without one they are appended. A
// failure rolls the transaction back and leaves the table as it was.
func (w *Warehouse) runIncremental(ctx context.Context, req engine.StepRequest, rel, body string) (engine.StepResult, error) {
	// One transaction with the step's ledger row (write): a merge that
	// committed is not merged again on resume.
	return w.write(ctx, req, func(tx *sql.Tx) (engine.StepResult, error) {
		var old string
		switch err := tx.QueryRowContext(ctx, w.q["relation_type"], rel).Scan(&old); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return engine.StepResult{}, err
		}
		if old != "table" || req.FullRefresh {
			var n int64
			err := w.replace(ctx, tx, rel, plan.MaterializedTable, func(target string) error {
				_, err := tx.ExecContext(ctx, "CREATE TABLE "+target+" AS\n"+body+"\n", req.Params...)
				return err
			}, &n)
			return engine.StepResult{RowCount: n, RowsAffected: n}, err
		}
		return w.mergeInto(ctx, tx, req, rel, body)
	})
}

// mergeInto merges the new rows of an incremental model into its table
// within tx (which the caller commits, or rolls back on an error).
func (w *Warehouse) mergeInto(ctx context.Context, tx *sql.Tx, req engine.StepRequest, rel, body string) (engine.StepResult, error) {
	target := quoteIdent(rel)
	source := "SELECT * FROM (\n" + body + "\n) AS dvt_new"
	if req.IncrementalFilter != "" {
		filter, err := plan.RenderThis(req.IncrementalFilter, target)
		if err != nil {
			return engine.StepResult{}, err
		}
		source += "\nWHERE (\n" + filter + "\n)"
	}
	tmp := quoteIdent(tmpPrefix + rel)
	if _, err := tx.ExecContext(ctx, "DROP TABLE IF EXISTS "+tmp); err != nil {
		return engine.StepResult{}, err
	}
	// The new rows are computed once, before the table changes: a filter
	// that reads {{ this }} sees the table as it was.
	if _, err := tx.ExecContext(ctx, "CREATE TABLE "+tmp+" AS\n"+source+"\n", req.Params...); err != nil {
		return engine.StepResult{}, err
	}
	cols, err := columnsOf(ctx, tx, target)
	if err != nil {
		return engine.StepResult{}, err
	}
	newCols, err := columnsOf(ctx, tx, tmp)
	if err != nil {
		return engine.StepResult{}, err
	}
	merge, err := plan.MergeColumns(req.StepID, cols, newCols, req.UniqueKey)
	if err != nil {
		return engine.StepResult{}, err
	}
	quoted := make([]string, len(merge.Columns))
	for i, c := range merge.Columns {
		quoted[i] = quoteIdent(c)
	}
	if len(merge.Key) > 0 {
		keys := make([]string, len(merge.Key))
		notNull := make([]string, len(merge.Key))
		for i, k := range merge.Key {
			keys[i] = quoteIdent(k)
			notNull[i] = keys[i] + " IS NOT NULL"
		}
		keyList := strings.Join(keys, ", ")
		var dups int64
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM (SELECT 1 FROM "+tmp+" WHERE "+strings.Join(notNull, " AND ")+
			" GROUP BY "+keyList+" HAVING count(*) > 1)").Scan(&dups); err != nil {
			return engine.StepResult{}, err
		}
		if dups > 0 {
			return engine.StepResult{}, plan.DuplicateKeyError(req.StepID, merge.Key, dups)
		}
		// A row-value IN: SQLite indexes the subquery's keys once (a
		// correlated EXISTS would scan the new rows for every table row).
		// A NULL key is IN nothing, as it equals nothing under MERGE.
		if _, err := tx.ExecContext(ctx, "DELETE FROM "+target+" WHERE ("+keyList+") IN (SELECT "+keyList+" FROM "+tmp+")"); err != nil {
			return engine.StepResult{}, err
		}
	}
	list := strings.Join(quoted, ", ")
	res, err := tx.ExecContext(ctx, "INSERT INTO "+target+" ("+list+") SELECT "+list+" FROM "+tmp)
	if err != nil {
		return engine.StepResult{}, err
	}
	merged, _ := res.RowsAffected()
	if _, err := tx.ExecContext(ctx, "DROP TABLE "+tmp); err != nil {
		return engine.StepResult{}, err
	}
	var n int64
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM "+target).Scan(&n); err != nil {
		return engine.StepResult{}, err
	}
	return engine.StepResult{RowCount: n, RowsAffected: merged}, nil
}

// columnsOf returns the column names of a relation (quoted name), in order.
func columnsOf(ctx context.Context, tx *sql.Tx, quoted string) ([]string, error) {
	rows, err := tx.QueryContext(ctx, "SELECT * FROM "+quoted+" LIMIT 0")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return rows.Columns()
}
