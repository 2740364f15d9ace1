package snowflake_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
)

func openWarehouse(t *testing.T) (*snowflake.Warehouse, *sftest.Server) {
	t.Helper()
	srv := sftest.Start(t)
	w, err := snowflake.OpenWarehouse(ctx, srv.DSN("analytics", "public"), snowflake.WarehouseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w, srv
}

const customers = "id,name,score,note\n1,Ann,1.5,vip\n2,Bob,,\n3,\"O'Hara, Cy\",2.25,\"said \"\"hi\"\"\"\n4,Dee,3,\n5,Eve,4.5,x\n"

func seedFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "customers.csv")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func tag(step string) string {
	return `{"run_id":"r-1","step_id":"` + step + `","attempts":1}`
}

// logged returns the statements the server ran for the given query ids.
func logged(srv *sftest.Server, ids []string) []sftest.LoggedQuery {
	var out []sftest.LoggedQuery
	for _, q := range srv.QueryLog() {
		if slices.Contains(ids, q.QueryID) {
			out = append(out, q)
		}
	}
	return out
}

func TestWarehouseSteps(t *testing.T) {
	w, srv := openWarehouse(t)
	seed, err := w.RunStep(ctx, engine.StepRequest{RunID: "r-1", StepID: "seed.customers", Kind: plan.KindSeed, Relation: "customers",
		SeedPath: seedFile(t, customers), QueryTag: tag("seed.customers")})
	if err != nil {
		t.Fatal(err)
	}
	if seed.RowCount != 5 || seed.RowsAffected != 5 {
		t.Fatalf("seed result %+v", seed)
	}
	// Rows with NULLs in different columns are inserted by null pattern:
	// one CREATE and one array-bound INSERT per pattern, not one per row.
	stmts := logged(srv, seed.QueryIDs)
	inserts := 0
	for _, q := range stmts {
		if strings.HasPrefix(q.SQLText, "INSERT") {
			inserts++
		}
	}
	if len(seed.QueryIDs) != 1+inserts || inserts != 3 {
		t.Fatalf("seed ran %d statements (%d inserts), want a CREATE and 3 array INSERTs: %+v", len(seed.QueryIDs), inserts, stmts)
	}
	var n, nullScores, nullNotes int
	var sum float64
	var name string
	if err := w.DB().QueryRowContext(ctx, `SELECT COUNT(*), SUM(score), COUNT(*) - COUNT(score), COUNT(*) - COUNT(note), MAX(CASE WHEN id = 3 THEN name END) FROM customers`).
		Scan(&n, &sum, &nullScores, &nullNotes, &name); err != nil {
		t.Fatal(err)
	}
	if n != 5 || sum != 11.25 || nullScores != 1 || nullNotes != 2 || name != "O'Hara, Cy" {
		t.Fatalf("seeded table: %d rows, sum %v, %d null scores, %d null notes, name %q", n, sum, nullScores, nullNotes, name)
	}

	cases := []struct {
		name string
		req  engine.StepRequest
		want engine.StepResult
		read string // a query whose count checks what the step built
		n    int64
	}{
		{name: "table model", req: engine.StepRequest{StepID: "model.big", Kind: plan.KindModel, Relation: "big_customers", Materialized: plan.MaterializedTable,
			SQL: "select id, name from customers where score > 2;"}, want: engine.StepResult{RowCount: 3}, read: "SELECT COUNT(*) FROM big_customers", n: 3},
		{name: "table model replaced", req: engine.StepRequest{StepID: "model.big", Kind: plan.KindModel, Relation: "big_customers", Materialized: plan.MaterializedTable,
			SQL: "select id, name from customers where score > 4"}, want: engine.StepResult{RowCount: 1}, read: "SELECT COUNT(*) FROM big_customers", n: 1},
		{name: "view model", req: engine.StepRequest{StepID: "model.v", Kind: plan.KindModel, Relation: "named", Materialized: plan.MaterializedView,
			SQL: "select * from customers where name is not null -- trailing comment"}, read: "SELECT COUNT(*) FROM named", n: 5},
		{name: "passing test", req: engine.StepRequest{StepID: "test.not_null_id", Kind: plan.KindTest, SQL: "select * from customers where id is null"}, want: engine.StepResult{}},
		{name: "failing test", req: engine.StepRequest{StepID: "test.score", Kind: plan.KindTest, SQL: "select * from customers where score is null or score < 2"}, want: engine.StepResult{Failures: 2}},
		{name: "sql step", req: engine.StepRequest{StepID: "sql.fix", Kind: plan.KindSQL, SQL: "update customers set note = 'none' where note is null; delete from customers where id = 5"},
			want: engine.StepResult{RowsAffected: 3}, read: "SELECT COUNT(*) FROM customers WHERE note = 'none'", n: 2},
		{name: "sql step with a bound parameter", req: engine.StepRequest{StepID: "sql.param", Kind: plan.KindSQL, SQL: "delete from customers where name = ?", Params: []any{"O'Hara, Cy"}},
			want: engine.StepResult{RowsAffected: 1}, read: "SELECT COUNT(*) FROM customers", n: 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.req.RunID, c.req.QueryTag = "r-1", tag(c.req.StepID)
			got, err := w.RunStep(ctx, c.req)
			if err != nil {
				t.Fatal(err)
			}
			if got.RowCount != c.want.RowCount || got.Failures != c.want.Failures || got.RowsAffected != c.want.RowsAffected {
				t.Fatalf("result %+v, want %+v", got, c.want)
			}
			// A failing test keeps its first rows (the customers' columns).
			if fr := got.FailingRows; (c.want.Failures > 0) != (fr != nil) ||
				fr != nil && (len(fr.Rows) != int(min(c.want.Failures, engine.FailingRowsSample)) || len(fr.Columns) == 0 || !strings.EqualFold(fr.Columns[0], "id")) {
				t.Fatalf("failing rows %+v for %d failures", fr, c.want.Failures)
			}
			// Every statement's query id is returned and carries the tag.
			stmts := logged(srv, got.QueryIDs)
			if len(got.QueryIDs) == 0 || len(stmts) != len(got.QueryIDs) {
				t.Fatalf("query ids %v, %d of them in the server's log", got.QueryIDs, len(stmts))
			}
			for _, q := range stmts {
				if q.QueryTag != c.req.QueryTag {
					t.Fatalf("statement %q ran with query tag %q, want %q", q.SQLText, q.QueryTag, c.req.QueryTag)
				}
			}
			if c.read != "" {
				var n int64
				if err := w.DB().QueryRowContext(ctx, c.read).Scan(&n); err != nil || n != c.n {
					t.Fatalf("%s = %d (%v), want %d", c.read, n, err, c.n)
				}
			}
		})
	}
}

func TestWarehouseErrors(t *testing.T) {
	w, _ := openWarehouse(t)
	cases := []struct {
		name string
		req  engine.StepRequest
		code engine.Code
	}{
		{"unknown table", engine.StepRequest{StepID: "model.x", Kind: plan.KindModel, Relation: "x", Materialized: plan.MaterializedTable, SQL: "select * from no_such_table"}, engine.CodeStepFailed},
		{"bad relation name", engine.StepRequest{StepID: "model.x", Kind: plan.KindModel, Relation: `x"; drop table y; --`, SQL: "select 1"}, engine.CodePlanInvalid},
		{"two statements in a model", engine.StepRequest{StepID: "model.x", Kind: plan.KindModel, Relation: "x", SQL: "select 1; select 2"}, engine.CodePlanInvalid},
		{"unknown kind", engine.StepRequest{StepID: "x", Kind: "python"}, engine.CodeInvalidArgument},
		{"missing seed file", engine.StepRequest{StepID: "seed.x", Kind: plan.KindSeed, Relation: "x", SeedPath: "/nonexistent.csv"}, engine.CodePlanInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := w.RunStep(ctx, c.req)
			if engine.CodeOf(err) != c.code || engine.IsTransient(err) {
				t.Fatalf("error %v (transient %v), want code %s", err, engine.IsTransient(err), c.code)
			}
		})
	}
}

// TestWarehouseCancel: cancelling a step aborts its running query at the
// server, and the warehouse stays usable.
func TestWarehouseCancel(t *testing.T) {
	w, srv := openWarehouse(t)
	if _, err := w.RunStep(ctx, engine.StepRequest{StepID: "seed.n", Kind: plan.KindSeed, Relation: "n", SeedPath: seedFile(t, "i\n"+strings.Repeat("1\n", 2000))}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(500*time.Millisecond, cancel)
	t0 := time.Now()
	_, err := w.RunStep(cctx, engine.StepRequest{StepID: "test.slow", Kind: plan.KindTest, QueryTag: tag("test.slow"),
		SQL: "select a.i from n a, n b, n c where a.i + b.i + c.i = 0"})
	took := time.Since(t0)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if took > 5*time.Second {
		t.Fatalf("cancellation took %s", took)
	}
	// The server records the slow statement as cancelled once it stops.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var state string
		for _, q := range srv.QueryLog() {
			if q.QueryTag == tag("test.slow") {
				state = q.Err
			}
		}
		if state == sftest.CodeCanceled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slow query was not aborted at the server (error code %q)", state)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := w.Ping(ctx); err != nil {
		t.Fatalf("ping after cancel: %v", err)
	}
}
