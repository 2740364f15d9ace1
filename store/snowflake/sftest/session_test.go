package sftest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/snowflakedb/gosnowflake"
)

// wire is a minimal client of the server's REST protocol, for what the
// driver does not let a test control (request ids in flight, abort, tokens).
type wire struct {
	t    *testing.T
	srv  *Server
	tok  string
	mtok string
}

type wireResp struct {
	Data struct {
		Token        string      `json:"token"`
		MasterToken  string      `json:"masterToken"`
		SessionToken string      `json:"sessionToken"`
		QueryID      string      `json:"queryId"`
		SQLState     string      `json:"sqlState"`
		RowSet       [][]*string `json:"rowset"`
		RowType      []rowType   `json:"rowtype"`
		StmtType     int64       `json:"statementTypeId"`
		Format       string      `json:"queryResultFormat"`
	} `json:"data"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Success bool   `json:"success"`
}

func (w *wire) post(path string, q url.Values, token string, body any) wireResp {
	w.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		w.t.Fatal(err)
	}
	u := "http://" + w.srv.Addr() + path
	if q != nil {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		w.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", `Snowflake Token="`+token+`"`)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Errorf("post %s: %v", path, err)
		return wireResp{}
	}
	defer resp.Body.Close()
	var out wireResp
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		w.t.Errorf("decode %s: %v", path, err)
	}
	return out
}

func login(t *testing.T, srv *Server) *wire {
	t.Helper()
	w := &wire{t: t, srv: srv}
	r := w.post("/session/v1/login-request", url.Values{"databaseName": {"dvt"}}, "",
		map[string]any{"data": map[string]any{"LOGIN_NAME": "u", "PASSWORD": "p"}})
	if !r.Success || r.Data.Token == "" {
		t.Fatalf("login: %+v", r)
	}
	w.tok, w.mtok = r.Data.Token, r.Data.MasterToken
	return w
}

func (w *wire) query(reqID, sqlText string) wireResp {
	return w.post("/queries/v1/query-request", url.Values{"requestId": {reqID}}, w.tok,
		map[string]any{"sqlText": sqlText})
}

// TestSessionEndpoints walks a session through heartbeat, renewal and close.
func TestSessionEndpoints(t *testing.T) {
	srv := Start(t)
	w := login(t, srv)
	if r := w.post("/session/heartbeat", nil, w.tok, nil); !r.Success {
		t.Fatalf("heartbeat: %+v", r)
	}
	old := w.tok
	r := w.post("/session/token-request", nil, w.mtok, map[string]string{"oldSessionToken": old, "requestType": "RENEW"})
	if !r.Success || r.Data.SessionToken == "" || r.Data.SessionToken == old {
		t.Fatalf("renew: %+v", r)
	}
	w.tok = r.Data.SessionToken
	if r := w.query("q1", "SELECT 1"); !r.Success || *r.Data.RowSet[0][0] != "1" {
		t.Fatalf("query with renewed token: %+v", r)
	}
	if r := w.post("/queries/v1/query-request", nil, old, map[string]any{"sqlText": "SELECT 1"}); r.Success || r.Code != CodeSessionGone {
		t.Fatalf("old token after renewal: %+v", r)
	}
	if r := w.post("/session", url.Values{"delete": {"true"}}, w.tok, nil); !r.Success {
		t.Fatalf("close: %+v", r)
	}
	if r := w.query("q2", "SELECT 1"); r.Success || r.Code != CodeSessionGone {
		t.Fatalf("query after close: %+v", r)
	}
}

// TestDriverRenewsExpiredToken checks that the driver recovers from an
// expired token (390112) through token-request, mid-transaction.
func TestDriverRenewsExpiredToken(t *testing.T) {
	srv, db := openDB(t)
	ctx := ctxT(t)
	mustExec(t, db, "CREATE TABLE r (id INT)")
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, tx, "INSERT INTO r VALUES (1)")
	srv.ExpireTokens()
	mustExec(t, tx, "INSERT INTO r VALUES (2)")
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM r").Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows = %d, %v; want 2 in the same transaction", n, err)
	}
}

// TestCloseRollsBack checks that closing a session rolls back its open
// transaction.
func TestCloseRollsBack(t *testing.T) {
	srv, db := openDB(t)
	ctx := ctxT(t)
	mustExec(t, db, "CREATE TABLE c (id INT)")
	other := srv.OpenDB(t, "DVT", "PUBLIC")
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, conn, "BEGIN")
	mustExec(t, conn, "INSERT INTO c VALUES (1)")
	_ = conn.Close()
	if err := other.Close(); err != nil { // the driver deletes the session
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM c").Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows after close = %d, %v; want 0", n, err)
	}
}

const slowSQL = "SELECT COUNT(*) FROM range(100000000000) a WHERE a.range % 7 = 3"

// TestAbortRequest cancels a running statement by its requestId.
func TestAbortRequest(t *testing.T) {
	srv := Start(t)
	w := login(t, srv)
	done := make(chan wireResp, 1)
	go func() { done <- w.query("slow-1", slowSQL) }()
	waitRunning(t, srv, "slow-1")
	if r := w.post("/queries/v1/abort-request", nil, w.tok, map[string]string{"requestId": "slow-1"}); !r.Success {
		t.Fatalf("abort: %+v", r)
	}
	select {
	case r := <-done:
		if r.Success || r.Code != CodeCanceled || r.Data.QueryID == "" {
			t.Fatalf("aborted query answered %+v, want 000604 with a query id", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("abort did not stop the statement")
	}
	if r := w.post("/queries/v1/abort-request", nil, w.tok, map[string]string{"requestId": "slow-1"}); r.Success || r.Code != CodeNotExecuting {
		t.Fatalf("abort of a finished request: %+v, want 000605", r)
	}
	// A canceled request may be sent again and then runs.
	if r := w.query("slow-1", "SELECT 5"); !r.Success || *r.Data.RowSet[0][0] != "5" {
		t.Fatalf("resent canceled request: %+v", r)
	}
}

func waitRunning(t *testing.T, srv *Server, reqID string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		srv.mu.Lock()
		_, ok := srv.running[reqID]
		srv.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("request %s never started", reqID)
}

// TestRetryWhileRunning checks that a retry arriving while the first
// attempt runs waits for it and gets the same answer.
func TestRetryWhileRunning(t *testing.T) {
	srv := Start(t)
	w := login(t, srv)
	if r := w.query("ddl", "CREATE TABLE d (n INT)"); !r.Success {
		t.Fatalf("create: %+v", r)
	}
	insert := "INSERT INTO d SELECT COUNT(*) FROM range(300000000) a WHERE a.range % 7 = 3"
	var wg sync.WaitGroup
	answers := make([]wireResp, 2)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = w.query("same-id", insert)
		}()
		if i == 0 {
			waitRunning(t, srv, "same-id")
		}
	}
	wg.Wait()
	for i, r := range answers {
		if !r.Success || r.Data.QueryID != answers[0].Data.QueryID {
			t.Fatalf("answer %d = %+v, want the first answer", i, r)
		}
	}
	if r := w.query("count", "SELECT COUNT(*) FROM d"); !r.Success || *r.Data.RowSet[0][0] != "1" {
		t.Fatalf("rows: %+v, want 1", r)
	}
}

// TestErrorShape checks that failures arrive as Snowflake errors with code,
// SQL state and query id.
func TestErrorShape(t *testing.T) {
	_, db := openDB(t)
	tests := []struct {
		name     string
		sql      string
		code     int
		sqlState string
	}{
		{"syntax", "SELEC 1", 1003, "42000"},
		{"missing table", "SELECT * FROM no_such_table", 2003, "42S02"},
		{"bad cast", "SELECT 'abc'::INT", 100038, "22018"},
		{"empty", "  ;  ", 900, "42000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := db.ExecContext(ctxT(t), tc.sql)
			var se *gosnowflake.SnowflakeError
			if !errors.As(err, &se) {
				t.Fatalf("error %v is not a SnowflakeError", err)
			}
			if se.Number != tc.code || se.SQLState != tc.sqlState || se.QueryID == "" {
				t.Fatalf("got %d/%s qid %q (%s), want %d/%s", se.Number, se.SQLState, se.QueryID, se.Message, tc.code, tc.sqlState)
			}
		})
	}
}

// TestDatabasesAndSchemas checks USE, CREATE SCHEMA/DATABASE and qualified
// names.
func TestDatabasesAndSchemas(t *testing.T) {
	_, db := openDB(t)
	ctx := ctxT(t)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{
		"CREATE SCHEMA IF NOT EXISTS staging",
		"USE SCHEMA staging",
		"CREATE TABLE s1 (id INT)",
		"INSERT INTO DVT.STAGING.s1 VALUES (1)",
		"CREATE DATABASE IF NOT EXISTS other_db",
		"USE DATABASE other_db",
		"CREATE TABLE o1 (id INT)",
		"INSERT INTO o1 SELECT id + 1 FROM dvt.staging.s1",
		"USE WAREHOUSE wh",
		"USE ROLE r",
	} {
		mustExec(t, conn, q)
	}
	var n int
	if err := conn.QueryRowContext(ctx, "SELECT id FROM OTHER_DB.PUBLIC.O1").Scan(&n); err != nil || n != 2 {
		t.Fatalf("id = %d, %v; want 2", n, err)
	}
}

// TestStatementTypeIDs pins the statementTypeId and first column the driver
// sees for each kind of statement.
func TestStatementTypeIDs(t *testing.T) {
	srv := Start(t)
	w := login(t, srv)
	tests := []struct {
		sql    string
		id     int64
		column string
	}{
		{"CREATE TABLE k (id INT)", 0x6000, "status"},
		{"BEGIN", 0x5000, "status"},
		{"INSERT INTO k VALUES (1), (2)", 0x3100, "number of rows inserted"},
		{"UPDATE k SET id = id + 1", 0x3200, "number of rows updated"},
		{"DELETE FROM k WHERE id = 3", 0x3300, "number of rows deleted"},
		{"MERGE INTO k USING (SELECT 5 AS id) s ON k.id = s.id WHEN NOT MATCHED THEN INSERT (id) VALUES (s.id)", 0x3400, "number of rows inserted"},
		{"COMMIT", 0x5000, "status"},
		{"ALTER SESSION SET QUERY_TAG = 't'", 0x4100, "status"},
		{"USE SCHEMA public", 0x4300, "status"},
		{"SELECT id FROM k ORDER BY id", 0x1000, "ID"},
		{"WITH x AS (SELECT 1 AS one) SELECT one FROM x", 0x1000, "ONE"},
		{"DROP TABLE k", 0x6000, "status"},
	}
	for i, tc := range tests {
		r := w.query(fmt.Sprintf("st-%d", i), tc.sql)
		if !r.Success {
			t.Fatalf("%s: %+v", tc.sql, r)
		}
		if r.Data.StmtType != tc.id || len(r.Data.RowType) == 0 || r.Data.RowType[0].Name != tc.column || r.Data.Format != "json" || r.Data.QueryID == "" {
			t.Errorf("%s: statementTypeId %#x, rowtype %+v, format %q, queryId %q; want %#x and column %q",
				tc.sql, r.Data.StmtType, r.Data.RowType, r.Data.Format, r.Data.QueryID, tc.id, tc.column)
		}
	}
}

// TestClosedRequestStopsStatement checks that a client closing its HTTP
// request (no abort-request) interrupts the DuckDB statement.
func TestClosedRequestStopsStatement(t *testing.T) {
	srv := Start(t)
	w := login(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, _ := json.Marshal(map[string]any{"sqlText": slowSQL})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		"http://"+srv.Addr()+"/queries/v1/query-request?requestId=closed-1", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", `Snowflake Token="`+w.tok+`"`)
	go func() {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitRunning(t, srv, "closed-1")
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for {
		srv.mu.Lock()
		_, running := srv.running["closed-1"]
		srv.mu.Unlock()
		if !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("statement still running after the client closed its request")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := w.query("after", "SELECT 1"); !r.Success {
		t.Fatalf("session unusable: %+v", r)
	}
}

// TestConcurrentLogins checks that sessions logging in together into a new
// database and schema all succeed.
func TestConcurrentLogins(t *testing.T) {
	srv := Start(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db := srv.OpenDB(t, "fresh_db", "fresh_schema")
			var one int
			errs <- db.QueryRowContext(ctxT(t), "SELECT 1").Scan(&one)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent login: %v", err)
		}
	}
}

// TestNewSessionStartsClean: a session's DuckDB connection comes from a
// pool, so one left with an aborted transaction (a session that ended
// while DuckDB held it aborted) must not reach the next session: every
// session starts outside a transaction, as every Snowflake session does.
func TestNewSessionStartsClean(t *testing.T) {
	srv := Start(t)
	ctx := ctxT(t)
	srv.db.SetMaxOpenConns(1) // the next login gets this very connection
	conn, err := srv.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, conn, "BEGIN TRANSACTION")
	if _, err := conn.ExecContext(ctx, "SELECT CAST('abc' AS INTEGER)"); err == nil {
		t.Fatal("a failing cast succeeded")
	}
	if _, err := conn.ExecContext(ctx, "SELECT 1"); err == nil {
		t.Fatal("DuckDB's transaction is not aborted: the test proves nothing")
	}
	_ = conn.Close() // back to the pool, still aborted
	db := srv.OpenDB(t, "DVT", "PUBLIC")
	var one int
	if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("a new session's first query: %d, %v", one, err)
	}
}
