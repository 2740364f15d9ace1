package sftest

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/snowflakedb/gosnowflake"
)

// TestCountingTransportAndRTT: the counting transport sees exactly the
// round trips the server serves, by kind, and the RTT option delays each of
// them (a lower bound only: a loaded machine can only make it slower).
func TestCountingTransportAndRTT(t *testing.T) {
	const rtt = 40 * time.Millisecond
	srv := StartWith(t, Options{RTT: rtt})
	ct := &CountingTransport{}
	cfg := srv.Config("DVT", "PUBLIC")
	cfg.Transporter = ct
	db := sql.OpenDB(gosnowflake.NewConnector(gosnowflake.SnowflakeDriver{}, *cfg))
	t.Cleanup(func() { _ = db.Close() })
	ctx := ctxT(t)
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, "CREATE TABLE t (a INT)")
	if got := ct.Count(TripLogin); got != 1 {
		t.Errorf("logins = %d, want 1", got)
	}

	cases := []struct {
		name             string
		do               func(ctx context.Context) error
		queries, results int64
	}{
		{"one statement", func(ctx context.Context) error {
			_, err := db.ExecContext(ctx, "INSERT INTO t VALUES (1)")
			return err
		}, 1, 0},
		{"a query", func(ctx context.Context) error {
			var n int
			return db.QueryRowContext(ctx, "SELECT COUNT(*) FROM t").Scan(&n)
		}, 1, 0},
		// The driver fetches the result of every DML child of a
		// multi-statement request: three round trips for two inserts.
		{"multi-statement with two DML children", func(ctx context.Context) error {
			mctx, err := gosnowflake.WithMultiStatement(ctx, 2)
			if err != nil {
				return err
			}
			_, err = db.ExecContext(mctx, "INSERT INTO t VALUES (2); INSERT INTO t VALUES (3)")
			return err
		}, 1, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ct.Reset()
			srv.ResetCounters()
			start := time.Now()
			if err := c.do(ctx); err != nil {
				t.Fatal(err)
			}
			elapsed := time.Since(start)
			if q, r := ct.Count(TripQuery), ct.Count(TripResult); q != c.queries || r != c.results {
				t.Errorf("round trips: %d queries, %d result fetches; want %d, %d", q, r, c.queries, c.results)
			}
			if all, served := ct.Count(), srv.Requests(); all != served {
				t.Errorf("transport counted %d, server served %d", all, served)
			}
			if floor := time.Duration(c.queries+c.results) * rtt; elapsed < floor {
				t.Errorf("took %s, less than %d round trips of %s", elapsed, c.queries+c.results, rtt)
			}
		})
	}
}
