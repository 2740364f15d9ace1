package sftest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/snowflakedb/gosnowflake"
)

func sfCode(err error) int {
	var se *gosnowflake.SnowflakeError
	if errors.As(err, &se) {
		return se.Number
	}
	return -1
}

// TestMultiStatement checks the rejection without MULTI_STATEMENT_COUNT
// (000008) and a store-style batch with hex-encoded values when it is set.
func TestMultiStatement(t *testing.T) {
	srv, db := openDB(t)
	ctx := ctxT(t)
	mustExec(t, db, "CREATE TABLE ev (run_id STRING, seq INT, payload VARIANT)")
	mustExec(t, db, "CREATE TABLE run_seq (run_id STRING, next_seq INT)")
	mustExec(t, db, "INSERT INTO run_seq VALUES ('r1', 1)")

	_, err := db.ExecContext(ctx, "INSERT INTO ev (seq) VALUES (1); INSERT INTO ev (seq) VALUES (2)")
	if sfCode(err) != 8 {
		t.Fatalf("two statements without MULTI_STATEMENT_COUNT: err = %v, want 000008", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ev").Scan(&n); err != nil || n != 0 {
		t.Fatalf("rejected request wrote %d rows (%v)", n, err)
	}

	payload := hex.EncodeToString([]byte(`{"msg": "it's; a \"test\"\n"}`))
	batch := `BEGIN;
UPDATE run_seq SET next_seq = next_seq + 2 WHERE run_id = HEX_DECODE_STRING('7231');
MERGE INTO ev USING (SELECT 'r1' AS run_id, 1 AS seq, PARSE_JSON(HEX_DECODE_STRING('` + payload + `')) AS payload) s
  ON ev.run_id = s.run_id AND ev.seq = s.seq
  WHEN NOT MATCHED THEN INSERT (run_id, seq, payload) VALUES (s.run_id, s.seq, s.payload);
INSERT INTO ev (run_id, seq) SELECT 'r1', 2;
COMMIT;`
	mctx, err := gosnowflake.WithMultiStatement(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv.ResetCounters()
	res, err := db.ExecContext(mctx, batch)
	if err != nil {
		t.Fatalf("batch: %v", err)
	}
	if affected, _ := res.RowsAffected(); affected != 3 {
		t.Fatalf("batch RowsAffected = %d, want 3 (1 updated + 1 merged + 1 inserted)", affected)
	}
	if q := srv.QueryRequests(); q != 1 {
		t.Fatalf("batch used %d query requests, want 1", q)
	}
	if r := srv.ResultRequests(); r != 3 {
		t.Fatalf("driver fetched %d child results, want 3 (one per DML)", r)
	}
	var msg string
	if err := db.QueryRowContext(ctx, "SELECT payload:msg::string FROM ev WHERE seq = 1").Scan(&msg); err != nil {
		t.Fatal(err)
	}
	if msg != "it's; a \"test\"\n" {
		t.Fatalf("decoded payload msg = %q", msg)
	}

	// A query over a multi-statement request yields each child's rows.
	rows, err := db.QueryContext(mctx, "SELECT next_seq FROM run_seq; SELECT COUNT(*) FROM ev")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []int
	for {
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			got = append(got, v)
		}
		if !rows.NextResultSet() {
			break
		}
	}
	if len(got) != 2 || got[0] != 3 || got[1] != 2 {
		t.Fatalf("multi-statement rows = %v, want [3 2]", got)
	}

	// MULTI_STATEMENT_COUNT must match when it is not 0.
	two, _ := gosnowflake.WithMultiStatement(ctx, 2)
	if _, err := db.ExecContext(two, "SELECT 1; SELECT 2; SELECT 3"); sfCode(err) != 8 {
		t.Fatalf("3 statements with count 2: err = %v, want 000008", err)
	}
}

// TestMultiStatementFailureRollsBack checks that a failing statement stops a
// batch and that the transaction it opened is rolled back.
func TestMultiStatementFailureRollsBack(t *testing.T) {
	_, db := openDB(t)
	ctx := ctxT(t)
	mustExec(t, db, "CREATE TABLE b (id INT)")
	mctx, _ := gosnowflake.WithMultiStatement(ctx, 0)
	_, err := db.ExecContext(mctx, "BEGIN; INSERT INTO b VALUES (1); INSERT INTO nope VALUES (2); COMMIT")
	if sfCode(err) != 2003 {
		t.Fatalf("err = %v, want 002003 (object does not exist)", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM b").Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows after failed batch = %d, %v; want 0", n, err)
	}
}

// TestRetriedRequestIDRunsOnce checks deduplication by requestId: the second
// request with the same id returns the first answer without executing.
func TestRetriedRequestIDRunsOnce(t *testing.T) {
	srv, db := openDB(t)
	ctx := ctxT(t)
	mustExec(t, db, "CREATE TABLE d (id INT)")
	rctx := gosnowflake.WithRequestID(ctx, gosnowflake.NewUUID())
	for i := 0; i < 2; i++ {
		res, err := db.ExecContext(rctx, "INSERT INTO d VALUES (1)")
		if err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("attempt %d: RowsAffected = %d, want the first answer (1)", i, n)
		}
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM d").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows = %d, %v; want 1", n, err)
	}
	executed := 0
	for _, q := range srv.QueryLog() {
		if strings.HasPrefix(q.SQLText, "INSERT INTO d") {
			executed++
		}
	}
	if executed != 1 {
		t.Fatalf("INSERT executed %d times, want 1", executed)
	}
}

// TestCancelInterruptsStatement checks that a canceled context stops a long
// DuckDB statement and leaves the session usable.
func TestCancelInterruptsStatement(t *testing.T) {
	srv, db := openDB(t)
	conn, err := db.Conn(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = conn.ExecContext(ctx, "SELECT COUNT(*) FROM range(100000000000) a WHERE a.range % 7 = 3")
	if err == nil {
		t.Fatal("long query finished despite cancel")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("cancel took %v", d)
	}
	// The server's statement must have stopped: nothing is left running.
	deadline := time.Now().Add(5 * time.Second)
	for {
		srv.mu.Lock()
		running := len(srv.running)
		srv.mu.Unlock()
		if running == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d statements still running after cancel", running)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var one int
	if err := conn.QueryRowContext(ctxT(t), "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("session unusable after cancel: %v", err)
	}
}

// TestQueryTagAndIDs checks QUERY_TAG from ALTER SESSION and from
// WithQueryTag, and that the query id the driver reports is the logged one.
func TestQueryTagAndIDs(t *testing.T) {
	srv, db := openDB(t)
	ctx := ctxT(t)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "ALTER SESSION SET QUERY_TAG = 'dvtrun:run=r1'"); err != nil {
		t.Fatal(err)
	}
	var qid string
	err = conn.Raw(func(dc any) error {
		rows, err := dc.(driver.QueryerContext).QueryContext(ctx, "SELECT 42", nil)
		if err != nil {
			return err
		}
		defer rows.Close()
		qid = rows.(gosnowflake.SnowflakeRows).GetQueryID()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(gosnowflake.WithQueryTag(ctx, "per-request"), "SELECT 2"); err != nil {
		t.Fatal(err)
	}
	log := srv.QueryLog()
	byID := map[string]LoggedQuery{}
	for _, q := range log {
		byID[q.QueryID] = q
	}
	first, ok := byID[qid]
	if !ok || first.SQLText != "SELECT 42" || first.QueryTag != "dvtrun:run=r1" {
		t.Fatalf("query %q logged as %+v", qid, first)
	}
	last := log[len(log)-1]
	if last.SQLText != "SELECT 2" || last.QueryTag != "per-request" {
		t.Fatalf("last query = %+v, want tag per-request", last)
	}
}

// TestArrayBindInsert checks bulk inserts with gosnowflake.Array binds.
func TestArrayBindInsert(t *testing.T) {
	_, db := openDB(t)
	ctx := ctxT(t)
	mustExec(t, db, "CREATE TABLE seed (id NUMBER, name STRING, score DOUBLE, ok BOOLEAN)")
	ids := []int64{1, 2, 3}
	names := []string{"a", "it's", "c\nd"}
	scores := []float64{1.5, 2, -3.25}
	oks := []bool{true, false, true}
	res, err := db.ExecContext(ctx, "INSERT INTO seed (id, name, score, ok) VALUES (?, ?, ?, ?)",
		gosnowflake.Array(&ids), gosnowflake.Array(&names), gosnowflake.Array(&scores), gosnowflake.Array(&oks))
	if err != nil {
		t.Fatalf("array insert: %v", err)
	}
	if n, _ := res.RowsAffected(); n != 3 {
		t.Fatalf("RowsAffected = %d, want 3", n)
	}
	rows, err := db.QueryContext(ctx, "SELECT id, name, score, ok FROM seed ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for i := 0; rows.Next(); i++ {
		var id int64
		var name string
		var score float64
		var ok bool
		if err := rows.Scan(&id, &name, &score, &ok); err != nil {
			t.Fatal(err)
		}
		if id != ids[i] || name != names[i] || score != scores[i] || ok != oks[i] {
			t.Fatalf("row %d = %v %q %v %v", i, id, name, score, ok)
		}
	}
}

// TestKeyPairLogin checks the SNOWFLAKE_JWT authenticator: a token is
// required, its signature is not checked.
func TestKeyPairLogin(t *testing.T) {
	srv := Start(t)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	cfg := srv.Config("DVT", "PUBLIC")
	cfg.Password = ""
	cfg.Authenticator = gosnowflake.AuthTypeJwt
	cfg.PrivateKey = key
	db := sql.OpenDB(gosnowflake.NewConnector(gosnowflake.SnowflakeDriver{}, *cfg))
	defer db.Close()
	if err := db.PingContext(ctxT(t)); err != nil {
		t.Fatalf("key-pair login: %v", err)
	}

	bad := srv.Config("DVT", "PUBLIC")
	bad.User = ""
	bad.Password = "x"
	if _, err := gosnowflake.DSN(bad); err == nil {
		t.Fatal("config without user accepted")
	}
}

// TestWrongPassword checks that configured credentials are enforced.
func TestWrongPassword(t *testing.T) {
	srv, err := New(Options{User: "dvt", Password: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cfg := srv.Config("", "")
	cfg.Password = "wrong"
	db := sql.OpenDB(gosnowflake.NewConnector(gosnowflake.SnowflakeDriver{}, *cfg))
	defer db.Close()
	if err := db.PingContext(ctxT(t)); sfCode(err) != 390100 {
		t.Fatalf("wrong password: err = %v, want 390100", err)
	}
	good := sql.OpenDB(gosnowflake.NewConnector(gosnowflake.SnowflakeDriver{}, *srv.Config("", "")))
	defer good.Close()
	if err := good.PingContext(ctxT(t)); err != nil {
		t.Fatalf("right password: %v", err)
	}
}

// TestAsyncMode checks gosnowflake.WithAsyncMode: the request returns at
// once (333334) and the driver collects the result from
// /queries/<id>/result.
func TestAsyncMode(t *testing.T) {
	_, db := openDB(t)
	ctx := ctxT(t)
	mustExec(t, db, "CREATE TABLE a (id INT)")
	actx := gosnowflake.WithAsyncMode(ctx)
	res, err := db.ExecContext(actx, "INSERT INTO a SELECT range FROM range(3)")
	if err != nil {
		t.Fatalf("async exec: %v", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 3 {
		t.Fatalf("async RowsAffected = %d, %v; want 3", n, err)
	}
	rows, err := db.QueryContext(actx, "SELECT COUNT(*) FROM a")
	if err != nil {
		t.Fatalf("async query: %v", err)
	}
	defer rows.Close()
	var n int
	if !rows.Next() {
		t.Fatalf("async query returned no row: %v", rows.Err())
	}
	if err := rows.Scan(&n); err != nil || n != 3 {
		t.Fatalf("async count = %d, %v; want 3", n, err)
	}
}
