package postgres

import (
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/store"
)

// Aliases of the two sides of an incremental MERGE, dbt's names.
const (
	mergeSource = "DBT_INTERNAL_SOURCE"
	mergeDest   = "DBT_INTERNAL_DEST"
)

func (s *step) exec(q string, args ...any) (sql.Result, error) {
	return s.tx.ExecContext(s.ctx, q, args...)
}

// existing is what a relation is now: kind "" when there is none.
type existing struct {
	kind  string // r, p, v, m…
	oid   int64
	cols  []string
	types []string
}

func (s *step) existing(r relation) (existing, error) {
	var e existing
	var cols, types string
	err := s.tx.QueryRowContext(s.ctx, s.w.q["relation_kind"], r.schema, r.name).Scan(&e.kind, &e.oid, &cols, &types)
	if errors.Is(err, sql.ErrNoRows) {
		return existing{}, nil
	}
	if err != nil {
		return existing{}, err
	}
	if err := json.Unmarshal([]byte(cols), &e.cols); err != nil {
		return existing{}, err
	}
	return e, json.Unmarshal([]byte(types), &e.types)
}

func (e existing) isTable() bool { return e.kind == "r" || e.kind == "p" }

// prepare takes the relation's advisory lock (builders of one relation take
// turns) and creates its schema if missing.
func (s *step) prepare(r relation) error {
	if _, err := s.exec(s.w.q["lock_relation"], r.schema+"."+r.name); err != nil {
		return err
	}
	var ok bool
	if err := s.tx.QueryRowContext(s.ctx, s.w.q["schema_exists"], quoteIdent(r.schema)).Scan(&ok); err != nil || ok {
		return err
	}
	_, err := s.exec("CREATE SCHEMA IF NOT EXISTS " + quoteIdent(r.schema))
	return err
}

// dropOld drops the relation (and, CASCADE, the views that read it: as
// dbt-postgres does, they are rebuilt by their own steps).
func (s *step) dropOld(r relation, e existing) error {
	var what string
	switch e.kind {
	case "":
		return nil
	case "r", "p":
		what = "TABLE"
	case "v":
		what = "VIEW"
	case "m":
		what = "MATERIALIZED VIEW"
	default:
		return engine.Errorf(engine.CodeStepFailed, "step %s: %s exists and is not a table or view (relkind %s); dvtrun does not replace it", s.req.StepID, r.quoted, e.kind)
	}
	_, err := s.exec("DROP " + what + " " + r.quoted + " CASCADE")
	return err
}

// replaceTable builds a table (seed, table model, an incremental model's
// first build) under a temporary name with build and puts it in the
// relation's place, within the step's transaction: a failure rolls back
// and leaves the old relation as it was. Views that read the old table
// keep working when the new one has the same columns (its rows are
// replaced in place); otherwise they are dropped with it, as dbt-postgres
// does. It returns the new table's row count.
func (s *step) replaceTable(r relation, build func(tmp string) (int64, error)) (int64, error) {
	if err := s.prepare(r); err != nil {
		return 0, err
	}
	old, err := s.existing(r)
	if err != nil {
		return 0, err
	}
	tmpRel := relation{schema: r.schema, name: tmpName(r.name)}
	tmpRel.quoted = quoteIdent(r.schema) + "." + quoteIdent(tmpRel.name)
	if _, err := s.exec("DROP TABLE IF EXISTS " + tmpRel.quoted); err != nil {
		return 0, err
	}
	n, err := build(tmpRel.quoted)
	if err != nil {
		return 0, err
	}
	if old.isTable() {
		var dependents int64
		if err := s.tx.QueryRowContext(s.ctx, s.w.q["dependent_views"], old.oid).Scan(&dependents); err != nil {
			return 0, err
		}
		if dependents > 0 {
			built, err := s.existing(tmpRel)
			if err != nil {
				return 0, err
			}
			if slices.Equal(built.cols, old.cols) && slices.Equal(built.types, old.types) {
				// Same shape: the rows change, the table (and the views
				// bound to it) stay.
				if _, err := s.exec("TRUNCATE " + r.quoted); err != nil {
					return 0, err
				}
				if _, err := s.exec("INSERT INTO " + r.quoted + " SELECT * FROM " + tmpRel.quoted); err != nil {
					return 0, err
				}
				_, err := s.exec("DROP TABLE " + tmpRel.quoted)
				return n, err
			}
		}
	}
	if err := s.dropOld(r, old); err != nil {
		return 0, err
	}
	if _, err := s.exec("ALTER TABLE " + tmpRel.quoted + " RENAME TO " + quoteIdent(r.name)); err != nil {
		return 0, err
	}
	return n, nil
}

// readSeed parses a seed step's CSV, before its transaction begins: no
// session sits idle in a transaction, holding locks, while Go parses.
func readSeed(req engine.StepRequest) (*plan.SeedTable, error) {
	f, err := req.OpenSeed()
	if err != nil {
		return nil, engine.Errorf(engine.CodePlanInvalid, "seed %s: cannot read its CSV file: %w", req.StepID, err)
	}
	defer f.Close()
	return plan.ReadSeed(f, req.SeedPath)
}

func (s *step) seed(seed *plan.SeedTable) (engine.StepResult, error) {
	r, err := s.relation()
	if err != nil {
		return engine.StepResult{}, err
	}
	defs := make([]string, len(seed.Columns))
	for i, c := range seed.Columns {
		defs[i] = quoteIdent(c) + " " + seedType(seed.Types[i])
	}
	n, err := s.replaceTable(r, func(tmp string) (int64, error) {
		if _, err := s.exec("CREATE TABLE " + tmp + " (" + strings.Join(defs, ", ") + ")"); err != nil {
			return 0, err
		}
		return s.copyRows(tmp, seed)
	})
	return engine.StepResult{RowCount: n, RowsAffected: n}, err
}

// seedType: dbt-postgres's seed types (integer, numeric, text), bigint for
// integers so that no id overflows; numeric keeps a CSV's decimals exact
// and takes round(x, 2).
func seedType(t string) string {
	switch t {
	case plan.TypeInteger:
		return "BIGINT"
	case plan.TypeReal:
		return "NUMERIC"
	default:
		return "TEXT"
	}
}

// copyRows loads the seed's rows into table tmp (quoted, qualified) with
// COPY, on the step's connection and inside its transaction: one round
// trip for the rows, whatever their number (BenchmarkSeedLoad measured it
// against batched INSERTs).
func (s *step) copyRows(tmp string, seed *plan.SeedTable) (int64, error) {
	schema, name, _ := strings.Cut(tmp, ".")
	ident := pgx.Identifier{unquote(schema), unquote(name)}
	var n int64
	err := s.conn.Raw(func(dc any) (err error) {
		n, err = dc.(*stdlib.Conn).Conn().CopyFrom(s.ctx, ident, seed.Columns, pgx.CopyFromRows(seed.Rows))
		return err
	})
	return n, err
}

// insertRows is the batched-INSERT alternative to copyRows that
// BenchmarkSeedLoad compares it with: multi-row VALUES, at most
// insertBinds parameters a statement.
func (s *step) insertRows(tmp string, seed *plan.SeedTable) (int64, error) {
	const insertBinds = 16000
	cols := make([]string, len(seed.Columns))
	for i, c := range seed.Columns {
		cols[i] = quoteIdent(c)
	}
	chunk := max(1, insertBinds/max(1, len(cols)))
	var n int64
	for lo := 0; lo < len(seed.Rows); lo += chunk {
		rows := seed.Rows[lo:min(lo+chunk, len(seed.Rows))]
		var b strings.Builder
		b.WriteString("INSERT INTO " + tmp + " (" + strings.Join(cols, ", ") + ") VALUES ")
		args := make([]any, 0, len(rows)*len(cols))
		for i, row := range rows {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('(')
			for j, v := range row {
				if j > 0 {
					b.WriteString(", ")
				}
				args = append(args, v)
				b.WriteString("$" + strconv.Itoa(len(args)))
			}
			b.WriteByte(')')
		}
		res, err := s.exec(b.String(), args...)
		if err != nil {
			return 0, err
		}
		k, _ := res.RowsAffected()
		n += k
	}
	return n, nil
}

// unquote undoes quoteIdent.
func unquote(q string) string {
	return strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(q, `"`), `"`), `""`, `"`)
}

func (s *step) model() (engine.StepResult, error) {
	r, err := s.relation()
	if err != nil {
		return engine.StepResult{}, err
	}
	body, err := plan.SingleStatement(s.req.SQL)
	if err != nil {
		return engine.StepResult{}, engine.Errorf(engine.CodePlanInvalid, "model %s: %w", s.req.StepID, err)
	}
	body, args, err := s.bind(body)
	if err != nil {
		return engine.StepResult{}, err
	}
	switch s.req.Materialized {
	case plan.MaterializedTable:
		n, err := s.replaceTable(r, func(tmp string) (int64, error) {
			return s.createTableAs(tmp, body, args)
		})
		return engine.StepResult{RowCount: n}, err
	case plan.MaterializedView, "":
		if len(s.req.Params) > 0 {
			return engine.StepResult{}, engine.Errorf(engine.CodePlanInvalid, "model %s: a view cannot take parameters (Postgres stores its text)", s.req.StepID)
		}
		return engine.StepResult{}, s.replaceView(r, body)
	case plan.MaterializedIncremental:
		return s.incremental(r, body, args)
	default:
		return engine.StepResult{}, engine.Errorf(engine.CodePlanInvalid, "model %s: materialized %q is not table, view or incremental", s.req.StepID, s.req.Materialized)
	}
}

// createTableAs builds table target from a select; the command tag gives
// its row count.
func (s *step) createTableAs(target, body string, args []any) (int64, error) {
	res, err := s.exec("CREATE TABLE "+target+" AS\n"+body+"\n", args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// replaceView puts a view in the relation's place. CREATE OR REPLACE VIEW
// keeps the views that read it when its columns stay (Postgres allows
// added trailing columns only); otherwise the old view goes, CASCADE, as
// with a table.
func (s *step) replaceView(r relation, body string) error {
	if err := s.prepare(r); err != nil {
		return err
	}
	old, err := s.existing(r)
	if err != nil {
		return err
	}
	if old.kind == "v" {
		if _, err := s.exec("SAVEPOINT dvt_view"); err != nil {
			return err
		}
		if _, err := s.exec("CREATE OR REPLACE VIEW " + r.quoted + " AS\n" + body + "\n"); err == nil {
			_, err = s.exec("RELEASE SAVEPOINT dvt_view")
			return err
		}
		if _, err := s.exec("ROLLBACK TO SAVEPOINT dvt_view"); err != nil {
			return err
		}
	}
	if err := s.dropOld(r, old); err != nil {
		return err
	}
	_, err = s.exec("CREATE VIEW " + r.quoted + " AS\n" + body + "\n")
	return err
}

// incremental builds an incremental model (dbt-postgres's merge strategy).
// On its first run, when the relation is not a table, or with FullRefresh,
// the table is built from the full select as a table model is. Afterwards
// the new rows — the select filtered by IncrementalFilter — are merged
// into the table with one MERGE on UniqueKey (matched rows updated, others
// inserted), or one INSERT without a key: a single statement, so the
// filter's {{ this }} reads the table as it was. New rows that repeat a key
// value fail the step first, as on SQLite and Snowflake.
func (s *step) incremental(r relation, body string, args []any) (engine.StepResult, error) {
	if err := s.prepare(r); err != nil {
		return engine.StepResult{}, err
	}
	old, err := s.existing(r)
	if err != nil {
		return engine.StepResult{}, err
	}
	if !old.isTable() || s.req.FullRefresh {
		n, err := s.replaceTable(r, func(tmp string) (int64, error) { return s.createTableAs(tmp, body, args) })
		return engine.StepResult{RowCount: n, RowsAffected: n}, err
	}
	source := "SELECT * FROM (\n" + body + "\n) AS dvt_new"
	if s.req.IncrementalFilter != "" {
		filter, err := plan.RenderThis(s.req.IncrementalFilter, r.quoted)
		if err != nil {
			return engine.StepResult{}, err
		}
		source += "\nWHERE (\n" + filter + "\n)"
	}
	m, err := plan.MergeColumns(s.req.StepID, old.cols, nil, s.req.UniqueKey)
	if err != nil {
		return engine.StepResult{}, err
	}
	cols := make([]string, len(m.Columns))
	src := make([]string, len(m.Columns))
	for i, c := range m.Columns {
		cols[i] = quoteIdent(c)
		src[i] = mergeSource + "." + cols[i]
	}
	var stmt string
	if len(m.Key) == 0 {
		stmt = "INSERT INTO " + r.quoted + " (" + strings.Join(cols, ", ") + ")\nSELECT " + strings.Join(cols, ", ") + " FROM (\n" + source + "\n) AS " + mergeSource
	} else {
		if !s.w.merge {
			return engine.StepResult{}, engine.Errorf(engine.CodeStepFailed, "model %s: an incremental model with a unique key needs MERGE, which the %s lacks (Postgres 15 or later)", s.req.StepID, s.w.name)
		}
		keys := make([]string, len(m.Key))
		notNull := make([]string, len(m.Key))
		on := make([]string, len(m.Key))
		for i, k := range m.Key {
			keys[i] = quoteIdent(k)
			notNull[i] = keys[i] + " IS NOT NULL"
			on[i] = mergeSource + "." + keys[i] + " = " + mergeDest + "." + keys[i]
		}
		var dups int64
		if err := s.tx.QueryRowContext(s.ctx, "SELECT count(*) FROM (SELECT 1 FROM (\n"+source+"\n) AS dvt_keys WHERE "+strings.Join(notNull, " AND ")+
			" GROUP BY "+strings.Join(keys, ", ")+" HAVING count(*) > 1) AS dvt_dups", args...).Scan(&dups); err != nil {
			return engine.StepResult{}, err
		}
		if dups > 0 {
			return engine.StepResult{}, plan.DuplicateKeyError(s.req.StepID, m.Key, dups)
		}
		set := make([]string, len(cols))
		for i := range cols {
			set[i] = cols[i] + " = " + src[i]
		}
		stmt = "MERGE INTO " + r.quoted + " AS " + mergeDest + "\nUSING (\n" + source + "\n) AS " + mergeSource +
			"\nON " + strings.Join(on, " AND ") +
			"\nWHEN MATCHED THEN UPDATE SET " + strings.Join(set, ", ") +
			"\nWHEN NOT MATCHED THEN INSERT (" + strings.Join(cols, ", ") + ") VALUES (" + strings.Join(src, ", ") + ")"
	}
	res, err := s.exec(stmt, args...)
	if err != nil {
		return engine.StepResult{}, err
	}
	merged, _ := res.RowsAffected()
	var n int64
	if err := s.tx.QueryRowContext(s.ctx, "SELECT count(*) FROM "+r.quoted).Scan(&n); err != nil {
		return engine.StepResult{}, err
	}
	return engine.StepResult{RowCount: n, RowsAffected: merged}, nil
}

func (s *step) test() (engine.StepResult, error) {
	body, err := plan.SingleStatement(s.req.SQL)
	if err != nil {
		return engine.StepResult{}, engine.Errorf(engine.CodePlanInvalid, "test %s: %w", s.req.StepID, err)
	}
	body, args, err := s.bind(body)
	if err != nil {
		return engine.StepResult{}, err
	}
	// The newlines keep a trailing -- comment from swallowing the ')'.
	var res engine.StepResult
	if err := s.tx.QueryRowContext(s.ctx, "SELECT count(*) FROM (\n"+body+"\n) AS dvt_test", args...).Scan(&res.Failures); err != nil || res.Failures == 0 {
		return res, err
	}
	rows, err := s.tx.QueryContext(s.ctx, "SELECT * FROM (\n"+body+"\n) AS dvt_test LIMIT "+strconv.Itoa(engine.FailingRowsSample), args...)
	if err != nil {
		return engine.StepResult{}, err
	}
	defer rows.Close()
	res.FailingRows, err = store.ScanSample(rows, engine.FailingRowsSample)
	return res, err
}

func (s *step) sql() (engine.StepResult, error) {
	stmts := statements(s.req.SQL)
	if len(stmts) == 0 {
		return engine.StepResult{}, engine.Errorf(engine.CodePlanInvalid, "sql step %s: SQL is empty", s.req.StepID)
	}
	if stmt := plan.TransactionControl(s.req.SQL); stmt != "" {
		return engine.StepResult{}, engine.Errorf(engine.CodePlanInvalid, "sql step %s: %q controls the transaction; the step already runs in one", s.req.StepID, stmt)
	}
	var total int64
	for _, st := range stmts {
		text, args, err := s.bind(st)
		if err != nil {
			return engine.StepResult{}, err
		}
		res, err := s.exec(text, args...)
		if err != nil {
			return engine.StepResult{}, err
		}
		if countsRows(st) {
			n, _ := res.RowsAffected()
			total += n
		}
	}
	return engine.StepResult{RowsAffected: total}, nil
}

// countsRows: the statements whose command tag counts rows written
// (INSERT, UPDATE, DELETE, MERGE, COPY), not rows read or created by DDL.
func countsRows(stmt string) bool {
	w := strings.ToUpper(firstWord(stmt))
	return w == "INSERT" || w == "UPDATE" || w == "DELETE" || w == "MERGE"
}

// bind numbers stmt's ? placeholders $1, $2… and returns the parameters
// they bind: the first of Params, in order, as each statement of a sql
// step numbers its own.
func (s *step) bind(stmt string) (string, []any, error) {
	if len(s.req.Params) == 0 {
		return stmt, nil, nil
	}
	text, n := numberPlaceholders(stmt)
	if n > len(s.req.Params) {
		return "", nil, engine.Errorf(engine.CodePlanInvalid, "step %s: the SQL has %d ? placeholders and the step %d parameters", s.req.StepID, n, len(s.req.Params))
	}
	return text, s.req.Params[:n], nil
}
