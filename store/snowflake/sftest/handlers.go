package sftest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
)

// handleLogin authenticates with a password or, for SNOWFLAKE_JWT, with any
// well-formed JWT (the signature is not verified), and opens a session on
// its own DuckDB connection.
func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Data struct {
			LoginName     string         `json:"LOGIN_NAME"`
			Password      string         `json:"PASSWORD"`
			Authenticator string         `json:"AUTHENTICATOR"`
			Token         string         `json:"TOKEN"`
			SessionParams map[string]any `json:"SESSION_PARAMETERS"`
		} `json:"data"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeJSON(w, errResponse(newSFError(CodeAuthFailed, "08001", "bad login request: %v", err), ""))
		return
	}
	d := body.Data
	if e := s.checkCredentials(d.LoginName, d.Password, d.Authenticator, d.Token); e != nil {
		writeJSON(w, errResponse(e, ""))
		return
	}
	conn, err := s.db.Conn(context.WithoutCancel(r.Context()))
	if err != nil {
		writeJSON(w, errResponse(newSFError(CodeExecution, "08001", "open session: %v", err), ""))
		return
	}
	// The connection comes from a pool: one a session left inside a
	// transaction (DuckDB aborted it while the session went away) must not
	// reach this one. Outside a transaction ROLLBACK fails, harmlessly.
	_, _ = conn.ExecContext(context.WithoutCancel(r.Context()), "ROLLBACK")
	user := d.LoginName
	if user == "" { // SNOWFLAKE_JWT names the user inside the token
		user = s.opts.User
	}
	sess := &session{srv: s, user: strings.ToUpper(user), conn: conn, locks: s.locks, defaultLockTimeout: s.opts.LockTimeout, params: map[string]string{}, lastActive: time.Now()}
	for k, v := range d.SessionParams {
		sess.params[strings.ToUpper(k)] = fmt.Sprint(v)
	}
	// Timestamps without a zone are UTC, whatever the host's zone is.
	if err := sess.rawExec(r.Context(), "SET TimeZone = 'UTC'"); err != nil {
		_ = conn.Close()
		writeJSON(w, errResponse(mapError(err), ""))
		return
	}
	q := r.URL.Query()
	if err := sess.setContext(r.Context(), strings.ToUpper(q.Get("databaseName")), strings.ToUpper(q.Get("schemaName"))); err != nil {
		_ = conn.Close()
		writeJSON(w, errResponse(mapError(err), ""))
		return
	}
	token, master := "ST-"+uuid.NewString(), "MT-"+uuid.NewString()
	s.mu.Lock()
	s.nextID++
	sess.id = s.nextID
	s.sessions[token] = sess
	s.masters[master] = sess
	s.byID[sess.id] = sess
	s.mu.Unlock()
	s.logf("sftest: login user=%s authenticator=%s session=%d", d.LoginName, d.Authenticator, sess.id)
	writeJSON(w, okResponse(map[string]any{
		"token":                   token,
		"validityInSeconds":       3600,
		"masterToken":             master,
		"masterValidityInSeconds": 14400,
		"sessionId":               sess.id,
		"serverVersion":           "sftest-duckdb",
		"parameters":              []any{},
		"sessionInfo": map[string]string{
			"databaseName":  sess.db,
			"schemaName":    sess.sc,
			"warehouseName": strings.ToUpper(q.Get("warehouse")),
			"roleName":      strings.ToUpper(q.Get("roleName")),
		},
	}))
}

func (s *Server) checkCredentials(user, password, authenticator, token string) *sfError {
	fail := newSFError(CodeAuthFailed, "08001", "Incorrect username or password was specified.")
	if s.opts.User != "" && user != "" && !strings.EqualFold(user, s.opts.User) {
		return fail
	}
	switch strings.ToUpper(authenticator) {
	case "SNOWFLAKE_JWT": // the user is inside the JWT, LOGIN_NAME is not sent
		if strings.Count(token, ".") != 2 {
			return newSFError("390144", "08001", "JWT token is invalid.")
		}
		return nil
	case "", "SNOWFLAKE":
		if user == "" || password == "" || s.opts.Password != "" && password != s.opts.Password {
			return fail
		}
		return nil
	}
	if token == "" { // OAuth, PAT and friends carry a token
		return fail
	}
	return nil
}

// handleRenew issues a new session token for the master token.
func (s *Server) handleRenew(w http.ResponseWriter, r *http.Request) {
	master := tokenOf(r)
	var body struct {
		OldSessionToken string `json:"oldSessionToken"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	s.mu.Lock()
	sess, ok := s.masters[master]
	var token string
	if ok {
		token = "ST-" + uuid.NewString()
		delete(s.sessions, body.OldSessionToken)
		delete(s.expired, body.OldSessionToken)
		s.sessions[token] = sess
	}
	s.mu.Unlock()
	if !ok {
		writeJSON(w, errResponse(errNoSession, ""))
		return
	}
	writeJSON(w, okResponse(map[string]any{
		"sessionToken": token, "validityInSecondsST": 3600,
		"masterToken": master, "validityInSecondsMT": 14400, "sessionId": sess.id,
	}))
}

func (s *Server) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	if _, e := s.sessionFor(r); e != nil {
		writeJSON(w, errResponse(e, ""))
		return
	}
	writeJSON(w, okResponse(nil))
}

// handleSessionClose ends a session (POST /session?delete=true); an open
// transaction is rolled back, as Snowflake does.
func (s *Server) handleSessionClose(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("delete") != "true" {
		writeJSON(w, okResponse(nil))
		return
	}
	tok := tokenOf(r)
	s.mu.Lock()
	sess, ok := s.sessions[tok]
	if ok {
		for k, v := range s.sessions {
			if v == sess {
				delete(s.sessions, k)
			}
		}
		for k, v := range s.expired {
			if v == sess {
				delete(s.expired, k)
			}
		}
		for k, v := range s.masters {
			if v == sess {
				delete(s.masters, k)
			}
		}
		delete(s.byID, sess.id)
	}
	s.mu.Unlock()
	if !ok {
		writeJSON(w, errResponse(errNoSession, ""))
		return
	}
	sess.mu.Lock()
	if sess.inTx {
		_, _ = sess.endTx(context.WithoutCancel(r.Context()), false)
	}
	err := sess.conn.Close()
	sess.mu.Unlock()
	if err != nil {
		writeJSON(w, errResponse(newSFError(CodeExecution, "XX000", "close session: %v", err), ""))
		return
	}
	writeJSON(w, okResponse(nil))
}

// handleAbort cancels the running request named in the body.
func (s *Server) handleAbort(w http.ResponseWriter, r *http.Request) {
	var body struct {
		RequestID string `json:"requestId"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeJSON(w, errResponse(newSFError(CodeCompilation, "42000", "bad abort request: %v", err), ""))
		return
	}
	s.mu.Lock()
	cancel, ok := s.running[body.RequestID]
	s.mu.Unlock()
	if !ok {
		writeJSON(w, errResponse(newSFError(CodeNotExecuting, "01000", "Identified SQL statement is not currently executing."), ""))
		return
	}
	cancel()
	writeJSON(w, okResponse(nil))
}

// handleResult serves the stored result of a statement of a multi-statement
// request or of an asynchronous request (GET /queries/<id>/result), waiting
// for a running one.
func (s *Server) handleResult(w http.ResponseWriter, r *http.Request) {
	s.resultRequests.Add(1)
	if _, e := s.sessionFor(r); e != nil {
		writeJSON(w, errResponse(e, ""))
		return
	}
	id := r.PathValue("id")
	s.mu.Lock()
	body, ok := s.results[id]
	done, running := s.pending[id]
	s.mu.Unlock()
	if !ok && running {
		select {
		case <-done:
			s.mu.Lock()
			body, ok = s.results[id]
			s.mu.Unlock()
		case <-time.After(maxResultWait):
			writeJSON(w, inProgress(id))
			return
		case <-r.Context().Done():
			return
		}
	}
	if !ok {
		writeJSON(w, errResponse(newSFError("000709", "02000", "Statement %s not found", id), id))
		return
	}
	writeBody(w, body)
}

// handleQuery serves /queries/v1/query-request. A requestId seen before gets
// the first answer again without executing anything: the driver retries
// with the same requestId, and Snowflake executes a requestId once.
func (s *Server) handleQuery(w http.ResponseWriter, r *http.Request) {
	s.queryRequests.Add(1)
	sess, e := s.sessionFor(r)
	if e != nil {
		writeJSON(w, errResponse(e, ""))
		return
	}
	var req queryRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, errResponse(newSFError(CodeCompilation, "42000", "bad query request: %v", err), ""))
		return
	}
	reqID := r.URL.Query().Get("requestId")
	if reqID == "" {
		reqID = uuid.NewString()
	}
	s.mu.Lock()
	if e, seen := s.done[reqID]; seen {
		s.mu.Unlock()
		select {
		case <-e.ready:
			writeBody(w, e.body)
		case <-r.Context().Done():
		}
		return
	}
	entry := &dedupEntry{ready: make(chan struct{})}
	s.remember(reqID, entry)
	qid := newQueryID()
	if req.AsyncExec {
		// The statement outlives this HTTP request; abort-request ends it.
		ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
		s.running[reqID] = cancel
		done := make(chan struct{})
		s.pending[qid] = done
		entry.body = mustJSON(inProgress(qid))
		close(entry.ready)
		s.mu.Unlock()
		go func() {
			body := s.execute(ctx, sess, &req, reqID, qid)
			cancel()
			s.storeResult(qid, body)
			s.mu.Lock()
			delete(s.pending, qid)
			delete(s.running, reqID)
			s.mu.Unlock()
			close(done)
		}()
		writeBody(w, entry.body)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	s.running[reqID] = cancel
	s.mu.Unlock()

	body := s.execute(ctx, sess, &req, reqID, qid)
	canceled := ctx.Err() != nil
	cancel()

	s.mu.Lock()
	delete(s.running, reqID)
	entry.body = body
	close(entry.ready)
	if canceled { // a canceled request may be sent again and must then run
		delete(s.done, reqID)
	}
	s.mu.Unlock()
	if !canceled {
		s.holdAnswer(reqID, qid, req.SQLText, body)
	}
	writeBody(w, body)
}

// inProgress is the answer to an asynchronous request (333334): the driver
// then polls getResultUrl.
func inProgress(qid string) response {
	return response{
		Data:    map[string]string{"queryId": qid, "getResultUrl": "/queries/" + qid + "/result"},
		Code:    "333334",
		Message: "Asynchronous execution in progress. Use provided query id to perform query monitoring and management.",
		Success: true,
	}
}

// maxResultWait is how long GET /queries/<id>/result waits for a running
// asynchronous statement before answering "in progress" (Snowflake: 45 s).
const maxResultWait = 40 * time.Second

// remember records a requestId, forgetting the oldest beyond maxRemembered.
// Callers hold s.mu.
func (s *Server) remember(reqID string, e *dedupEntry) {
	s.done[reqID] = e
	s.doneLRU = append(s.doneLRU, reqID)
	for len(s.doneLRU) > maxRemembered {
		delete(s.done, s.doneLRU[0])
		s.doneLRU = s.doneLRU[1:]
	}
}
