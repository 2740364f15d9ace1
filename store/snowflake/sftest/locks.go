package sftest

import (
	"context"
	"strings"
	"sync"
	"time"
)

// maxLockWaiters mirrors Snowflake: the 21st statement queued on one lock
// is aborted with 000625 instead of waiting.
const maxLockWaiters = 20

// lockManager gives UPDATE, DELETE and MERGE Snowflake's table locks: the
// statement waits until no other transaction holds the table, and the lock
// is held until COMMIT or ROLLBACK. DuckDB alone would instead fail the
// second writer with a conflict.
type lockManager struct {
	mu      sync.Mutex
	holders map[string]*lockHold   // table → its holder
	waiting map[*session]*lockWait // session → the lock it waits for
	changed chan struct{}          // closed and replaced on every release
	// idleAbort is how long a transaction that blocks a lock wait may be
	// idle before it is aborted (Options.IdleTxAbort).
	idleAbort time.Duration
}

// lockHold is a granted table lock, as SHOW LOCKS lists it (HOLDING).
type lockHold struct {
	sess     *session
	since    time.Time // acquired_on
	queryID  string    // the statement that acquired it
	tx       int64     // the holder's transaction
	txStart  time.Time
	txName   string
	sessUser string
}

// lockWait is a statement queued on a table lock (WAITING).
type lockWait struct {
	table   string
	queryID string
	tx      int64
	txStart time.Time
}

func newLockManager(idleAbort time.Duration) *lockManager {
	return &lockManager{holders: map[string]*lockHold{}, waiting: map[*session]*lockWait{}, changed: make(chan struct{}), idleAbort: idleAbort}
}

// acquire takes table's lock for sess, waiting while another session holds
// it, at most timeout (0: not at all, as Snowflake's LOCK_TIMEOUT = 0). It
// fails with 000625 when the wait times out, when too many statements wait
// or when waiting would deadlock, and with the context's error when the
// request ends.
func (m *lockManager) acquire(ctx context.Context, sess *session, table string, timeout time.Duration) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	info := sess.txInfo()
	m.mu.Lock()
	for {
		hold := m.holders[table]
		if hold == nil || hold.sess == sess {
			if hold == nil {
				m.holders[table] = &lockHold{sess: sess, since: time.Now(), queryID: info.queryID,
					tx: info.id, txStart: info.started, txName: info.name, sessUser: sess.user}
			}
			delete(m.waiting, sess)
			m.mu.Unlock()
			return nil
		}
		h := hold.sess
		if err := m.checkWait(sess, table, h); err != nil {
			delete(m.waiting, sess)
			m.mu.Unlock()
			return err
		}
		if timeout <= 0 {
			m.mu.Unlock()
			return lockTimeoutError(table)
		}
		m.waiting[sess] = &lockWait{table: table, queryID: info.queryID, tx: info.id, txStart: info.started}
		ch := m.changed
		m.mu.Unlock()
		// An aborted holder releases its locks, which closes ch.
		m.abortIdle(h, table)
		poll := time.NewTimer(min(max(m.idleAbort/10, 10*time.Millisecond), time.Second))
		select {
		case <-poll.C:
		case <-ch:
		case <-timer.C:
			m.mu.Lock()
			delete(m.waiting, sess)
			m.mu.Unlock()
			return lockTimeoutError(table)
		case <-ctx.Done():
			poll.Stop()
			m.mu.Lock()
			delete(m.waiting, sess)
			m.mu.Unlock()
			return ctx.Err()
		}
		poll.Stop()
		m.mu.Lock()
	}
}

// abortIdle aborts h's transaction if h still holds table and has run
// nothing for idleAbort, as Snowflake aborts a transaction that blocks
// another's lock and is idle for 5 minutes (typically the transaction of a
// client that died, "left in a detached state"). A busy h is left alone.
// Callers do not hold m.mu.
func (m *lockManager) abortIdle(h *session, table string) {
	if m.idleAbort <= 0 || !h.mu.TryLock() {
		return
	}
	defer h.mu.Unlock()
	m.mu.Lock()
	holds := m.holders[table] != nil && m.holders[table].sess == h
	m.mu.Unlock()
	if !holds || !h.inTx || time.Since(h.lastActive) < m.idleAbort {
		return
	}
	h.abortTx(newSFError(CodeTxAborted, "25P02",
		"Transaction aborted: it was idle for %s while it blocked another transaction's lock on %s; issue ROLLBACK", m.idleAbort, table))
}

func lockTimeoutError(table string) error {
	return newSFError(CodeLockConflict, "57014",
		"Statement aborted because the lock on table %s held by another transaction was not released within LOCK_TIMEOUT.", table)
}

// checkWait refuses a wait that would exceed the waiter limit or close a
// cycle in the waits-for graph. Callers hold m.mu.
func (m *lockManager) checkWait(sess *session, table string, holder *session) error {
	n := 0
	for s, w := range m.waiting {
		if w.table == table && s != sess {
			n++
		}
	}
	if n >= maxLockWaiters {
		return newSFError(CodeLockConflict, "57014",
			"Statement aborted because the number of waiters for the lock on table %s exceeds the %d statements limit.", table, maxLockWaiters)
	}
	for h, steps := holder, 0; h != nil && steps <= len(m.waiting); steps++ {
		w, waits := m.waiting[h]
		if !waits {
			break
		}
		h = nil
		if hold := m.holders[w.table]; hold != nil {
			h = hold.sess
		}
		if h == sess {
			return newSFError(CodeLockConflict, "57014",
				"Transaction aborted because of a deadlock on table %s; the other transaction holds a lock this one waits for.", table)
		}
	}
	return nil
}

// releaseAll frees every lock sess holds.
func (m *lockManager) releaseAll(sess *session) {
	m.mu.Lock()
	defer m.mu.Unlock()
	freed := false
	for t, h := range m.holders {
		if h.sess == sess {
			delete(m.holders, t)
			freed = true
		}
	}
	if freed {
		close(m.changed)
		m.changed = make(chan struct{})
	}
}

// lockTarget names the table an UPDATE, DELETE or MERGE writes, qualified
// with the session's database and schema when the statement does not, or
// "" for other statements.
func lockTarget(st *stmt, db, sc string) string {
	i := 0
	switch st.word(0) {
	case "UPDATE":
		i = 1
	case "DELETE", "MERGE":
		i = 2 // DELETE FROM t, MERGE INTO t
	default:
		return ""
	}
	var parts []string
	for ; i < len(st.toks); i += 2 {
		t := st.toks[i]
		switch t.kind {
		case tkWord:
			parts = append(parts, t.upper())
		case tkQuoted:
			parts = append(parts, t.val)
		default:
			return ""
		}
		if i+1 >= len(st.toks) || bare(st.toks[i+1]) != "." {
			break
		}
	}
	switch len(parts) {
	case 1:
		parts = []string{db, sc, parts[0]}
	case 2:
		parts = []string{db, parts[0], parts[1]}
	}
	return strings.Join(parts, ".")
}
