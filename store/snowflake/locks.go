package snowflake

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/snowflakedb/gosnowflake"

	"github.com/dvtrun/dvtrun/engine"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
)

// Lock waits. Every store transaction takes a Snowflake table lock (the
// UPDATE of a lock row or a sequence row, held until COMMIT), and a client
// that dies inside a multi-request transaction (pinnedTx) leaves it held:
// Snowflake aborts such a detached transaction only once it has blocked
// another for 5 idle minutes. So the store's sessions wait for a lock at
// most Options.LockTimeout per attempt (LOCK_TIMEOUT, never the 12-hour
// default); when an attempt times out, SHOW LOCKS names the holder, and a
// holder that has kept a store table's lock for longer than any live store
// transaction can (Options.StaleLockAge) is a dead client's: it is ended
// with SYSTEM$ABORT_TRANSACTION and the attempt runs again at once. Any
// other holder is waited for, with a progress line (Options.OnWait), up to
// Options.LockWait, then the operation fails with STORE_UNAVAILABLE.

// lockTimedOut reports a statement that gave up waiting for a table lock:
// 000625 after LOCK_TIMEOUT, or as the 21st waiter. Either may be a dead
// client's lock, so both are looked into. The code's other uses, write
// conflicts and deadlocks (no holder to wait for), are retried as before.
// Snowflake's wording is matched loosely: only those two are excluded.
func lockTimedOut(err error) bool {
	var se *gosnowflake.SnowflakeError
	if !errors.As(err, &se) || se.Number != errLockWaiters {
		return false
	}
	msg := strings.ToLower(se.Message)
	return !strings.Contains(msg, "conflict") && !strings.Contains(msg, "deadlock")
}

// lockedTable is the table a lock-timeout message names (last part of a
// qualified name, upper case), or "" when it names none.
var lockedTableRE = regexp.MustCompile(`(?i)table\s+['"]?([A-Za-z0-9_$."]+)`)

func lockedTable(err error) string {
	var se *gosnowflake.SnowflakeError
	if !errors.As(err, &se) {
		return ""
	}
	m := lockedTableRE.FindStringSubmatch(se.Message)
	if m == nil {
		return ""
	}
	name := strings.Trim(m[1], `."'`)
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	return strings.ToUpper(strings.Trim(name, `"`))
}

// storeTables are the tables the store's migrations create (upper case):
// the only locks this store may break. A warehouse's ledger tables in the
// same schema hold step transactions, which legitimately run long.
func storeTables(q map[string]string) (map[string]bool, error) {
	migs, err := sqlfiles.Migrations(sqlfiles.Snowflake)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	texts := []string{q["create_locks"], q["create_schema_version"]}
	for _, m := range migs {
		texts = append(texts, m.SQL)
	}
	for _, t := range texts {
		for _, m := range createTableRE.FindAllStringSubmatch(t, -1) {
			out[strings.ToUpper(m[1])] = true
		}
	}
	return out, nil
}

var createTableRE = regexp.MustCompile(`(?i)CREATE\s+(?:OR\s+REPLACE\s+)?(?:TRANSIENT\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?([A-Za-z_][A-Za-z0-9_$]*)`)

// lockQueries is sql/snowflake/locks.sql, shared with the warehouse.
var lockQueries = sync.OnceValues(func() (map[string]string, error) {
	return sqlfiles.Queries(sqlfiles.Snowflake, "locks.sql")
})

// tableLock is a row of SHOW LOCKS.
type tableLock struct {
	resource    string // DB.SCHEMA.TABLE, upper case
	transaction string
	session     string
	status      string    // HOLDING or WAITING
	acquiredOn  time.Time // zero while WAITING
}

func (l tableLock) holding() bool { return strings.EqualFold(l.status, "HOLDING") }

// holder names the transaction for a progress line.
func (l tableLock) holder() string {
	if l.session != "" {
		return fmt.Sprintf("transaction %s (session %s)", l.transaction, l.session)
	}
	return "transaction " + l.transaction
}

// showLocks lists the locks of this user's transactions. Columns are read
// by name: SHOW output columns are documented, their order is not a
// contract.
func showLocks(ctx context.Context, db *sql.DB) ([]tableLock, error) {
	q, err := lockQueries()
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, q["show_locks"])
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	strs := make([]sql.NullString, len(cols))
	var acquired sql.NullTime
	dest := make([]any, len(cols))
	idx := map[string]int{}
	for i, c := range cols {
		idx[strings.ToLower(c)] = i
		dest[i] = &strs[i]
		if strings.EqualFold(c, "acquired_on") {
			dest[i] = &acquired
		}
	}
	for _, need := range []string{"resource", "transaction", "status", "acquired_on"} {
		if _, ok := idx[need]; !ok {
			return nil, fmt.Errorf("SHOW LOCKS has no %s column", need)
		}
	}
	var out []tableLock
	for rows.Next() {
		acquired = sql.NullTime{}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		l := tableLock{
			resource:    strings.ToUpper(strs[idx["resource"]].String),
			transaction: strs[idx["transaction"]].String,
			status:      strs[idx["status"]].String,
		}
		if i, ok := idx["session"]; ok {
			l.session = strs[i].String
		}
		if acquired.Valid {
			l.acquiredOn = acquired.Time
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// abortTransaction ends transaction tx of this user (SYSTEM$ABORT_TRANSACTION)
// and so frees its locks. It fails harmlessly when tx ended meanwhile. The
// id is bound as a number, the function's argument type.
func abortTransaction(ctx context.Context, db *sql.DB, tx string) error {
	q, err := lockQueries()
	if err != nil {
		return err
	}
	id, err := strconv.ParseInt(tx, 10, 64)
	if err != nil {
		return fmt.Errorf("SHOW LOCKS gave transaction id %q: %w", tx, err)
	}
	_, err = db.ExecContext(ctx, q["abort_transaction"], id)
	return err
}

// lockWaitState is one operation's wait for locks, across its attempts.
type lockWaitState struct {
	start time.Time
	last  engine.LockWait
}

// waitForLock handles an attempt that timed out waiting for a lock: it
// ends stale holders, or reports the wait and lets the caller try again;
// it fails once the wait has used Options.LockWait.
func (s *Store) waitForLock(ctx context.Context, w *lockWaitState, cause error) error {
	table := lockedTable(cause)
	w.last = engine.LockWait{Resource: "a Snowflake state store table", Budget: s.opts.LockWait}
	if table != "" {
		w.last.Resource = "table " + table
	}
	holders, dbNow, err := s.lockHolders(ctx, table)
	if err != nil && ctx.Err() != nil {
		return err
	}
	// err otherwise: SHOW LOCKS failed (an old role?); wait without it.
	broke := false
	for _, h := range holders {
		w.last.Resource = "table " + h.resource
		w.last.Holder, w.last.Since = h.holder(), h.acquiredOn
		if dbNow.Sub(h.acquiredOn) <= s.opts.StaleLockAge {
			continue
		}
		if err := abortTransaction(ctx, s.db, h.transaction); err != nil {
			// Another user's (the role may end only its own user's), or it
			// ended meanwhile: say so while waiting.
			w.last.Holder += ", stale but not ended: " + scrubText(err.Error(), s.secrets)
			continue
		}
		broke = true
	}
	if broke {
		return nil // the lock is free: try again at once
	}
	w.last.Waited = time.Since(w.start)
	if w.last.Waited >= s.opts.LockWait {
		return w.last.Exceeded()
	}
	s.opts.OnWait.Report(w.last)
	return nil
}

// lockHolders reads the holders of the store's table locks (of table, when
// known) and the database's time, by which their age is measured.
func (s *Store) lockHolders(ctx context.Context, table string) ([]tableLock, time.Time, error) {
	locks, err := showLocks(ctx, s.db)
	if err != nil {
		return nil, time.Time{}, err
	}
	var out []tableLock
	for _, l := range locks {
		parts := strings.Split(l.resource, ".")
		if !l.holding() || l.acquiredOn.IsZero() || !s.ownTable(parts) || table != "" && parts[len(parts)-1] != table {
			continue
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		return nil, time.Time{}, nil
	}
	var now time.Time
	if err := s.db.QueryRowContext(ctx, s.q["database_time"]).Scan(&now); err != nil {
		return nil, time.Time{}, err
	}
	return out, now, nil
}

// ownTable reports whether DB.SCHEMA.TABLE is one of this store's tables.
func (s *Store) ownTable(parts []string) bool {
	if len(parts) != 3 || !s.tables[parts[2]] {
		return false
	}
	return (s.database == "" || parts[0] == s.database) && (s.schema == "" || parts[1] == s.schema)
}

// setSessionParams sets the store sessions' lock and timeout parameters in
// the login request (no round trip of its own), unless the DSN sets them:
// LOCK_TIMEOUT (Snowflake's default would wait 12 hours, silently),
// STATEMENT_TIMEOUT_IN_SECONDS, and ABORT_DETACHED_QUERY, so that a
// statement of a client that died does not run on (and keep its locks).
// It returns the statement timeout in force: a DSN's positive
// STATEMENT_TIMEOUT_IN_SECONDS (for stores whose reads are long); its 0
// (no timeout) leaves the default.
func setSessionParams(cfg *gosnowflake.Config, opts Options) time.Duration {
	if cfg.Params == nil {
		cfg.Params = map[string]*string{}
	}
	set := func(k, v string) *string {
		for have, val := range cfg.Params {
			if strings.EqualFold(have, k) {
				return val
			}
		}
		cfg.Params[k] = &v
		return nil
	}
	set("LOCK_TIMEOUT", fmt.Sprint(seconds(opts.LockTimeout)))
	set("ABORT_DETACHED_QUERY", "TRUE")
	if v := set("STATEMENT_TIMEOUT_IN_SECONDS", fmt.Sprint(seconds(opts.StatementTimeout))); v != nil {
		if n, err := strconv.Atoi(*v); err == nil && n > 0 {
			return time.Duration(n) * time.Second
		}
	}
	return opts.StatementTimeout
}

// seconds rounds d up to whole seconds, at least 1.
func seconds(d time.Duration) int64 {
	return max(1, int64((d+time.Second-1)/time.Second))
}
