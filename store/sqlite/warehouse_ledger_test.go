package sqlite

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// TestWarehouseLedger: the shared step-ledger scenario; opening the
// warehouse writes nothing, the ledger appears with the first ledgered step.
func TestWarehouseLedger(t *testing.T) {
	w := openWarehouseT(t)
	if _, ok, err := w.LookupStep(context.Background(), "run-1", "sql.insert", 1); ok || err != nil {
		t.Fatalf("LookupStep on a new warehouse: %v %v, want not found", ok, err)
	}
	storetest.RunWarehouseLedger(t, w)
}

// TestWarehouseLedgerRace: two handles on one file (two runners) run the
// same step attempt at once, many times: each attempt takes effect once,
// and the loser gets the winner's recorded result.
func TestWarehouseLedgerRace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wh.db")
	ctx := context.Background()
	var ws [2]*Warehouse
	for i := range ws {
		w, err := OpenWarehouse(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		ws[i] = w
	}
	whRun(t, ws[0], engine.StepRequest{StepID: "setup", Kind: engine.KindSQL, SQL: "CREATE TABLE effects (step TEXT)"})
	const attempts = 20
	for i := range attempts {
		id := "sql.s" + string(rune('a'+i))
		var wg sync.WaitGroup
		recorded := make([]bool, len(ws))
		for k, w := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := w.RunStep(ctx, engine.StepRequest{RunID: "run-1", StepID: id, Kind: engine.KindSQL,
					SQL: "INSERT INTO effects VALUES ('" + id + "')", LogicalAttempt: 1, EngineAttempt: k + 1, Fence: 1})
				if err != nil {
					t.Errorf("%s on handle %d: %v", id, k, err)
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
	if got := whQueryStrings(t, ws[0], "SELECT count(*) FROM effects"); got[0] != "20" {
		t.Fatalf("effects = %s rows, want %d", got[0], attempts)
	}
}
