package sftest

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"
)

// TestIdleTransactionAborted follows Snowflake's Transactions page,
// "Aborting transactions": "If a transaction is running in a session and
// the session disconnects abruptly … the transaction is left in a detached
// state, including any locks that the transaction is holding on
// resources. … If it blocks another transaction from acquiring a lock on
// the same table and is idle for 5 minutes, it is automatically aborted and
// rolled back." The test server does so after Options.IdleTxAbort.
func TestIdleTransactionAborted(t *testing.T) {
	const idle = 200 * time.Millisecond
	cases := []struct {
		name      string
		idleAbort time.Duration
		timeout   string // the waiter's LOCK_TIMEOUT
		busy      bool   // the holder runs a statement meanwhile
		waiter    bool   // another transaction waits for the holder's lock
		wantAbort bool   // the holder's transaction is aborted
		wantValue string // t.a at the end; "" when the outcome is DuckDB's (a canceled statement in a transaction)
	}{
		{name: "idle and blocking: aborted", idleAbort: idle, timeout: "3", waiter: true, wantAbort: true, wantValue: "3"},
		{name: "busy and blocking: kept", idleAbort: idle, timeout: "3", busy: true, waiter: true},
		{name: "idle, blocking nobody: kept", idleAbort: idle, wantValue: "2"},
		{name: "blocking, idle for less than IdleTxAbort: kept", idleAbort: time.Minute, timeout: "1", waiter: true, wantValue: "2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := StartWith(t, Options{IdleTxAbort: c.idleAbort})
			ctx := ctxT(t)
			db := srv.OpenDB(t, "DVT", "PUBLIC")
			mustExec(t, db, "CREATE TABLE t (a INT)")
			mustExec(t, db, "INSERT INTO t VALUES (1)")
			holder, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close()
			mustExec(t, holder, "BEGIN")
			mustExec(t, holder, "UPDATE t SET a = 2")
			busyDone := make(chan error, 1)
			stopBusy := func() {}
			if c.busy {
				bctx, cancel := context.WithCancel(ctx)
				stopBusy = func() { cancel(); <-busyDone }
				go func() {
					_, err := holder.ExecContext(bctx, slowSQL)
					busyDone <- err
				}()
				waitBusy(t, srv)
			}
			if c.waiter {
				other := srv.OpenDB(t, "DVT", "PUBLIC")
				waiter, err := other.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer waiter.Close()
				mustExec(t, waiter, "ALTER SESSION SET LOCK_TIMEOUT = "+c.timeout)
				_, err = waiter.ExecContext(ctx, "UPDATE t SET a = 3")
				switch {
				case c.wantAbort && err != nil:
					t.Fatalf("the waiter's UPDATE: %v, want it to run once the idle holder is aborted", err)
				case !c.wantAbort && (err == nil || !strings.Contains(err.Error(), CodeLockConflict)):
					t.Fatalf("the waiter's UPDATE: %v, want a lock timeout (%s): the holder is kept", err, CodeLockConflict)
				}
			} else {
				time.Sleep(3 * idle) // idle, long past IdleTxAbort, with nobody waiting
			}
			stopBusy()
			err = commit(ctx, holder)
			switch {
			case c.wantAbort && (err == nil || !strings.Contains(err.Error(), CodeTxAborted)):
				t.Errorf("COMMIT of the aborted transaction: %v, want %s", err, CodeTxAborted)
			case !c.wantAbort && !c.busy && err != nil:
				t.Errorf("COMMIT: %v", err)
			}
			mustExec(t, holder, "ROLLBACK") // ends a doomed transaction; a no-op otherwise
			if c.wantValue == "" {
				return
			}
			var got string
			if err := db.QueryRowContext(ctx, "SELECT CAST(a AS VARCHAR) FROM t").Scan(&got); err != nil {
				t.Fatal(err)
			}
			want := c.wantValue
			if got != want {
				t.Errorf("t.a = %s, want %s", got, want)
			}
		})
	}
}

func commit(ctx context.Context, c *sql.Conn) error {
	_, err := c.ExecContext(ctx, "COMMIT")
	return err
}

// waitBusy waits until the server runs a request.
func waitBusy(t *testing.T, srv *Server) {
	t.Helper()
	deadline := time.Now().Add(holdWait)
	for time.Now().Before(deadline) {
		srv.mu.Lock()
		n := len(srv.running)
		srv.mu.Unlock()
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the holder's statement did not start")
}
