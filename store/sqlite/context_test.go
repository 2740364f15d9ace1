package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/dvtrun/dvtrun/engine/runner/runnertest"
)

// TestContextPlan runs plans/context on SQLite with a dev and a prod
// warehouse, each its own file holding its own raw orders: refs and
// sources are one-part names, resolved in the warehouse file of the run.
func TestContextPlan(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := Open(ctx, filepath.Join(dir, "state.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	open := func(name string) *Warehouse {
		w, err := OpenWarehouse(ctx, filepath.Join(dir, name+".db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		if _, err := w.DB().ExecContext(ctx, "create table orders (id integer, region text, amount integer, ordered_at text)"); err != nil {
			t.Fatal(err)
		}
		for _, o := range runnertest.ContextOrders {
			if _, err := w.DB().ExecContext(ctx, "insert into orders values (?, ?, ?, ?)", o[0], o[1], o[2], o[3]); err != nil {
				t.Fatal(err)
			}
		}
		return w
	}
	dev, prod := open("dev"), open("prod")
	runnertest.RunContextPlan(t, st, filepath.Join("..", "..", "plans", "context", "plan.yaml"), dev, prod)
}
