package snowflake_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/store/snowflake"
)

func countRows(t *testing.T, w *snowflake.Warehouse, table string) int {
	t.Helper()
	var n int
	if err := w.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestWarehouseLedgerOnce: a DML sql step commits with its ledger row; the
// same logical attempt again returns the recorded result and repeats
// nothing; a new logical attempt is new work; a step with DDL is not
// ledgered (DDL would commit the transaction).
func TestWarehouseLedgerOnce(t *testing.T) {
	w, _ := openWarehouse(t)
	if _, err := w.DB().ExecContext(ctx, "CREATE TABLE effects (n INTEGER)"); err != nil {
		t.Fatal(err)
	}
	req := engine.StepRequest{RunID: "r-1", StepID: "sql.insert", Kind: plan.KindSQL, SQL: "INSERT INTO effects VALUES (1); INSERT INTO effects VALUES (2)",
		LogicalAttempt: 1, EngineAttempt: 1, Fence: 3, QueryTag: tag("sql.insert")}
	first, err := w.RunStep(ctx, req)
	if err != nil || first.RowsAffected != 2 || first.Ledger != nil || len(first.QueryIDs) != 2 {
		t.Fatalf("first run: %+v %v", first, err)
	}
	req.EngineAttempt = 2
	again, err := w.RunStep(ctx, req)
	if err != nil || again.Ledger == nil || again.RowsAffected != 2 || again.Ledger.EngineAttempt != 1 || again.Ledger.Fence != 3 {
		t.Fatalf("same attempt again: %+v %v, want the recorded result", again, err)
	}
	if len(again.QueryIDs) != 2 || again.QueryIDs[0] != first.QueryIDs[0] {
		t.Fatalf("recorded query ids %v, want %v", again.QueryIDs, first.QueryIDs)
	}
	if n := countRows(t, w, "effects"); n != 2 {
		t.Fatalf("effects = %d rows, want 2", n)
	}
	e, ok, err := w.LookupStep(ctx, "r-1", "sql.insert", 1)
	if err != nil || !ok || e.Result.RowsAffected != 2 || e.CommittedAt.IsZero() {
		t.Fatalf("LookupStep: %+v %v %v", e, ok, err)
	}
	// The fence is the run's own table's (issue 16), not a table all runs
	// share.
	var fence int64
	if err := w.DB().QueryRowContext(ctx, `SELECT MAX(fence) FROM "`+snowflake.FenceTable("r-1")+`" WHERE run_id = 'r-1'`).Scan(&fence); err != nil || fence != 3 {
		t.Fatalf("run r-1's fence table: %d %v, want fence 3", fence, err)
	}
	if _, err := w.DB().ExecContext(ctx, "SELECT 1 FROM dvt_run_fences"); err == nil {
		t.Fatal("dvt_run_fences exists: the warehouse still creates the shared fence table")
	}
	req.LogicalAttempt = 2
	if _, err := w.RunStep(ctx, req); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, w, "effects"); n != 4 {
		t.Fatalf("effects = %d rows after logical attempt 2, want 4", n)
	}
	ddl := engine.StepRequest{RunID: "r-1", StepID: "sql.ddl", Kind: plan.KindSQL, SQL: "CREATE TABLE other (n INTEGER); INSERT INTO other VALUES (1)", LogicalAttempt: 1, Fence: 3}
	if _, err := w.RunStep(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := w.LookupStep(ctx, "r-1", "sql.ddl", 1); ok {
		t.Fatal("a step with DDL has a ledger row; DDL cannot join the ledger's transaction")
	}
}

// TestWarehouseLedgerFence: after a runner with a higher fence committed
// for the run, a stale runner's DML step is LEASE_LOST and writes nothing.
func TestWarehouseLedgerFence(t *testing.T) {
	w, _ := openWarehouse(t)
	if _, err := w.DB().ExecContext(ctx, "CREATE TABLE effects (n INTEGER)"); err != nil {
		t.Fatal(err)
	}
	step := func(id string, fence int64) engine.StepRequest {
		return engine.StepRequest{RunID: "r-1", StepID: id, Kind: plan.KindSQL, SQL: "INSERT INTO effects VALUES (1)", LogicalAttempt: 1, Fence: fence}
	}
	for _, r := range []engine.StepRequest{step("sql.a", 1), step("sql.b", 2)} {
		if _, err := w.RunStep(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	_, err := w.RunStep(ctx, step("sql.c", 1))
	if engine.CodeOf(err) != engine.CodeLeaseLost {
		t.Fatalf("stale fence: %v, want LEASE_LOST", err)
	}
	if n := countRows(t, w, "effects"); n != 2 {
		t.Fatalf("effects = %d rows, want 2", n)
	}
}

// TestWarehouseLedgerSerialisedAsDocumented: two sessions (two runners)
// run the same DML step attempt at once, 12 times; each attempt takes
// effect once and the other session returns the recorded result.
//
// This relies on two documented Snowflake behaviours, which the test
// server reproduces (store/snowflake/sftest locks.go):
//   - "UPDATE, DELETE, and MERGE statements hold locks that generally
//     prevent them from running in parallel with other UPDATE, DELETE, and
//     MERGE statements" and a transaction's locks are held until it commits
//     or rolls back (https://docs.snowflake.com/en/sql-reference/transactions,
//     "Resource locking"): claim_fence, an UPDATE of the run's own fence
//     table, makes the second transaction of the run wait for the first to
//     end;
//   - Snowflake's isolation is READ COMMITTED: a statement sees the data
//     committed before it began (same page, "Isolation level"), so the
//     ledger read after the wait sees the first runner's row.
//
// Snowflake enforces no PRIMARY KEY, so the row is inserted with an
// INSERT … SELECT … WHERE NOT EXISTS (insert_ledger; a MERGE would lock the
// ledger all runs share): a second commit would need both the run's fence
// lock and a missing row.
func TestWarehouseLedgerSerialisedAsDocumented(t *testing.T) {
	w1, srv := openWarehouse(t)
	w2, err := snowflake.OpenWarehouse(ctx, srv.DSN("analytics", "public"), snowflake.WarehouseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w2.Close() })
	if _, err := w1.DB().ExecContext(ctx, "CREATE TABLE effects (step VARCHAR)"); err != nil {
		t.Fatal(err)
	}
	const trials = 12
	for i := range trials {
		id := fmt.Sprintf("sql.s%02d", i)
		var wg sync.WaitGroup
		recorded := make([]bool, 2)
		for k, w := range []*snowflake.Warehouse{w1, w2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := w.RunStep(ctx, engine.StepRequest{RunID: "r-1", StepID: id, Kind: plan.KindSQL,
					SQL: "INSERT INTO effects SELECT '" + id + "'", LogicalAttempt: 1, EngineAttempt: k + 1, Fence: 1})
				if err != nil {
					t.Errorf("%s on session %d: %v", id, k, err)
					return
				}
				recorded[k] = res.Ledger != nil
			}()
		}
		wg.Wait()
		if recorded[0] == recorded[1] {
			t.Errorf("%s: recorded %v, want one execution and one recorded result", id, recorded)
		}
	}
	if n := countRows(t, w1, "effects"); n != trials {
		t.Fatalf("effects = %d rows, want %d (one per attempt)", n, trials)
	}
	var ledgerRows int
	if err := w1.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM dvt_step_ledger WHERE run_id = 'r-1'").Scan(&ledgerRows); err != nil || ledgerRows != trials {
		t.Fatalf("ledger rows %d %v, want %d", ledgerRows, err, trials)
	}
}

// TestWarehouseLedgerIncrementalMerge: an incremental model's merge is DML
// and commits with its ledger row: the same attempt again appends nothing.
func TestWarehouseLedgerIncrementalMerge(t *testing.T) {
	w, _ := openWarehouse(t)
	inc := engine.StepRequest{RunID: "r-1", StepID: "model.events", Kind: plan.KindModel, Relation: "events",
		Materialized: plan.MaterializedIncremental, SQL: "select 1 as id", LogicalAttempt: 1, Fence: 1}
	if _, err := w.RunStep(ctx, inc); err != nil { // first run: the table is built (DDL, not ledgered)
		t.Fatal(err)
	}
	inc.RunID = "r-2" // a later run appends
	for range 2 {
		if _, err := w.RunStep(ctx, inc); err != nil {
			t.Fatal(err)
		}
	}
	if n := countRows(t, w, "events"); n != 2 {
		t.Fatalf("events = %d rows, want 2 (built once, appended once)", n)
	}
	if _, ok, err := w.LookupStep(ctx, "r-2", "model.events", 1); !ok || err != nil {
		t.Fatalf("the merge has no ledger row: %v %v", ok, err)
	}
}
