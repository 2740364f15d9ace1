package snowflake_test

import (
	"path/filepath"
	"testing"

	"github.com/dvtrun/dvtrun/engine/runner/runnertest"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
)

// TestContextPlan runs plans/context on the Snowflake test server with a
// dev and a prod warehouse in two schemas of one database, reading one
// source schema (RAW): refs render DB.SCHEMA.NAME of the run's warehouse,
// so each environment's tables land in its own schema.
func TestContextPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Snowflake-protocol test server")
	}
	srv := sftest.Start(t)
	st := openStore(t, srv.DSN("dvt", "state"), snowflake.Options{})
	t.Cleanup(func() { st.Close() })
	open := func(schema string) *snowflake.Warehouse {
		w, err := snowflake.OpenWarehouse(ctx, srv.DSN("analytics", schema), snowflake.WarehouseOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		return w
	}
	dev, prod := open("dev"), open("prod")
	for _, q := range []string{"CREATE SCHEMA IF NOT EXISTS RAW", "CREATE TABLE RAW.ORDERS (id INTEGER, region VARCHAR, amount INTEGER, ordered_at VARCHAR)"} {
		if _, err := dev.DB().ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, o := range runnertest.ContextOrders {
		if _, err := dev.DB().ExecContext(ctx, "INSERT INTO RAW.ORDERS VALUES (?, ?, ?, ?)", o[0], o[1], o[2], o[3]); err != nil {
			t.Fatal(err)
		}
	}
	runnertest.RunContextPlan(t, st, filepath.Join("..", "..", "plans", "context", "plan.yaml"), dev, prod)
	if got := dev.Relation("daily_orders"); got != `"ANALYTICS"."DEV"."DAILY_ORDERS"` {
		t.Errorf("dev names daily_orders %s", got)
	}
	// Each environment's tables are in its own schema, whatever session
	// reads them.
	for schema, want := range map[string]int{"DEV": 2, "PROD": 1} {
		if n := countRows(t, prod, "ANALYTICS."+schema+".DAILY_ORDERS"); n != want {
			t.Errorf("ANALYTICS.%s.DAILY_ORDERS has %d rows, want %d", schema, n, want)
		}
	}
}
