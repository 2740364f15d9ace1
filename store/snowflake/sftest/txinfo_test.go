package sftest

import (
	"context"
	"database/sql"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snowflakedb/gosnowflake"
)

type queryer interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}

// queryAll returns the column names and rows (by column name) of q.
func queryAll(t *testing.T, db queryer, q string, args ...any) ([]string, []map[string]sql.NullString) {
	t.Helper()
	rows, err := db.QueryContext(ctxT(t), q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]sql.NullString
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		m := map[string]sql.NullString{}
		for i, c := range cols {
			m[c] = vals[i]
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return cols, out
}

func queryString(t *testing.T, db queryer, q string) sql.NullString {
	t.Helper()
	_, rows := queryAll(t, db, q)
	if len(rows) != 1 || len(rows[0]) != 1 {
		t.Fatalf("%s: %v, want one value", q, rows)
	}
	for _, v := range rows[0] {
		return v
	}
	return sql.NullString{}
}

func conn(t *testing.T, db *sql.DB) *sql.Conn {
	t.Helper()
	c, err := db.Conn(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestContextFunctions follows CURRENT_SESSION ("Returns a unique system
// identifier for the Snowflake session corresponding to the present
// connection … The data type of the returned value is VARCHAR", example
// 34359980038) and CURRENT_TRANSACTION ("Returns the transaction id of an
// open transaction in the current session", example 1661899308790000000).
// NULL outside a transaction is what Snowpark's test of the function allows
// ("result … is None or isinstance(…, str)"); ids increasing from one
// transaction to the next is the server's promise, which Snowflake's
// time-based ids keep too.
func TestContextFunctions(t *testing.T) {
	srv, db := openDB(t)
	a, b := conn(t, db), conn(t, srv.OpenDB(t, "DVT", "PUBLIC"))
	cols, rows := queryAll(t, a, "SELECT CURRENT_SESSION(), CURRENT_TRANSACTION()")
	if want := []string{"CURRENT_SESSION()", "CURRENT_TRANSACTION()"}; !reflect.DeepEqual(cols, want) {
		t.Errorf("columns %q, want %q", cols, want)
	}
	sessA := rows[0]["CURRENT_SESSION()"]
	if _, err := strconv.ParseInt(sessA.String, 10, 64); !sessA.Valid || err != nil {
		t.Fatalf("CURRENT_SESSION() = %v, want a string of digits", sessA)
	}
	if tx := rows[0]["CURRENT_TRANSACTION()"]; tx.Valid {
		t.Errorf("CURRENT_TRANSACTION() outside a transaction = %q, want NULL", tx.String)
	}
	if again := queryString(t, a, "SELECT CURRENT_SESSION() AS s"); again != sessA {
		t.Errorf("CURRENT_SESSION() changed within a session: %v then %v", sessA, again)
	}
	if other := queryString(t, b, "SELECT CURRENT_SESSION()"); other == sessA {
		t.Errorf("two sessions share the id %v", other)
	}
	var prev int64
	for i := range 2 {
		mustExec(t, a, "BEGIN")
		first := queryString(t, a, "SELECT CURRENT_TRANSACTION()")
		id, err := strconv.ParseInt(first.String, 10, 64)
		if !first.Valid || err != nil {
			t.Fatalf("CURRENT_TRANSACTION() in a transaction = %v, want a number as VARCHAR", first)
		}
		if id <= prev {
			t.Errorf("transaction %d has id %d, not above the previous %d", i, id, prev)
		}
		prev = id
		if again := queryString(t, a, "SELECT CURRENT_TRANSACTION() FROM (SELECT 1)"); again != first {
			t.Errorf("CURRENT_TRANSACTION() changed within a transaction: %v then %v", first, again)
		}
		mustExec(t, a, "COMMIT")
	}
	if tx := queryString(t, a, "SELECT CURRENT_TRANSACTION()"); tx.Valid {
		t.Errorf("CURRENT_TRANSACTION() after COMMIT = %q, want NULL", tx.String)
	}
}

// lockedTable creates DVT.PUBLIC.T and returns a session holding its lock in
// an open transaction, with that transaction's id and the session's.
func lockedTable(t *testing.T, srv *Server, db *sql.DB) (holder *sql.Conn, txID, sessID string) {
	t.Helper()
	mustExec(t, db, "CREATE TABLE t (a INT)")
	mustExec(t, db, "INSERT INTO t VALUES (1)")
	holder = conn(t, srv.OpenDB(t, "DVT", "PUBLIC"))
	mustExec(t, holder, "BEGIN")
	mustExec(t, holder, "UPDATE t SET a = 2")
	return holder, queryString(t, holder, "SELECT CURRENT_TRANSACTION()").String,
		queryString(t, holder, "SELECT CURRENT_SESSION()").String
}

// startWaiter runs UPDATE t on a new session with the given LOCK_TIMEOUT in
// the background and waits until SHOW LOCKS lists it WAITING.
func startWaiter(t *testing.T, srv *Server, observer queryer, lockTimeout string) <-chan error {
	t.Helper()
	w := conn(t, srv.OpenDB(t, "DVT", "PUBLIC"))
	mustExec(t, w, "ALTER SESSION SET LOCK_TIMEOUT = "+lockTimeout)
	done := make(chan error, 1)
	go func() {
		_, err := w.ExecContext(context.Background(), "UPDATE t SET a = 3")
		done <- err
	}()
	deadline := time.Now().Add(holdWait)
	for time.Now().Before(deadline) {
		_, rows := queryAll(t, observer, "SHOW LOCKS")
		for _, r := range rows {
			if r["status"].String == "WAITING" {
				return done
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the waiter never showed up WAITING in SHOW LOCKS")
	return nil
}

// TestShowTransactionsAndLocks follows SHOW TRANSACTIONS ("List all running
// transactions … for the current user or all users in the account"; columns
// id, user, session, name, started_on, state — "running" — and scope, "0 for
// non-scoped transactions") and SHOW LOCKS ("Lists all running transactions
// that have locks on resources"; columns resource — "A fully qualified table
// name" —, type — "PARTITIONS (for standard table locks)" —, transaction,
// transaction_started_on, status — "HOLDING or WAITING" —, acquired_on,
// query_id, session; the SYSTEM$ABORT_TRANSACTION example shows a WAITING
// row with acquired_on NULL). "The output column names for SHOW commands are
// in lowercase" (SHOW TRANSACTIONS usage notes). The server has one user, so
// IN ACCOUNT lists the same rows.
func TestShowTransactionsAndLocks(t *testing.T) {
	srv, db := openDB(t)
	holder, txID, sessID := lockedTable(t, srv, db)
	observer := conn(t, db)
	for _, q := range []string{"SHOW TRANSACTIONS", "show transactions in account"} {
		cols, rows := queryAll(t, observer, q)
		if want := []string{"id", "user", "session", "name", "started_on", "state", "scope"}; !reflect.DeepEqual(cols, want) {
			t.Errorf("%s: columns %q, want %q", q, cols, want)
		}
		if len(rows) != 1 {
			t.Fatalf("%s: %v, want the holder's transaction only", q, rows)
		}
		r := rows[0]
		if r["id"].String != txID || r["session"].String != sessID || r["user"].String != "SFTEST" ||
			r["state"].String != "running" || r["scope"].String != "0" || r["name"].String == "" || !r["started_on"].Valid {
			t.Errorf("%s: %v, want transaction %s of session %s, running", q, r, txID, sessID)
		}
	}
	done := startWaiter(t, srv, observer, "20")
	for _, q := range []string{"SHOW LOCKS", "SHOW LOCKS IN ACCOUNT"} {
		cols, rows := queryAll(t, observer, q)
		if want := []string{"resource", "type", "transaction", "transaction_started_on", "status", "acquired_on", "query_id", "session"}; !reflect.DeepEqual(cols, want) {
			t.Errorf("%s: columns %q, want %q", q, cols, want)
		}
		if len(rows) != 2 {
			t.Fatalf("%s: %v, want a HOLDING and a WAITING row", q, rows)
		}
		h, w := rows[0], rows[1]
		if h["resource"].String != "DVT.PUBLIC.T" || h["type"].String != "PARTITIONS" || h["status"].String != "HOLDING" ||
			h["transaction"].String != txID || h["session"].String != sessID || !h["acquired_on"].Valid ||
			!h["transaction_started_on"].Valid || h["query_id"].String == "" {
			t.Errorf("%s: holder row %v, want DVT.PUBLIC.T HOLDING by transaction %s of session %s", q, h, txID, sessID)
		}
		if w["resource"].String != "DVT.PUBLIC.T" || w["status"].String != "WAITING" || w["acquired_on"].Valid ||
			w["transaction"].String == "" || w["transaction"].String == txID || w["session"].String == sessID {
			t.Errorf("%s: waiter row %v, want another transaction WAITING with acquired_on NULL", q, w)
		}
	}
	mustExec(t, holder, "COMMIT")
	if err := <-done; err != nil {
		t.Fatalf("the waiter after COMMIT: %v", err)
	}
	if _, rows := queryAll(t, observer, "SHOW LOCKS"); len(rows) != 0 {
		t.Errorf("SHOW LOCKS after both ended: %v, want none", rows)
	}
	if _, rows := queryAll(t, observer, "SHOW TRANSACTIONS"); len(rows) != 0 {
		t.Errorf("SHOW TRANSACTIONS after both ended: %v, want none", rows)
	}
}

// TestAbortTransaction follows SYSTEM$ABORT_TRANSACTION ("Aborts the
// specified transaction, if it is running"; "Transactions can be aborted
// only by the user who started the transaction or an account
// administrator") and Transactions, "Aborting transactions": a client that
// died leaves its transaction "in a detached state, including any locks
// that the transaction is holding on resources. If this happens, you might
// need to abort the transaction … call the system function,
// SYSTEM$ABORT_TRANSACTION." The locks are freed at once, so a waiter
// proceeds long before its LOCK_TIMEOUT; the owner's COMMIT then fails
// (000603, the server's code for an aborted transaction, as for the idle
// abort). Guesses, not from the documentation: the function's return value
// ("Aborted transaction <id>.") and the error for an id that is not running
// (the page only says a finished transaction "is not altered").
func TestAbortTransaction(t *testing.T) {
	cases := []struct {
		name string
		busy bool // the owner runs a long statement when it is aborted
		bind bool // the id is a bind variable
	}{
		{name: "owner idle (its client died)"},
		{name: "owner busy running a statement", busy: true},
		{name: "id bound as ?", bind: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, db := openDB(t)
			holder, txID, _ := lockedTable(t, srv, db)
			aborter := conn(t, db)
			busyDone := make(chan error, 1)
			if c.busy {
				go func() {
					_, err := holder.ExecContext(context.Background(), slowSQL)
					busyDone <- err
				}()
				waitBusy(t, srv)
			}
			waiter := startWaiter(t, srv, aborter, "20")
			start := time.Now()
			q, args := "SELECT SYSTEM$ABORT_TRANSACTION("+txID+")", []any(nil)
			if c.bind {
				q, args = "SELECT SYSTEM$ABORT_TRANSACTION(?)", []any{txID}
			}
			_, rows := queryAll(t, aborter, q, args...)
			if len(rows) != 1 {
				t.Fatalf("%s: %v, want one row", q, rows)
			}
			select {
			case err := <-waiter:
				if err != nil {
					t.Fatalf("the waiter: %v, want its UPDATE to run once the holder is aborted", err)
				}
				if d := time.Since(start); d > 10*time.Second {
					t.Errorf("the waiter proceeded %v after the abort", d)
				}
			case <-time.After(holdWait):
				t.Fatal("the waiter still waits after the abort")
			}
			if c.busy {
				select {
				case err := <-busyDone:
					if err == nil || !strings.Contains(err.Error(), CodeTxAborted) {
						t.Errorf("the owner's running statement: %v, want %s", err, CodeTxAborted)
					}
				case <-time.After(holdWait):
					t.Fatal("the owner's statement still runs after the abort")
				}
			}
			if err := commit(ctxT(t), holder); err == nil || !strings.Contains(err.Error(), CodeTxAborted) {
				t.Errorf("the owner's COMMIT: %v, want %s", err, CodeTxAborted)
			}
			mustExec(t, holder, "ROLLBACK")
			if got := queryString(t, db, "SELECT CAST(a AS VARCHAR) FROM t"); got.String != "3" {
				t.Errorf("t.a = %v, want 3 (the aborted UPDATE rolled back, the waiter's committed)", got)
			}
			if _, rows := queryAll(t, aborter, "SHOW TRANSACTIONS"); len(rows) != 0 {
				t.Errorf("SHOW TRANSACTIONS after the abort: %v", rows)
			}
			// The id no longer names a running transaction.
			if _, err := aborter.ExecContext(ctxT(t), "SELECT SYSTEM$ABORT_TRANSACTION("+txID+")"); err == nil {
				t.Errorf("a second abort of %s succeeded, want an error: it is not running", txID)
			}
		})
	}
	t.Run("unknown id", func(t *testing.T) {
		_, db := openDB(t)
		_, err := db.ExecContext(ctxT(t), "SELECT SYSTEM$ABORT_TRANSACTION(42)")
		var se *gosnowflake.SnowflakeError
		if !errors.As(err, &se) || !strings.Contains(se.Message, "not running") {
			t.Errorf("abort of an unknown id: %v, want a Snowflake error saying it is not running", err)
		}
	})
}

// TestStatementTimeout follows the STATEMENT_TIMEOUT_IN_SECONDS parameter
// ("Amount of time, in seconds, after which a running SQL statement (query,
// DDL, DML, etc.) is canceled by the system"), set by ALTER SESSION or in
// the DSN (gosnowflake sends the DSN's parameters in the login request's
// SESSION_PARAMETERS). The error is Snowflake's 000630, "Statement reached
// its statement or warehouse timeout of N second(s) and was canceled."; a
// statement waiting for a lock is running too, so the timeout ends the
// wait when it comes before LOCK_TIMEOUT.
func TestStatementTimeout(t *testing.T) {
	cases := []struct {
		name     string
		dsn      bool // set in the DSN, not by ALTER SESSION
		lockWait bool // the statement waits for a lock, not DuckDB
	}{
		{name: "ALTER SESSION, long query"},
		{name: "DSN, long query", dsn: true},
		{name: "ALTER SESSION, lock wait", lockWait: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, db := openDB(t)
			cfg := srv.Config("DVT", "PUBLIC")
			if c.dsn {
				one := "1"
				cfg.Params = map[string]*string{"STATEMENT_TIMEOUT_IN_SECONDS": &one}
			}
			s := conn(t, sql.OpenDB(gosnowflake.NewConnector(gosnowflake.SnowflakeDriver{}, *cfg)))
			if !c.dsn {
				mustExec(t, s, "ALTER SESSION SET STATEMENT_TIMEOUT_IN_SECONDS = 1")
			}
			q := slowSQL
			if c.lockWait {
				lockedTable(t, srv, db)
				mustExec(t, s, "ALTER SESSION SET LOCK_TIMEOUT = 20")
				q = "UPDATE t SET a = 3"
			}
			start := time.Now()
			_, err := s.ExecContext(ctxT(t), q)
			var se *gosnowflake.SnowflakeError
			if !errors.As(err, &se) || se.Number != 630 ||
				se.Message != "Statement reached its statement or warehouse timeout of 1 second(s) and was canceled." {
				t.Fatalf("%s: %v, want 000630 after 1 second", q, err)
			}
			if d := time.Since(start); d < time.Second || d > 10*time.Second {
				t.Errorf("canceled after %v, want about 1s", d)
			}
			var one int
			if err := s.QueryRowContext(ctxT(t), "SELECT 1").Scan(&one); err != nil {
				t.Errorf("the session after the timeout: %v", err)
			}
		})
	}
}

// TestAbortDetachedQuery: ABORT_DETACHED_QUERY ("Specifies the action that
// Snowflake performs for in-progress queries if connectivity is lost due to
// abrupt termination of a session"; TRUE: "In-progress queries are aborted
// 5 minutes after connectivity is lost") is accepted by ALTER SESSION and
// from the DSN. The server aborts a query as soon as its client goes away
// (its HTTP request closes), whatever the parameter says: it has no
// 5-minute grace, and FALSE (Snowflake's default: the query completes) is
// not emulated.
func TestAbortDetachedQuery(t *testing.T) {
	srv := Start(t)
	cfg := srv.Config("DVT", "PUBLIC")
	yes := "TRUE"
	cfg.Params = map[string]*string{"ABORT_DETACHED_QUERY": &yes}
	s := conn(t, sql.OpenDB(gosnowflake.NewConnector(gosnowflake.SnowflakeDriver{}, *cfg)))
	if v := queryString(t, s, "SELECT CURRENT_SESSION()"); v.String == "" {
		t.Fatal("no session")
	}
	srv.mu.Lock()
	var params []string
	for _, sess := range srv.byID {
		params = append(params, sess.params["ABORT_DETACHED_QUERY"])
	}
	srv.mu.Unlock()
	if !reflect.DeepEqual(params, []string{"TRUE"}) {
		t.Errorf("ABORT_DETACHED_QUERY from the DSN reached the session as %q", params)
	}
	mustExec(t, s, "ALTER SESSION SET ABORT_DETACHED_QUERY = TRUE")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.ExecContext(ctx, slowSQL)
		done <- err
	}()
	waitBusy(t, srv)
	cancel() // the client goes away
	<-done
	deadline := time.Now().Add(holdWait)
	for {
		srv.mu.Lock()
		n := len(srv.running)
		srv.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the detached query still runs")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
