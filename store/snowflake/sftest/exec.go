package sftest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/duckdb/duckdb-go/v2"
)

// session is one Snowflake session: its own DuckDB connection, so its
// transaction is isolated from every other session's.
type session struct {
	id    int64
	conn  *sql.Conn
	locks *lockManager
	// defaultLockTimeout applies without a LOCK_TIMEOUT session parameter.
	defaultLockTimeout time.Duration
	mu                 sync.Mutex // one request at a time, as on a real session
	inTx               bool       // the client opened a transaction
	duckTx             bool       // … and DuckDB's transaction has started (lazily, see begin)
	doomed             *sfError   // why DuckDB aborted the open transaction; only ROLLBACK/COMMIT end it
	params             map[string]string
	db, sc             string
}

// bindParam is one entry of the request's bindings map.
type bindParam struct {
	Type  string `json:"type"`
	Value any    `json:"value"`
	Fmt   string `json:"fmt"`
}

// execStmt runs one statement of a request on the session.
func (s *session) execStmt(ctx context.Context, st *stmt, binds map[string]bindParam) (*result, error) {
	w0, w1 := st.word(0), st.word(1)
	switch {
	case w0 == "BEGIN" || w0 == "START" && w1 == "TRANSACTION":
		// Snowflake ignores a BEGIN inside a transaction. DuckDB's own
		// transaction starts with the first statement (see begin).
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
	if s.doomed != nil {
		return nil, s.doomed
	}
	args, arrayLen, err := decodeBindings(binds)
	if err != nil {
		return nil, err
	}
	if table := lockTarget(st, s.db, s.sc); table != "" {
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

// checkAborted handles a failed statement inside a transaction. DuckDB
// aborts its transaction on a conflict and on most execution errors, where
// Snowflake rolls back only the statement. Since DuckDB cannot continue,
// its transaction is rolled back at once (freeing the connection), and
// every later statement and COMMIT fail loudly until the client ends the
// transaction — never a COMMIT that silently drops the earlier writes.
func (s *session) checkAborted(ctx context.Context, stmtErr error) {
	var de *duckdb.Error
	conflict := errors.As(stmtErr, &de) && de.Type == duckdb.ErrorTypeTransaction
	if !conflict {
		// Did this error abort DuckDB's transaction? Ask it.
		if err := s.rawExec(context.WithoutCancel(ctx), "SELECT 1"); err == nil {
			return
		}
	}
	_ = s.rawExec(context.WithoutCancel(ctx), "ROLLBACK")
	s.duckTx = false
	if conflict {
		s.doomed = newSFError(CodeLockConflict, "57014", "Transaction was aborted by a conflict and has been rolled back; issue ROLLBACK and retry")
		return
	}
	s.doomed = newSFError(CodeTxAborted, "25P02",
		"sftest: an earlier statement's error aborted the transaction (DuckDB cannot continue a transaction after a failed statement, Snowflake can); it has been rolled back, issue ROLLBACK")
}

// lockTimeout is the session's LOCK_TIMEOUT (seconds) or the server default.
func (s *session) lockTimeout() time.Duration {
	if v, ok := s.params["LOCK_TIMEOUT"]; ok {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			return time.Duration(n) * time.Second
		}
	}
	return s.defaultLockTimeout
}

// begin starts DuckDB's transaction for an open client transaction, right
// before its first statement runs: a transaction that starts with UPDATE
// then takes its snapshot after the table lock is granted, so it sees the
// previous holder's commit, as Snowflake's read committed would.
func (s *session) begin(ctx context.Context) error {
	if !s.inTx || s.duckTx {
		return nil
	}
	if err := s.rawExec(ctx, "BEGIN TRANSACTION"); err != nil {
		return err
	}
	s.duckTx = true
	return nil
}

func (s *session) rawExec(ctx context.Context, q string) error {
	if _, err := s.conn.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("%s: %w", q, err)
	}
	return nil
}

// endTx commits or rolls back; outside a transaction both are no-ops, as in
// Snowflake.
func (s *session) endTx(ctx context.Context, commit bool) (*result, error) {
	ok := statusResult(stmtTCL, "Statement executed successfully.")
	defer s.locks.releaseAll(s)
	doomed, open := s.doomed, s.duckTx
	s.inTx, s.duckTx, s.doomed = false, false, nil
	if doomed != nil && commit {
		return nil, doomed
	}
	if !open {
		return ok, nil
	}
	q := "ROLLBACK"
	if commit {
		q = "COMMIT"
	}
	// The end of a transaction must happen even if the client went away.
	if err := s.rawExec(context.WithoutCancel(ctx), q); err != nil {
		return nil, err
	}
	return ok, nil
}

// alterSession handles ALTER SESSION SET k = v [k = v …] and UNSET k.
func (s *session) alterSession(st *stmt) (*result, error) {
	t := st.toks
	if len(t) < 4 {
		return nil, newSFError(CodeCompilation, "42000", "SQL compilation error: syntax error in ALTER SESSION")
	}
	switch strings.ToUpper(bare(t[2])) {
	case "SET":
		for i := 3; i+2 < len(t); {
			if bare(t[i+1]) != "=" {
				return nil, newSFError(CodeCompilation, "42000", "SQL compilation error: syntax error near %q", bare(t[i+1]))
			}
			val := bare(t[i+2])
			if t[i+2].kind == tkString {
				val = t[i+2].val
			}
			s.params[strings.ToUpper(bare(t[i]))] = val
			i += 3
			if i < len(t) && bare(t[i]) == "," {
				i++
			}
		}
	case "UNSET":
		for i := 3; i < len(t); i++ {
			if t[i].kind == tkWord {
				delete(s.params, t[i].upper())
			}
		}
	}
	return statusResult(stmtSession, "Statement executed successfully."), nil
}

// use handles USE [DATABASE|SCHEMA] name and the no-op USE WAREHOUSE/ROLE.
func (s *session) use(ctx context.Context, st *stmt) (*result, error) {
	w1 := st.word(1)
	if w1 == "WAREHOUSE" || w1 == "ROLE" || w1 == "SECONDARY" {
		return statusResult(stmtUse, "Statement executed successfully."), nil
	}
	names := st.toks[1:]
	kind := ""
	if w1 == "DATABASE" || w1 == "SCHEMA" {
		kind, names = w1, names[1:]
	}
	var parts []string
	for _, t := range names {
		switch t.kind {
		case tkWord:
			parts = append(parts, t.upper())
		case tkQuoted:
			parts = append(parts, t.val)
		}
	}
	db, sc := s.db, ""
	switch {
	case kind == "DATABASE" && len(parts) == 1:
		db, sc = parts[0], "PUBLIC"
	case len(parts) == 2:
		db, sc = parts[0], parts[1]
	case len(parts) == 1:
		sc = parts[0]
	default:
		return nil, newSFError(CodeCompilation, "42000", "SQL compilation error: syntax error in USE")
	}
	if err := s.setContext(ctx, db, sc); err != nil {
		return nil, err
	}
	return statusResult(stmtUse, "Statement executed successfully."), nil
}

func (s *session) createDatabase(ctx context.Context, st *stmt) (*result, error) {
	name := st.toks[len(st.toks)-1]
	db := name.upper()
	if name.kind == tkQuoted {
		db = name.val
	}
	if err := attach(ctx, s.conn, db); err != nil {
		return nil, err
	}
	return statusResult(stmtDDL, fmt.Sprintf("Database %s successfully created.", db)), nil
}

// setContext makes db.sc the session's current schema, creating both on
// first use: every Snowflake database is an attached in-memory DuckDB
// database, shared by all sessions.
func (s *session) setContext(ctx context.Context, db, sc string) error {
	if db == "" {
		return nil
	}
	if sc == "" {
		sc = "PUBLIC"
	}
	if err := attach(ctx, s.conn, db); err != nil {
		return err
	}
	q := quoteIdent(db) + "." + quoteIdent(sc)
	if err := s.rawExec(ctx, "CREATE SCHEMA IF NOT EXISTS "+q); err != nil {
		return err
	}
	if err := s.rawExec(ctx, "USE "+q); err != nil {
		return err
	}
	s.db, s.sc = db, sc
	return nil
}

func attach(ctx context.Context, c *sql.Conn, db string) error {
	if _, err := c.ExecContext(ctx, "ATTACH IF NOT EXISTS ':memory:' AS "+quoteIdent(db)); err != nil {
		return fmt.Errorf("attach database %s: %w", db, err)
	}
	return nil
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

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
	kind := stmtKind(typ, st)
	if arrayLen >= 0 {
		return runArray(ctx, c, p, kind, args, inTx)
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
	return readRows(rows, st)
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

// readRows encodes a query result. Column names are upper-cased unless the
// statement wrote them as "quoted identifiers", mirroring how Snowflake
// resolves unquoted names.
func readRows(rows driver.Rows, st *stmt) (*result, error) {
	cols := rows.Columns()
	typed, _ := rows.(driver.RowsColumnTypeDatabaseTypeName)
	res := &result{stmtType: stmtSelect}
	for i, name := range cols {
		dbType := "VARCHAR"
		if typed != nil {
			dbType = typed.ColumnTypeDatabaseTypeName(i)
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
