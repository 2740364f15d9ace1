package sftest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
	user  string // the login name, upper case
	srv   *Server
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
	lastActive         time.Time // when the session last ended a request, under mu

	// What other sessions see of this one (SHOW TRANSACTIONS, SHOW LOCKS,
	// SYSTEM$ABORT_TRANSACTION) while it may be busy: under infoMu, not mu.
	infoMu    sync.Mutex
	tx        txInfo                  // the running transaction; id 0 when none
	cancelRun context.CancelCauseFunc // ends the running request; nil when idle
	abortReq  *abortRequest           // SYSTEM$ABORT_TRANSACTION on tx, not yet applied
}

// abortTx rolls back the open transaction from outside the session (the
// caller holds s.mu) and frees its locks; the client's later statements and
// COMMIT fail with why until it issues ROLLBACK, so it never mistakes the
// lost writes for committed ones.
func (s *session) abortTx(why *sfError) {
	if s.duckTx {
		_ = s.rawExec(context.Background(), "ROLLBACK")
		s.duckTx = false
	}
	s.doomed = why
	s.endTxInfo() // no longer running: SHOW TRANSACTIONS drops it
	s.locks.releaseAll(s)
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
	s.endTxInfo()
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
	catalogMu.Lock()
	err := s.rawExec(ctx, "CREATE SCHEMA IF NOT EXISTS "+q)
	catalogMu.Unlock()
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		return err
	}
	if err := s.rawExec(ctx, "USE "+q); err != nil {
		return err
	}
	s.db, s.sc = db, sc
	return nil
}

// catalogMu serialises the creation of databases and schemas: DuckDB's IF
// NOT EXISTS is not atomic across connections, and sessions logging in
// together would otherwise fail with "already exists".
var catalogMu sync.Mutex

func attach(ctx context.Context, c *sql.Conn, db string) error {
	catalogMu.Lock()
	defer catalogMu.Unlock()
	_, err := c.ExecContext(ctx, "ATTACH IF NOT EXISTS ':memory:' AS "+quoteIdent(db))
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("attach database %s: %w", db, err)
	}
	return nil
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
