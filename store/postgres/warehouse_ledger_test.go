package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
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
	req := engine.StepRequest{RunID: "run-1", StepID: "sql.ddl", Kind: engine.KindSQL, SQL: "CREATE TABLE made (n int); INSERT INTO made VALUES (1)",
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

// TestWarehouseLedgerRace: two warehouses on one database (two runners) run
// the same step attempt at once, many times: each attempt takes effect
// once, and the loser gets the winner's recorded result. Steps of one
// runner with distinct ids run side by side (the fence is a shared claim).
func TestWarehouseLedgerRace(t *testing.T) {
	dsn := pgtest.DSN(t)
	ws := [2]*postgres.Warehouse{openWarehouse(t, dsn, postgres.WarehouseOptions{}), openWarehouse(t, dsn, postgres.WarehouseOptions{})}
	whRun(t, ws[0], engine.StepRequest{StepID: "setup", Kind: engine.KindSQL, SQL: "CREATE TABLE effects (step TEXT)"})
	ctx := context.Background()
	const attempts = 20
	for i := range attempts {
		id := fmt.Sprintf("sql.s%02d", i)
		var wg sync.WaitGroup
		recorded := make([]bool, len(ws))
		for k, w := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := w.RunStep(ctx, engine.StepRequest{RunID: "run-1", StepID: id, Kind: engine.KindSQL,
					SQL: "INSERT INTO effects VALUES ('" + id + "')", LogicalAttempt: 1, EngineAttempt: k + 1, Fence: 1})
				if err != nil {
					t.Errorf("%s on warehouse %d: %v", id, k, err)
					return
				}
				recorded[k] = res.Ledger != nil
			}()
		}
		wg.Wait()
		if recorded[0] == recorded[1] {
			t.Errorf("%s: recorded flags %v, want exactly one execution and one replay", id, recorded)
		}
	}
	if got := whString(t, ws[0], "SELECT count(*) FROM effects"); got != "20" {
		t.Fatalf("effects = %s rows, want %d", got, attempts)
	}
	if got := whString(t, ws[0], "SELECT count(DISTINCT step) FROM effects"); got != "20" {
		t.Fatalf("distinct steps %s, want %d", got, attempts)
	}
}
