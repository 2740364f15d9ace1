package snowflake

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/snowflakedb/gosnowflake"
)

// TestRetryable: lock contention, expired sessions and network failures
// retry the transaction; statement errors and cancellation do not.
func TestRetryable(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"too many lock waiters (000625)", &gosnowflake.SnowflakeError{Number: 625, SQLState: "57014"}, true},
		{"wrapped 000625", fmt.Errorf("write: %w", &gosnowflake.SnowflakeError{Number: 625}), true},
		{"session expired", &gosnowflake.SnowflakeError{Number: 390112}, true},
		{"serialization failure", &gosnowflake.SnowflakeError{Number: 1, SQLState: "40001"}, true},
		{"network", &net.OpError{Op: "dial", Err: io.ErrUnexpectedEOF}, true},
		{"compilation error", &gosnowflake.SnowflakeError{Number: 1003, SQLState: "42000", Message: "syntax error"}, false},
		{"object does not exist", &gosnowflake.SnowflakeError{Number: 2003, SQLState: "42S02"}, false},
		{"cancelled", context.Canceled, false},
		{"nil", nil, false},
		{"transaction aborted from outside", &gosnowflake.SnowflakeError{Number: 603, SQLState: "25P02", Message: "Transaction 17 was aborted by SYSTEM$ABORT_TRANSACTION from session 3; issue ROLLBACK"}, true},
		{"an earlier statement aborted the transaction", &gosnowflake.SnowflakeError{Number: 603, SQLState: "25P02", Message: "sftest: an earlier statement's error aborted the transaction"}, false},
	}
	for _, c := range cases {
		if got := retryable(c.err); got != c.want {
			t.Errorf("%s: retryable = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestLockTimedOut: a statement that gave up on a lock (LOCK_TIMEOUT, or the
// 21st waiter) is looked into (waitForLock), under whichever wording;
// conflicts and deadlocks, which have no holder to wait for, are not. The
// table the message names is the one whose holders are looked at.
func TestLockTimedOut(t *testing.T) {
	cases := []struct {
		name  string
		err   error
		want  bool
		table string
	}{
		{"test server's lock timeout", &gosnowflake.SnowflakeError{Number: 625, Message: "Statement aborted because the lock on table DVT.PUBLIC.DVT_LOCKS held by another transaction was not released within LOCK_TIMEOUT."}, true, "DVT_LOCKS"},
		{"Snowflake-style wording, quoted table", fmt.Errorf("lock: %w", &gosnowflake.SnowflakeError{Number: 625, Message: "Statement '01b2' has locked table 'DVT_RUN_SEQ' in transaction 1700000000 and this lock has not yet been released."}), true, "DVT_RUN_SEQ"},
		{"21st waiter", &gosnowflake.SnowflakeError{Number: 625, Message: "Statement aborted because the number of waiters for the lock on table DVT.S.DVT_LOCKS exceeds the 20 statements limit."}, true, "DVT_LOCKS"},
		{"no table named", &gosnowflake.SnowflakeError{Number: 625, Message: "lock wait timed out"}, true, ""},
		{"write conflict", &gosnowflake.SnowflakeError{Number: 625, Message: "Statement aborted by a conflicting transaction; the transaction was rolled back"}, false, ""},
		{"deadlock", &gosnowflake.SnowflakeError{Number: 625, Message: "Transaction aborted because of a deadlock on table DVT.S.T"}, false, ""},
		{"other code", &gosnowflake.SnowflakeError{Number: 630, Message: "Statement reached its statement or warehouse timeout of 20 second(s) and was canceled."}, false, ""},
		{"not Snowflake's", context.DeadlineExceeded, false, ""},
	}
	for _, c := range cases {
		if got := lockTimedOut(c.err); got != c.want {
			t.Errorf("%s: lockTimedOut = %v, want %v", c.name, got, c.want)
		}
		if c.want {
			if got := lockedTable(c.err); got != c.table {
				t.Errorf("%s: lockedTable = %q, want %q", c.name, got, c.table)
			}
		}
	}
}
