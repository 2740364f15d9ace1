package storetest

import (
	"fmt"
	"sync"
)

// OpenInOrder makes a store's and a warehouse's first open on one
// database in the order named: "store first", "warehouse first", or at
// once (anything else) — the orders a team meets on its first commands.
// The error names which of the two failed.
func OpenInOrder(order string, openStore, openWarehouse func() error) error {
	var serr, werr error
	switch order {
	case "store first":
		serr = openStore()
		werr = openWarehouse()
	case "warehouse first":
		werr = openWarehouse()
		serr = openStore()
	default:
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); serr = openStore() }()
		go func() { defer wg.Done(); werr = openWarehouse() }()
		wg.Wait()
	}
	if serr != nil || werr != nil {
		return fmt.Errorf("store: %v; warehouse: %v", serr, werr)
	}
	return nil
}
