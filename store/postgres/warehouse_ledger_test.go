package postgres_test

import (
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/store/postgres"
	"github.com/dvtrun/dvtrun/store/postgres/pgtest"
	"github.com/dvtrun/dvtrun/store/storetest"
)

func TestWarehouseLedger(t *testing.T) {
	storetest.RunWarehouseLedger(t, openWarehouse(t, pgtest.DSN(t), postgres.WarehouseOptions{}))
}

// TestWarehouseLedgerDDL: on Postgres a sql step's DDL joins the ledger's
// transaction too (on Snowflake it would commit it): the step runs once.
func TestWarehouseLedgerDDL(t *testing.T) {
	w := openWarehouse(t, pgtest.DSN(t), postgres.WarehouseOptions{})
	req := engine.StepRequest{RunID: "run-1", StepID: "sql.ddl", Kind: plan.KindSQL, SQL: "CREATE TABLE made (n int); INSERT INTO made VALUES (1)",
		LogicalAttempt: 1, EngineAttempt: 1, Fence: 1}
	if first := whRun(t, w, req); first.Ledger != nil || first.RowsAffected != 1 {
		t.Fatalf("first run: %+v", first)
	}
	req.EngineAttempt = 2
	if again := whRun(t, w, req); again.Ledger == nil || again.Ledger.EngineAttempt != 1 {
		t.Fatalf("second run of the same attempt: %+v, want the recorded result (a CREATE TABLE run again would fail)", again)
	}
	if got := whString(t, w, "SELECT count(*) FROM made"); got != "1" {
		t.Fatalf("made = %s rows, want 1", got)
	}
}

// TestWarehouseLedgerRace: two warehouses on one database (two runners);
// steps of one runner with distinct ids run side by side (the fence is a
// shared claim).
func TestWarehouseLedgerRace(t *testing.T) {
	dsn := pgtest.DSN(t)
	storetest.RunWarehouseLedgerRace(t, [2]storetest.LedgerWarehouse{
		openWarehouse(t, dsn, postgres.WarehouseOptions{}), openWarehouse(t, dsn, postgres.WarehouseOptions{})})
}
