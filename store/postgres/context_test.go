package postgres_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/dvtrun/dvtrun/engine/runner/runnertest"
	"github.com/dvtrun/dvtrun/store/postgres"
	"github.com/dvtrun/dvtrun/store/postgres/pgtest"
)

// TestContextPlan runs plans/context on Postgres with a dev and a prod
// warehouse in two schemas of one database (search_path), reading one
// source schema: refs render "schema"."name" of the run's warehouse.
func TestContextPlan(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	st, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	setup := openWarehouse(t, dsn, postgres.WarehouseOptions{})
	for _, q := range []string{`CREATE SCHEMA dev`, `CREATE SCHEMA prod`, `CREATE SCHEMA "RAW"`, `CREATE TABLE "RAW".orders (id integer, region text, amount integer, ordered_at text)`} {
		if _, err := setup.DB().ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, o := range runnertest.ContextOrders {
		if _, err := setup.DB().ExecContext(ctx, `INSERT INTO "RAW".orders VALUES ($1, $2, $3, $4)`, o[0], o[1], o[2], o[3]); err != nil {
			t.Fatal(err)
		}
	}
	dev := openWarehouse(t, dsn+" search_path=dev", postgres.WarehouseOptions{})
	prod := openWarehouse(t, dsn+" search_path=prod", postgres.WarehouseOptions{})
	runnertest.RunContextPlan(t, st, filepath.Join("..", "..", "plans", "context", "plan.yaml"), dev, prod)
	if got := dev.Relation("daily_orders"); got != `"dev"."daily_orders"` {
		t.Errorf("dev names daily_orders %s", got)
	}
	for schema, want := range map[string]string{"dev": "2", "prod": "1"} {
		if got := whString(t, setup, "SELECT count(*) FROM "+schema+".daily_orders"); got != want {
			t.Errorf("%s.daily_orders has %s rows, want %s", schema, got, want)
		}
	}
}
