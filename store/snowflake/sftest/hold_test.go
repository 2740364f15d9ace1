package sftest

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// holdWait bounds every wait of the hold tests; the machine may be loaded.
const holdWait = 30 * time.Second

// waitHeld receives the next held answer or fails the test.
func waitHeld(t *testing.T, held <-chan HeldAnswer) HeldAnswer {
	t.Helper()
	select {
	case a := <-held:
		return a
	case <-time.After(holdWait):
		t.Fatal("no answer was held")
		return HeldAnswer{}
	}
}

// countRows reads COUNT(*) of table through db, another session.
func countRows(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(ctxT(t), "SELECT COUNT(*) FROM "+table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

// TestHoldAnswers: while the answer to a matching request is held, the
// request has executed and committed (another session sees its rows) and
// its client still waits; release delivers the answer as it was.
func TestHoldAnswers(t *testing.T) {
	cases := []struct {
		name    string
		sql     string
		rows    int    // rows of h another session sees while the answer is held
		wantErr string // Snowflake error code of the held answer
	}{
		{name: "autocommit DML", sql: "INSERT INTO h VALUES (1), (2)", rows: 2},
		{
			name: "scripting block with its own transaction",
			sql: `EXECUTE IMMEDIATE $$
BEGIN
  BEGIN TRANSACTION;
  INSERT INTO h VALUES (1);
  INSERT INTO h VALUES (2);
  INSERT INTO h VALUES (3);
  COMMIT;
  RETURN 'done';
END;
$$`,
			rows: 3,
		},
		{
			name: "failed block rolled back",
			sql: `EXECUTE IMMEDIATE $$
BEGIN
  BEGIN TRANSACTION;
  INSERT INTO h VALUES (1);
  INSERT INTO h_missing VALUES (2);
  COMMIT;
END;
$$`,
			rows:    0,
			wantErr: CodeObjectNotFound,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, db := openDB(t)
			other := srv.OpenDB(t, "DVT", "PUBLIC")
			mustExec(t, db, "CREATE TABLE h (a INT)")
			held, release := srv.HoldAnswers(func(q string) bool { return strings.Contains(q, "INSERT INTO h") })
			defer release()
			done := make(chan error, 1)
			go func() {
				_, err := db.ExecContext(context.Background(), c.sql)
				done <- err
			}()
			a := waitHeld(t, held)
			if a.SQLText != c.sql || a.QueryID == "" || a.RequestID == "" || a.Err != c.wantErr {
				t.Errorf("held %+v, want the request's text, ids and error code %q", a, c.wantErr)
			}
			// Statements that do not match are answered meanwhile.
			if n := countRows(t, other, "h"); n != c.rows {
				t.Errorf("another session sees %d rows while the answer is held, want %d", n, c.rows)
			}
			select {
			case err := <-done:
				t.Fatalf("the client got its answer (%v) before release", err)
			default:
			}
			release()
			select {
			case err := <-done:
				switch {
				case c.wantErr == "" && err != nil:
					t.Errorf("released answer: %v", err)
				case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
					t.Errorf("released answer: %v, want error %s", err, c.wantErr)
				}
			case <-time.After(holdWait):
				t.Fatal("release did not deliver the answer")
			}
			if n := countRows(t, db, "h"); n != c.rows {
				t.Errorf("after release: %d rows, want %d (executed once)", n, c.rows)
			}
			// Released: the next matching request is answered at once.
			mustExec(t, db, "INSERT INTO h VALUES (9)")
		})
	}
}

// TestHoldAnswersClientGone: a client that gives up (or is killed) while
// its answer is held leaves the request committed; a resend of the same
// requestId is answered at once without executing again, as Snowflake
// answers a requestId it executed.
func TestHoldAnswersClientGone(t *testing.T) {
	srv, db := openDB(t)
	mustExec(t, db, "CREATE TABLE g (a INT)")
	held, release := srv.HoldAnswers(func(q string) bool { return strings.Contains(q, "INSERT INTO g") })
	defer release()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := db.ExecContext(ctx, "INSERT INTO g VALUES (1)")
		done <- err
	}()
	waitHeld(t, held)
	cancel() // the client goes away without its answer
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the client that gave up got %v, want context.Canceled", err)
		}
	case <-time.After(holdWait):
		t.Fatal("the client did not give up")
	}
	if n := countRows(t, db, "g"); n != 1 {
		t.Fatalf("%d rows after the client went away, want 1 (the request committed)", n)
	}

	w := login(t, srv)
	first := make(chan wireResp, 1)
	go func() { first <- w.query("g-1", "INSERT INTO g VALUES (2)") }()
	a := waitHeld(t, held)
	if a.RequestID != "g-1" {
		t.Fatalf("held request %q, want g-1", a.RequestID)
	}
	if r := w.query("g-1", "INSERT INTO g VALUES (2)"); !r.Success || r.Data.QueryID != a.QueryID {
		t.Errorf("resend of a held requestId: %+v, want the held answer (query %s)", r, a.QueryID)
	}
	release()
	select {
	case r := <-first:
		if !r.Success || r.Data.QueryID != a.QueryID {
			t.Errorf("released answer %+v", r)
		}
	case <-time.After(holdWait):
		t.Fatal("release did not deliver the answer")
	}
	if n := countRows(t, db, "g"); n != 2 {
		t.Errorf("%d rows, want 2: the resent requestId executed once", n)
	}
}

// TestCloseReleasesAnswers: Close ends a hold, so a server closed by a
// test's cleanup does not wait for a release that never comes.
func TestCloseReleasesAnswers(t *testing.T) {
	srv, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	w := login(t, srv)
	held, _ := srv.HoldAnswers(func(q string) bool { return q == "SELECT 1" })
	answered := make(chan struct{})
	go func() {
		// Not w.query: the server goes away, and the error is expected.
		req, _ := http.NewRequest(http.MethodPost, "http://"+srv.Addr()+"/queries/v1/query-request",
			strings.NewReader(`{"sqlText": "SELECT 1"}`))
		req.Header.Set("Authorization", `Snowflake Token="`+w.tok+`"`)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
		close(answered)
	}()
	waitHeld(t, held)
	closed := make(chan error, 1)
	go func() { closed <- srv.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("close: %v", err)
		}
	case <-time.After(holdWait):
		t.Fatal("Close waited for a held answer")
	}
	select {
	case <-answered:
	case <-time.After(holdWait):
		t.Fatal("the client still waits after Close")
	}
}
