package snowflake

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/snowflakedb/gosnowflake"
)

// TestWarehouseSessionParams: warehouse sessions get a LOCK_TIMEOUT that
// is a slice of the lock-wait budget and ABORT_DETACHED_QUERY, unless the
// DSN sets them (in any spelling).
func TestWarehouseSessionParams(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		budget      time.Duration
		want        map[string]string // lower-case name → value
	}{
		{"default budget", "", time.Minute, map[string]string{"lock_timeout": "5", "abort_detached_query": "TRUE"}},
		{"short budget", "", 2 * time.Second, map[string]string{"lock_timeout": "1", "abort_detached_query": "TRUE"}},
		{"mid budget", "", 12 * time.Second, map[string]string{"lock_timeout": "3", "abort_detached_query": "TRUE"}},
		{"DSN's LOCK_TIMEOUT", "&LOCK_TIMEOUT=30", time.Minute, map[string]string{"lock_timeout": "30", "abort_detached_query": "TRUE"}},
		{"DSN's abort_detached_query", "&abort_detached_query=false", time.Minute, map[string]string{"lock_timeout": "5", "abort_detached_query": "false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := warehouseConfig("u:p@acct/db/sc?warehouse=wh"+tc.query, WarehouseOptions{LockWait: tc.budget})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for k, v := range cfg.Params {
				switch low := strings.ToLower(k); low {
				case "lock_timeout", "abort_detached_query":
					if _, dup := got[low]; dup {
						t.Fatalf("%s set twice: %v", k, cfg.Params)
					}
					got[low] = *v
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("session parameters %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFenceTable: a run's fence table name is a plain upper-case
// identifier whatever the run id holds, the same for the same run, another
// for another run.
func TestFenceTable(t *testing.T) {
	name := regexp.MustCompile(`^DVT_FENCE_[0-9A-F]{16}$`)
	ids := []string{"r-1", "r-2", `x"; DROP TABLE dvt_step_ledger; --`, "ü", ""}
	seen := map[string]string{}
	for _, id := range ids {
		n := fenceTable(id)
		if !name.MatchString(n) || !simpleIdent.MatchString(n) {
			t.Fatalf("fenceTable(%q) = %q, want DVT_FENCE_ and 16 hex digits", id, n)
		}
		if n != fenceTable(id) {
			t.Fatalf("fenceTable(%q) is not stable", id)
		}
		if other, ok := seen[n]; ok {
			t.Fatalf("runs %q and %q share %s", other, id, n)
		}
		seen[n] = id
	}
}

// TestLockErrors: only a LOCK_TIMEOUT refusal is waited for again (the
// waiter limit and deadlocks are retried as transactions); the table and
// holder come from the test server's and Snowflake's texts.
func TestLockErrors(t *testing.T) {
	sfErr := func(msg string) error {
		return fmt.Errorf("wrapped: %w", &gosnowflake.SnowflakeError{Number: errLockWaiters, SQLState: "57014", Message: msg})
	}
	for _, tc := range []struct {
		name       string
		err        error
		timedOut   bool
		table, txn string
	}{
		{"test server", sfErr("Statement aborted because the lock on table ANALYTICS.PUBLIC.DVT_FENCE_0A holder by another transaction was not released within LOCK_TIMEOUT."),
			true, "ANALYTICS.PUBLIC.DVT_FENCE_0A", ""},
		{"Snowflake", sfErr("Statement '01b0' has locked table 'ORDERS' in transaction 1700000000123 and this lock has not yet been released. Your statement '01b1' was aborted because the lock timeout was exceeded."),
			true, "ORDERS", "1700000000123"},
		{"waiters", sfErr("Statement aborted because the number of waiters for the lock on table T exceeds the 20 statements limit."), false, "T", ""},
		{"deadlock", sfErr("Transaction aborted because of a deadlock on table T; the other transaction holds a lock this one waits for."), false, "T", ""},
		{"other error", errors.New("lock_timeout"), false, "", ""},
		{"nil", nil, false, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lockTimedOut(tc.err); got != tc.timedOut {
				t.Fatalf("lockTimedOut = %v, want %v", got, tc.timedOut)
			}
			if table, txn := lockFromError(tc.err); table != tc.table || txn != tc.txn {
				t.Fatalf("lockFromError = %q %q, want %q %q", table, txn, tc.table, tc.txn)
			}
		})
	}
}
