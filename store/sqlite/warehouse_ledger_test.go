package sqlite

import (
	"context"
	"path/filepath"
	"testing"

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

// TestWarehouseLedgerRace: two handles on one file (two runners).
func TestWarehouseLedgerRace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wh.db")
	var ws [2]storetest.LedgerWarehouse
	for i := range ws {
		w, err := OpenWarehouse(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		ws[i] = w
	}
	storetest.RunWarehouseLedgerRace(t, ws)
}
