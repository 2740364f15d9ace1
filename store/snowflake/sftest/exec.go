package sftest

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/duckdb/duckdb-go/v2"
)

// execStmt runs one statement of a request on the session.
func (s *session) execStmt(ctx context.Context, st *stmt, binds map[string]bindParam) (*result, error) {
	s.applyAbort()
	if res, ok, err := s.execIntrospection(ctx, st, binds); ok {
		return res, err
	}
	w0, w1 := st.word(0), st.word(1)
	switch {
	case w0 == "BEGIN" || w0 == "START" && w1 == "TRANSACTION":
		// Snowflake ignores a BEGIN inside a transaction. DuckDB's own
		// transaction starts with the first statement (see begin).
		if !s.inTx {
			s.startTxInfo(false)
		}
		s.inTx = true
		return statusResult(stmtTCL, "Statement executed successfully."), nil
	case w0 == "COMMIT" || w0 == "ROLLBACK" || w0 == "ABORT":
		return s.endTx(ctx, w0 == "COMMIT")
	case w0 == "ALTER" && w1 == "SESSION":
		return s.alterSession(st)
	case w0 == "USE":
		return s.use(ctx, st)
	case w0 == "CREATE" && (w1 == "DATABASE" || st.word(3) == "DATABASE"):
		return s.createDatabase(ctx, st)
	}
	if s.inTx && isDDL(w0) {
		// Snowflake commits the open transaction before DDL, runs the DDL
		// as its own transaction and leaves the session in autocommit.
		if _, err := s.endTx(ctx, true); err != nil {
			return nil, err
		}
	}
	if s.doomed != nil {
		return nil, s.doomed
	}
	args, arrayLen, err := decodeBindings(binds)
	if err != nil {
		return nil, err
	}
	st = s.withContextFunctions(st)
	if table := lockTarget(st, s.db, s.sc); table != "" {
		if !s.inTx {
			// An autocommit write is a transaction of its own while it
			// waits for and holds the lock (SHOW LOCKS lists it).
			s.startTxInfo(true)
			defer s.endTxInfo()
		}
		if err := s.locks.acquire(ctx, s, table, s.lockTimeout()); err != nil {
			return nil, err
		}
		if !s.inTx {
			defer s.locks.releaseAll(s)
		}
	}
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	var res *result
	err = s.conn.Raw(func(dc any) error {
		var rerr error
		res, rerr = runDuck(ctx, dc.(*duckdb.Conn), st, args, arrayLen, s.duckTx)
		return rerr
	})
	if err != nil && s.duckTx {
		s.checkAborted(ctx, err)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// runDuck prepares the translated statement on the session's DuckDB
// connection and runs it once per argument list. DuckDB itself says whether
// the statement returns rows, so WITH, comments or "(" in front make no
// difference.
func runDuck(ctx context.Context, c *duckdb.Conn, st *stmt, args [][]driver.NamedValue, arrayLen int, inTx bool) (*result, error) {
	ps, err := c.PrepareContext(ctx, st.duck)
	if err != nil {
		return nil, err
	}
	p := ps.(*duckdb.Stmt)
	defer p.Close()
	typ, err := p.StatementType()
	if err != nil {
		return nil, err
	}
	if typ == duckdb.STATEMENT_TYPE_SELECT && arrayLen < 0 && len(args[0]) > 0 && untypedColumn(p) {
		// SELECT ? AS a: DuckDB cannot type a column that is only a
		// parameter, Snowflake types it by the bind. Cast each parameter to
		// the type its bind decoded to and prepare again.
		typed := *st
		typed.duck = render(castParams(translate(st.toks), args[0]))
		ps2, err := c.PrepareContext(ctx, typed.duck)
		if err != nil {
			return nil, err
		}
		p, st = ps2.(*duckdb.Stmt), &typed // the first is closed by its defer
		defer p.Close()
	}
	kind := stmtKind(typ, st)
	if arrayLen >= 0 {
		return runArray(ctx, c, p, kind, args, inTx)
	}
	if typ == duckdb.STATEMENT_TYPE_SELECT {
		if wrapped, names, err := jsonAsText(ctx, c, p, st); err != nil {
			return nil, err
		} else if wrapped != nil {
			defer wrapped.Close()
			rows, err := wrapped.QueryContext(ctx, args[0])
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			return readRows(rows, st, names)
		}
	}
	rows, err := p.QueryContext(ctx, args[0])
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if kind == stmtMerge {
		return readMerge(rows, st)
	}
	if kind != stmtSelect && kind != stmtDDL {
		n, err := readCount(rows)
		if err != nil {
			return nil, err
		}
		return dmlResult(kind, n), nil
	}
	if kind == stmtDDL {
		return statusResult(stmtDDL, "Statement executed successfully."), nil
	}
	return readRows(rows, st, nil)
}

// jsonAsText re-prepares a query whose result has JSON columns so that they
// come back as text: duckdb-go would decode them into Go values (float64
// numbers, JSON null as SQL NULL). The query becomes a subquery whose
// columns are renamed by position; names and JSON-ness of the original
// columns are returned. It returns nil when there is no JSON column.
func jsonAsText(ctx context.Context, c *duckdb.Conn, p *duckdb.Stmt, st *stmt) (*duckdb.Stmt, []jsonColumn, error) {
	n, err := p.ColumnCount()
	if err != nil {
		return nil, nil, err
	}
	cols := make([]jsonColumn, n)
	hasJSON := false
	for i := range cols {
		if cols[i].name, err = p.ColumnName(i); err != nil {
			return nil, nil, err
		}
		info, err := p.ColumnTypeInfo(i)
		if err != nil {
			return nil, nil, err
		}
		cols[i].json = strings.EqualFold(info.Alias(), "JSON")
		hasJSON = hasJSON || cols[i].json
	}
	if !hasJSON {
		return nil, nil, nil
	}
	aliases := make([]string, n)
	list := make([]string, n)
	for i, col := range cols {
		aliases[i] = fmt.Sprintf("sftest_c%d", i+1)
		list[i] = aliases[i]
		if col.json {
			list[i] = "CAST(" + aliases[i] + " AS VARCHAR)"
		}
	}
	q := "SELECT " + strings.Join(list, ", ") + " FROM (" + st.duck + ") AS sftest_q(" + strings.Join(aliases, ", ") + ")"
	ps, err := c.PrepareContext(ctx, q)
	if err != nil {
		return nil, nil, err
	}
	return ps.(*duckdb.Stmt), cols, nil
}

// jsonColumn describes a result column of a query rewritten by jsonAsText.
type jsonColumn struct {
	name string
	json bool
}

// stmtKind maps DuckDB's statement type to the Snowflake id class.
func stmtKind(typ duckdb.StmtType, st *stmt) int64 {
	switch typ {
	case duckdb.STATEMENT_TYPE_SELECT, duckdb.STATEMENT_TYPE_EXPLAIN, duckdb.STATEMENT_TYPE_PRAGMA,
		duckdb.STATEMENT_TYPE_CALL, duckdb.STATEMENT_TYPE_RELATION:
		return stmtSelect
	case duckdb.STATEMENT_TYPE_INSERT:
		return stmtInsert
	case duckdb.STATEMENT_TYPE_UPDATE:
		return stmtUpdate
	case duckdb.STATEMENT_TYPE_DELETE:
		return stmtDelete
	}
	if st.word(0) == "MERGE" {
		return stmtMerge
	}
	return stmtDDL
}

func dmlResult(kind int64, n int64) *result {
	switch kind {
	case stmtInsert:
		return countResult(kind, []string{"number of rows inserted"}, []int64{n})
	case stmtUpdate:
		return countResult(kind, []string{"number of rows updated", "number of multi-joined rows updated"}, []int64{n, 0})
	case stmtDelete:
		return countResult(kind, []string{"number of rows deleted"}, []int64{n})
	}
	// Array-bound MERGE: only the total is known.
	return countResult(kind, []string{"number of rows inserted"}, []int64{n})
}

// readCount reads the single "Count" row DuckDB returns for DML.
func readCount(rows driver.Rows) (int64, error) {
	dest := make([]driver.Value, len(rows.Columns()))
	var total int64
	for {
		err := rows.Next(dest)
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return 0, err
		}
		switch v := dest[0].(type) {
		case int64:
			total += v
		case int32:
			total += int64(v)
		case *big.Int:
			total += v.Int64()
		}
	}
}

// readMerge counts the merge_action rows of a MERGE … RETURNING into
// Snowflake's columns, one per kind of clause the statement has.
func readMerge(rows driver.Rows, st *stmt) (*result, error) {
	counts := map[string]int64{}
	dest := make([]driver.Value, len(rows.Columns()))
	for {
		err := rows.Next(dest)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if a, ok := dest[0].(string); ok {
			counts[strings.ToUpper(a)]++
		}
	}
	var names []string
	var values []int64
	for _, c := range []struct{ action, name string }{
		{"INSERT", "number of rows inserted"},
		{"UPDATE", "number of rows updated"},
		{"DELETE", "number of rows deleted"},
	} {
		if hasThen(st, c.action) {
			names = append(names, c.name)
			values = append(values, counts[c.action])
		}
	}
	return countResult(stmtMerge, names, values), nil
}

// hasThen reports whether the statement has a "THEN action" clause.
func hasThen(st *stmt, action string) bool {
	for i := 0; i+1 < len(st.toks); i++ {
		if st.toks[i].is("THEN") && st.toks[i+1].is(action) {
			return true
		}
	}
	return false
}

// runArray executes a statement once per row of an array bind, inside a
// transaction so the bulk insert is atomic as in Snowflake.
func runArray(ctx context.Context, c *duckdb.Conn, p *duckdb.Stmt, kind int64, args [][]driver.NamedValue, inTx bool) (*result, error) {
	if kind == stmtSelect || kind == stmtDDL {
		return nil, newSFError(CodeCompilation, "42000", "array binds are only supported for DML")
	}
	if !inTx {
		if _, err := c.ExecContext(ctx, "BEGIN TRANSACTION", nil); err != nil {
			return nil, err
		}
	}
	var total int64
	for _, row := range args {
		r, err := p.ExecContext(ctx, row)
		if err != nil {
			if !inTx {
				_, _ = c.ExecContext(context.WithoutCancel(ctx), "ROLLBACK", nil)
			}
			return nil, err
		}
		n, _ := r.RowsAffected()
		total += n
	}
	if !inTx {
		if _, err := c.ExecContext(ctx, "COMMIT", nil); err != nil {
			return nil, err
		}
	}
	return dmlResult(kind, total), nil
}

// readRows encodes a query result; orig names the columns of a query
// rewritten by jsonAsText. Column names are upper-cased unless the
// statement wrote them as "quoted identifiers", mirroring how Snowflake
// resolves unquoted names.
func readRows(rows driver.Rows, st *stmt, orig []jsonColumn) (*result, error) {
	cols := rows.Columns()
	typed, _ := rows.(driver.RowsColumnTypeDatabaseTypeName)
	res := &result{stmtType: stmtSelect}
	for i, name := range cols {
		dbType := "VARCHAR"
		if typed != nil {
			dbType = typed.ColumnTypeDatabaseTypeName(i)
		}
		if orig != nil { // renamed by jsonAsText
			name = orig[i].name
			if orig[i].json {
				dbType = "JSON"
			}
		}
		if !st.quoted[name] {
			name = strings.ToUpper(name)
		}
		res.rowType = append(res.rowType, columnType(name, dbType))
	}
	dest := make([]driver.Value, len(cols))
	for {
		err := rows.Next(dest)
		if errors.Is(err, io.EOF) {
			return res, nil
		}
		if err != nil {
			return nil, err
		}
		row := make([]*string, len(cols))
		for i, v := range dest {
			if row[i], err = encodeValue(res.rowType[i], v); err != nil {
				return nil, err
			}
		}
		res.rowSet = append(res.rowSet, row)
	}
}

// isDDL reports the statements that end an open transaction in Snowflake.
func isDDL(first string) bool {
	switch first {
	case "CREATE", "ALTER", "DROP", "UNDROP", "COMMENT", "GRANT", "REVOKE":
		return true
	}
	return false
}

// untypedColumn reports a result column DuckDB could not type.
func untypedColumn(p *duckdb.Stmt) bool {
	n, err := p.ColumnCount()
	if err != nil {
		return false
	}
	for i := 0; i < n; i++ {
		if t, err := p.ColumnType(i); err != nil || t == duckdb.TYPE_INVALID {
			return true
		}
	}
	return false
}

// castParams wraps each parameter in a CAST to the DuckDB type of its bound
// value (? in order, $N by number).
func castParams(toks []token, args []driver.NamedValue) []token {
	out := make([]token, len(toks))
	next := 0
	for i, t := range toks {
		out[i] = t
		if t.kind != tkParam {
			continue
		}
		idx := next
		if b := bare(t); strings.HasPrefix(b, "$") {
			if n, err := strconv.Atoi(b[1:]); err == nil {
				idx = n - 1
			}
		} else {
			next++
		}
		if idx < 0 || idx >= len(args) {
			continue
		}
		pre := strings.TrimSuffix(t.text, bare(t))
		out[i].text = pre + "CAST(" + bare(t) + " AS " + duckTypeOf(args[idx].Value) + ")"
	}
	return out
}

func duckTypeOf(v driver.Value) string {
	switch x := v.(type) {
	case int64:
		return "BIGINT"
	case float64:
		return "DOUBLE"
	case bool:
		return "BOOLEAN"
	case []byte:
		return "BLOB"
	case time.Time:
		if x.Location() == time.UTC {
			return "TIMESTAMP_NS"
		}
		return "TIMESTAMPTZ"
	}
	return "VARCHAR"
}
