package sftest

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// queryRequest is the body of /queries/v1/query-request.
type queryRequest struct {
	SQLText    string               `json:"sqlText"`
	AsyncExec  bool                 `json:"asyncExec"`
	Parameters map[string]any       `json:"parameters"`
	Bindings   map[string]bindParam `json:"bindings"`
	BindStage  string               `json:"bindStage"`
}

// queryData is the "data" of a successful query response.
type queryData struct {
	QueryID           string      `json:"queryId"`
	RowType           []rowType   `json:"rowtype"`
	RowSet            [][]*string `json:"rowset"`
	Total             int64       `json:"total"`
	Returned          int64       `json:"returned"`
	StatementTypeID   int64       `json:"statementTypeId"`
	QueryResultFormat string      `json:"queryResultFormat"`
	ResultIDs         string      `json:"resultIds,omitempty"`
	ResultTypes       string      `json:"resultTypes,omitempty"`
	FinalDatabaseName string      `json:"finalDatabaseName,omitempty"`
	FinalSchemaName   string      `json:"finalSchemaName,omitempty"`
}

const maxResults = 10000

// execute runs the statements of one request on the session and returns
// the JSON answer.
func (s *Server) execute(ctx context.Context, sess *session, req *queryRequest, reqID, qid string) []byte {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	defer func() { sess.lastActive = time.Now() }()
	// SYSTEM$ABORT_TRANSACTION from another session and the statement
	// timeout end the request through its context, with their error as
	// the cause (mapErrorCtx).
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if n := sess.statementTimeout(); n > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, time.Duration(n)*time.Second, statementTimeoutError(n))
		defer stop()
	}
	sess.setQueryID(qid)
	sess.setRunning(cancel)
	defer sess.setRunning(nil)
	tag := sess.params["QUERY_TAG"]
	if v, ok := req.Parameters["QUERY_TAG"]; ok {
		tag = fmt.Sprint(v)
	}
	entry := LoggedQuery{SessionID: sess.id, RequestID: reqID, QueryTag: tag, SQLText: req.SQLText}
	fail := func(e *sfError, qid string) []byte {
		entry.QueryID, entry.Err = qid, e.code
		s.appendLog(entry)
		return mustJSON(errResponse(e, qid))
	}
	if req.BindStage != "" {
		return fail(newSFError(CodeCompilation, "0A000", "sftest: stage binds are not supported"), qid)
	}
	toks, err := lex(req.SQLText)
	if err != nil {
		return fail(newSFError(CodeCompilation, "42000", "SQL compilation error:\n%v", err), qid)
	}
	if body, ok := isBlockRequest(toks); ok {
		if len(req.Bindings) > 0 {
			return fail(newSFError("000002", "0A000", "sftest: bind variables are not supported with a Snowflake Scripting block"), qid)
		}
		return s.executeScript(ctx, sess, body, entry, qid)
	}
	stmts := parseTokens(toks)
	if len(stmts) == 0 {
		return fail(newSFError("000900", "42000", "Empty SQL statement."), qid)
	}
	want, err := statementCount(req.Parameters, sess.params)
	if err != nil {
		return fail(newSFError(CodeCompilation, "22023", "%v", err), qid)
	}
	if want == 1 && len(stmts) > 1 || want > 1 && want != len(stmts) {
		return fail(newSFError(CodeStatementCount, "0A000",
			"Actual statement count %d did not match the desired statement count %d.", len(stmts), want), qid)
	}
	if want == 1 {
		res, err := sess.execStmt(ctx, stmts[0], req.Bindings)
		if err != nil {
			return fail(mapErrorCtx(ctx, err), qid)
		}
		entry.QueryID = qid
		s.appendLog(entry)
		return mustJSON(okResponse(s.data(res, qid, sess)))
	}
	if len(req.Bindings) > 0 {
		return fail(newSFError("000002", "0A000", "Bind variables not supported in multiple statement queries."), qid)
	}
	return s.executeMulti(ctx, sess, stmts, entry, qid)
}

// executeScript runs a Snowflake Scripting block as one statement (see
// scripting.go); its SQL statements are logged as children of the request.
func (s *Server) executeScript(ctx context.Context, sess *session, body string, entry LoggedQuery, qid string) []byte {
	res, err := sess.runScript(ctx, body, func(text string, err error) {
		child := entry
		child.QueryID, child.ParentQueryID, child.SQLText = newQueryID(), qid, text
		if err != nil {
			child.Err = mapErrorCtx(ctx, err).code
		}
		s.appendLog(child)
	})
	entry.QueryID = qid
	if err != nil {
		e := mapErrorCtx(ctx, err)
		entry.Err = e.code
		s.appendLog(entry)
		return mustJSON(errResponse(e, qid))
	}
	s.appendLog(entry)
	return mustJSON(okResponse(s.data(res, qid, sess)))
}

// executeMulti runs a multi-statement request: each statement gets its own
// query id and stored result, the answer lists them (0xA000). The first
// failure ends the request; a transaction this request opened and left open
// is rolled back, so a failed batch never leaves locks or half a write.
func (s *Server) executeMulti(ctx context.Context, sess *session, stmts []*stmt, entry LoggedQuery, parent string) []byte {
	wasInTx := sess.inTx
	var ids, types []string
	for _, st := range stmts {
		qid := newQueryID()
		child := entry
		child.QueryID, child.ParentQueryID, child.SQLText = qid, parent, st.orig
		sess.setQueryID(qid)
		res, err := sess.execStmt(ctx, st, nil)
		if err != nil {
			e := mapErrorCtx(ctx, err)
			if sess.inTx && !wasInTx {
				_, _ = sess.endTx(ctx, false)
			}
			child.Err = e.code
			s.appendLog(child)
			entry.QueryID, entry.Err = parent, e.code
			s.appendLog(entry)
			return mustJSON(errResponse(e, qid))
		}
		s.appendLog(child)
		s.storeResult(qid, mustJSON(okResponse(s.data(res, qid, sess))))
		ids = append(ids, qid)
		types = append(types, strconv.FormatInt(res.stmtType, 10))
	}
	entry.QueryID = parent
	s.appendLog(entry)
	d := s.data(statusResult(stmtMulti, "Multiple statements executed successfully."), parent, sess)
	d.RowType[0].Name = "multiple statement execution"
	d.ResultIDs, d.ResultTypes = strings.Join(ids, ","), strings.Join(types, ",")
	return mustJSON(okResponse(d))
}

// statementCount reads MULTI_STATEMENT_COUNT from the request (a JSON
// number) or the session; 1 when unset, 0 for any number.
func statementCount(reqParams map[string]any, sessParams map[string]string) (int, error) {
	var raw string
	if v, ok := reqParams["MULTI_STATEMENT_COUNT"]; ok {
		raw = fmt.Sprint(v)
	} else if v, ok := sessParams["MULTI_STATEMENT_COUNT"]; ok {
		raw = v
	} else {
		return 1, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid MULTI_STATEMENT_COUNT %q", raw)
	}
	return n, nil
}

func (s *Server) data(res *result, qid string, sess *session) *queryData {
	rows := res.rowSet
	if rows == nil {
		rows = [][]*string{}
	}
	return &queryData{
		QueryID:           qid,
		RowType:           res.rowType,
		RowSet:            rows,
		Total:             int64(len(rows)),
		Returned:          int64(len(rows)),
		StatementTypeID:   res.stmtType,
		QueryResultFormat: "json",
		FinalDatabaseName: sess.db,
		FinalSchemaName:   sess.sc,
	}
}

// maxLogged bounds QueryLog so that benchmarks do not grow it forever.
const maxLogged = 50000

func (s *Server) appendLog(e LoggedQuery) {
	if s.opts.Logf != nil {
		text := e.SQLText
		if len(text) > 200 {
			text = text[:200] + "…"
		}
		s.logf("sftest: session %d query %s err %q: %s", e.SessionID, e.QueryID, e.Err, text)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.log) >= maxLogged {
		s.log = append(s.log[:0], s.log[len(s.log)-maxLogged/2:]...)
	}
	s.log = append(s.log, e)
}

func (s *Server) storeResult(qid string, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.results[qid] = body
	s.resultLRU = append(s.resultLRU, qid)
	for len(s.resultLRU) > maxResults {
		delete(s.results, s.resultLRU[0])
		s.resultLRU = s.resultLRU[1:]
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Only strings, numbers and slices of them are encoded.
		b, _ = json.Marshal(errResponse(newSFError(CodeExecution, "XX000", "encode response: %v", err), ""))
	}
	return b
}
