package sftest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// txInfo is what other sessions see of a session's running transaction and
// statement.
type txInfo struct {
	id      int64 // 0 outside a transaction
	name    string
	started time.Time
	auto    bool   // an autocommit statement's own transaction
	queryID string // the statement the session runs (or ran last)
}

// abortRequest is a SYSTEM$ABORT_TRANSACTION the owning session has not
// applied yet (it was busy).
type abortRequest struct {
	tx  int64
	why *sfError
}

func (s *session) txInfo() txInfo {
	s.infoMu.Lock()
	defer s.infoMu.Unlock()
	return s.tx
}

// startTxInfo gives the session a new transaction id: ids are unique on
// the server and increase, as Snowflake's do.
func (s *session) startTxInfo(auto bool) {
	id := s.srv.txSeq.Add(1)
	s.infoMu.Lock()
	defer s.infoMu.Unlock()
	s.tx = txInfo{id: id, name: uuid.NewString(), started: time.Now(), auto: auto, queryID: s.tx.queryID}
}

func (s *session) endTxInfo() {
	s.infoMu.Lock()
	defer s.infoMu.Unlock()
	s.tx = txInfo{queryID: s.tx.queryID}
}

// setRunning records the request the session runs (cancel ends it) or,
// with nil, that it is idle.
func (s *session) setRunning(cancel context.CancelCauseFunc) {
	s.infoMu.Lock()
	defer s.infoMu.Unlock()
	s.cancelRun = cancel
}

// setQueryID records the statement the session runs, for SHOW LOCKS.
func (s *session) setQueryID(queryID string) {
	s.infoMu.Lock()
	defer s.infoMu.Unlock()
	s.tx.queryID = queryID
}

// applyAbort carries out a SYSTEM$ABORT_TRANSACTION that arrived while the
// session was busy, if it names the transaction still open. The caller
// holds s.mu.
func (s *session) applyAbort() {
	s.infoMu.Lock()
	r, current := s.abortReq, s.tx.id
	s.abortReq = nil
	s.infoMu.Unlock()
	if r != nil && r.tx == current && s.inTx {
		s.abortTx(r.why)
	}
}

// statementTimeout is STATEMENT_TIMEOUT_IN_SECONDS; 0 means none (Snowflake's
// default is 172800 seconds, two days, which no test reaches).
func (s *session) statementTimeout() int {
	n, err := strconv.Atoi(s.params["STATEMENT_TIMEOUT_IN_SECONDS"])
	if err != nil || n < 0 {
		return 0
	}
	return n
}

func statementTimeoutError(n int) *sfError {
	return newSFError(CodeStatementTimeout, "57014",
		"Statement reached its statement or warehouse timeout of %d second(s) and was canceled.", n)
}

// mapErrorCtx is mapError, except that a request ended by the server itself
// (statement timeout, SYSTEM$ABORT_TRANSACTION) reports why.
func mapErrorCtx(ctx context.Context, err error) *sfError {
	var se *sfError
	if ctx.Err() != nil && errors.As(context.Cause(ctx), &se) {
		return se
	}
	return mapError(err)
}

// execIntrospection handles the statements that read or end other sessions'
// transactions; ok is false for any other statement.
func (s *session) execIntrospection(ctx context.Context, st *stmt, binds map[string]bindParam) (res *result, ok bool, err error) {
	w0, w1 := st.word(0), st.word(1)
	switch {
	case w0 == "SHOW" && (w1 == "TRANSACTIONS" || w1 == "LOCKS"):
		all := false
		switch {
		case len(st.toks) == 2:
		case len(st.toks) == 4 && st.word(2) == "IN" && st.word(3) == "ACCOUNT":
			all = true
		default:
			return nil, true, newSFError(CodeCompilation, "42000", "SQL compilation error: syntax error in SHOW %s", w1)
		}
		if w1 == "LOCKS" {
			return s.showLocks(all), true, nil
		}
		return s.showTransactions(all), true, nil
	case w0 == "SELECT" && w1 == "SYSTEM$ABORT_TRANSACTION":
		id, label, err := abortArgument(st, binds)
		if err != nil {
			return nil, true, err
		}
		res, err := s.srv.abortTransaction(ctx, s, id)
		if err != nil {
			return nil, true, err
		}
		res.rowType[0].Name = label
		return res, true, nil
	}
	return nil, false, nil
}

// abortArgument reads SYSTEM$ABORT_TRANSACTION's one argument, a number
// literal or a bind, and the result column's name.
func abortArgument(st *stmt, binds map[string]bindParam) (int64, string, error) {
	t := st.toks
	bad := newSFError(CodeCompilation, "42000", "SQL compilation error: SYSTEM$ABORT_TRANSACTION takes one transaction id")
	if len(t) < 5 || bare(t[2]) != "(" || bare(t[4]) != ")" || len(t) != 5 && !(len(t) == 7 && st.word(5) == "AS") {
		return 0, "", bad
	}
	var raw string
	switch t[3].kind {
	case tkNumber:
		raw = bare(t[3])
	case tkString:
		raw = t[3].val
	case tkParam:
		b, ok := binds["1"]
		if !ok || len(binds) != 1 {
			return 0, "", bad
		}
		raw = fmt.Sprint(b.Value)
	default:
		return 0, "", bad
	}
	id, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
	if err != nil {
		return 0, "", newSFError(CodeConversion, "22018", "Numeric value '%s' is not recognized", raw)
	}
	label := "SYSTEM$ABORT_TRANSACTION(" + bare(t[3]) + ")"
	if len(t) == 7 {
		label = t[6].upper()
		if t[6].kind == tkQuoted {
			label = t[6].val
		}
	}
	return id, label, nil
}

// abortWait bounds how long SYSTEM$ABORT_TRANSACTION waits for the owning
// session's canceled statement to stop.
const abortWait = 10 * time.Second

// abortTransaction ends transaction id of a session of caller's user: a
// busy owner's statement is canceled, the transaction rolled back and its
// locks freed before the call returns; the owner's later statements and
// COMMIT fail with 000603 until it issues ROLLBACK (the idle abort's path).
func (srv *Server) abortTransaction(ctx context.Context, caller *session, id int64) (*result, error) {
	notRunning := newSFError(CodeExecution, "25000",
		"Transaction %d is not running: it does not exist, or it has already been committed or rolled back.", id)
	var owner *session
	var info txInfo
	srv.mu.Lock()
	for _, sess := range srv.byID {
		if i := sess.txInfo(); i.id == id {
			owner, info = sess, i
			break
		}
	}
	srv.mu.Unlock()
	switch {
	case owner == nil:
		return nil, notRunning
	case owner.user != caller.user:
		return nil, newSFError("003001", "42501",
			"SQL access control error: Insufficient privileges to abort transaction %d of another user.", id)
	case info.auto:
		return nil, newSFError(CodeExecution, "0A000",
			"SYSTEM$ABORT_TRANSACTION is supported for explicit transactions only; transaction %d is an autocommit statement.", id)
	}
	why := newSFError(CodeTxAborted, "25P02",
		"Transaction %d was aborted by SYSTEM$ABORT_TRANSACTION from session %d; issue ROLLBACK", id, caller.id)
	done := statusResult(stmtSelect, fmt.Sprintf("Aborted transaction %d.", id))
	if owner == caller { // the caller holds its own mu
		caller.abortTx(why)
		return done, nil
	}
	owner.infoMu.Lock()
	owner.abortReq = &abortRequest{tx: id, why: why}
	cancel := owner.cancelRun
	owner.infoMu.Unlock()
	if cancel != nil {
		cancel(why)
	}
	// The owner's canceled statement ends quickly (DuckDB is interrupted, a
	// lock wait ends); then its transaction is rolled back here, or by the
	// owner's own next statement if that comes first (applyAbort).
	timer := time.NewTimer(abortWait)
	defer timer.Stop()
	for !owner.mu.TryLock() {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
			return nil, newSFError(CodeExecution, "57014",
				"Transaction %d: its session's running statement did not stop within %s; it is aborted when that statement ends.", id, abortWait)
		case <-time.After(5 * time.Millisecond):
		}
	}
	owner.applyAbort()
	owner.mu.Unlock()
	return done, nil
}

// showTransactions lists the running transactions of the caller's user (all
// users with IN ACCOUNT; the server knows one), with SHOW TRANSACTIONS'
// columns.
func (s *session) showTransactions(all bool) *result {
	type row struct {
		info txInfo
		sess *session
	}
	var rows []row
	s.srv.mu.Lock()
	for _, sess := range s.srv.byID {
		if i := sess.txInfo(); i.id != 0 && (all || sess.user == s.user) {
			rows = append(rows, row{i, sess})
		}
	}
	s.srv.mu.Unlock()
	sort.Slice(rows, func(a, b int) bool { return rows[a].info.id < rows[b].info.id })
	res := &result{stmtType: stmtSelect, rowType: []rowType{
		columnType("id", "BIGINT"), textCol("user"), columnType("session", "BIGINT"), textCol("name"),
		columnType("started_on", "TIMESTAMPTZ"), textCol("state"), columnType("scope", "BIGINT"),
	}}
	for _, r := range rows {
		res.rowSet = append(res.rowSet, []*string{
			num(r.info.id), strp(r.sess.user), num(r.sess.id), strp(r.info.name),
			timestampLTZ(r.info.started), strp("running"), strp("0"),
		})
	}
	return res
}

// showLocks lists the table locks held and waited for by transactions of
// the caller's user, with SHOW LOCKS' columns: a HOLDING row per lock held,
// a WAITING row per statement queued on one.
func (s *session) showLocks(all bool) *result {
	res := &result{stmtType: stmtSelect, rowType: []rowType{
		textCol("resource"), textCol("type"), columnType("transaction", "BIGINT"),
		columnType("transaction_started_on", "TIMESTAMPTZ"), textCol("status"),
		columnType("acquired_on", "TIMESTAMPTZ"), textCol("query_id"), columnType("session", "BIGINT"),
	}}
	type row struct {
		table   string
		holding bool
		cells   []*string
	}
	var rows []row
	m := s.locks
	m.mu.Lock()
	for table, h := range m.holders {
		if all || h.sessUser == s.user {
			rows = append(rows, row{table, true, []*string{strp(table), strp("PARTITIONS"), num(h.tx),
				timestampLTZ(h.txStart), strp("HOLDING"), timestampLTZ(h.since), strp(h.queryID), num(h.sess.id)}})
		}
	}
	for sess, w := range m.waiting {
		if all || sess.user == s.user {
			rows = append(rows, row{w.table, false, []*string{strp(w.table), strp("PARTITIONS"), num(w.tx),
				timestampLTZ(w.txStart), strp("WAITING"), nil, strp(w.queryID), num(sess.id)}})
		}
	}
	m.mu.Unlock()
	sort.SliceStable(rows, func(a, b int) bool {
		if rows[a].table != rows[b].table {
			return rows[a].table < rows[b].table
		}
		if rows[a].holding != rows[b].holding {
			return rows[a].holding
		}
		return *rows[a].cells[2] < *rows[b].cells[2]
	})
	for _, r := range rows {
		res.rowSet = append(res.rowSet, r.cells)
	}
	return res
}

func num(n int64) *string { return strp(strconv.FormatInt(n, 10)) }

// timestampLTZ is t in the wire form of a timestamp_ltz column; nil for the
// zero time.
func timestampLTZ(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	v, err := encodeValue(columnType("", "TIMESTAMPTZ"), t)
	if err != nil {
		return nil
	}
	return v
}

// withContextFunctions replaces CURRENT_SESSION() and CURRENT_TRANSACTION()
// by the session's values, as VARCHAR like Snowflake's (NULL outside a
// transaction); a bare select-list item keeps Snowflake's column name.
func (s *session) withContextFunctions(st *stmt) *stmt {
	var out []token
	changed := false
	for i := 0; i < len(st.toks); i++ {
		t := st.toks[i]
		fn := t.upper()
		if t.kind != tkWord || fn != "CURRENT_SESSION" && fn != "CURRENT_TRANSACTION" ||
			i+2 >= len(st.toks) || bare(st.toks[i+1]) != "(" || bare(st.toks[i+2]) != ")" {
			out = append(out, t)
			continue
		}
		changed = true
		lead := strings.TrimSuffix(t.text, bare(t))
		val := token{kind: tkString, text: lead + "''", val: strconv.FormatInt(s.id, 10)}
		if fn == "CURRENT_TRANSACTION" {
			if info := s.txInfo(); s.inTx && info.id != 0 {
				val.val = strconv.FormatInt(info.id, 10)
			} else {
				val = token{kind: tkWord, text: lead + "CAST(NULL AS VARCHAR)"}
			}
		}
		out = append(out, val)
		prev := ""
		if i > 0 {
			prev = strings.ToUpper(bare(st.toks[i-1]))
		}
		next := ""
		if i+3 < len(st.toks) {
			next = strings.ToUpper(bare(st.toks[i+3]))
		}
		if (prev == "SELECT" || prev == ",") && (next == "" || next == "," || next == "FROM") {
			name := fn + "()"
			out = append(out, token{kind: tkWord, text: " AS"}, token{kind: tkQuoted, text: ` "` + name + `"`, val: name})
		}
		i += 2
	}
	if !changed {
		return st
	}
	c := *st
	c.toks = out
	c.duck = render(translate(out))
	if c.word(0) == "MERGE" {
		c.duck += " RETURNING merge_action" // as parseTokens does
	}
	return &c
}
