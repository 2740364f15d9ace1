package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/store/postgres"
	"github.com/dvtrun/dvtrun/store/postgres/pgtest"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// oneDatabase is a store DSN and a warehouse DSN on one database: the
// same schema, or two schemas chosen by search_path.
type oneDatabase struct {
	name                  string
	storeDSN, warehouse   func(dsn string) string
	storeSchema, whSchema string
}

var oneDatabaseCases = []oneDatabase{
	{name: "same schema", storeDSN: same, warehouse: same, storeSchema: "public", whSchema: "public"},
	{name: "two schemas by search_path",
		storeDSN:    func(dsn string) string { return dsn + " search_path=dvt_state" },
		warehouse:   func(dsn string) string { return dsn + " search_path=analytics" },
		storeSchema: "dvt_state", whSchema: "analytics"},
}

func same(dsn string) string { return dsn }

// useBoth does what a run does with its store and its warehouse: a run
// bootstrapped in the store, a ledgered step in the warehouse.
func useBoth(t *testing.T, s *postgres.Store, w *postgres.Warehouse, runID string) {
	t.Helper()
	f := storetest.NewFixture()
	f.Meta.RunID = runID
	f.Bootstrap(t, s)
	whRun(t, w, engine.StepRequest{RunID: runID, StepID: "sql.ins", Kind: plan.KindSQL,
		SQL: "CREATE TABLE IF NOT EXISTS made (n int); INSERT INTO made VALUES (1)", LogicalAttempt: 1, EngineAttempt: 1, Fence: 1})
}

// openOrder opens the store and the warehouse of c on dsn: store first,
// warehouse first, or both at once (as dvtrun run does).
func openOrder(ctx context.Context, c oneDatabase, dsn, order string) (*postgres.Store, *postgres.Warehouse, error) {
	var (
		s *postgres.Store
		w *postgres.Warehouse
	)
	openS := func() (err error) { s, err = postgres.Open(ctx, c.storeDSN(dsn), postgres.Options{}); return err }
	openW := func() (err error) {
		w, err = postgres.OpenWarehouse(ctx, c.warehouse(dsn), postgres.WarehouseOptions{})
		return err
	}
	if err := storetest.OpenInOrder(order, openS, openW); err != nil {
		if s != nil {
			s.Close()
		}
		if w != nil {
			w.Close()
		}
		return nil, nil, err
	}
	return s, w, nil
}

// TestOneDatabase: store and warehouse on one Postgres database, in one
// schema or two, work from the first command whichever opens first, and
// from every later one; the store's tables are where its search_path
// says, the warehouse's where its own does.
func TestOneDatabase(t *testing.T) {
	ctx := context.Background()
	for _, c := range oneDatabaseCases {
		for _, order := range []string{"store first", "warehouse first", "at once"} {
			t.Run(c.name+"/"+order, func(t *testing.T) {
				dsn := pgtest.DSN(t)
				for cmd := range 2 {
					s, w, err := openOrder(ctx, c, dsn, order)
					if err != nil {
						t.Fatalf("command %d: %v", cmd+1, err)
					}
					useBoth(t, s, w, fmt.Sprintf("run-%d", cmd))
					s.Close()
					w.Close()
				}
				db, err := sql.Open("pgx", dsn)
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				where := func(table string) string {
					var schema string
					if err := db.QueryRow(`SELECT table_schema FROM information_schema.tables WHERE table_name = $1`, table).Scan(&schema); err != nil {
						t.Fatalf("%s: %v", table, err)
					}
					return schema
				}
				if got := where("dvt_run_events"); got != c.storeSchema {
					t.Errorf("the store's tables are in schema %s, want %s", got, c.storeSchema)
				}
				if got := where("dvt_step_ledger"); got != c.whSchema {
					t.Errorf("the warehouse's ledger is in schema %s, want %s", got, c.whSchema)
				}
			})
		}
	}
}

// TestOneDatabaseRace: processes racing their first open of one fresh
// database (several stores and warehouses at once, as concurrent `dvtrun
// run`s do), repeated on a new database each time: every open succeeds and
// the store works.
func TestOneDatabaseRace(t *testing.T) {
	ctx := context.Background()
	const tries, each = 8, 3
	for _, c := range oneDatabaseCases {
		t.Run(c.name, func(t *testing.T) {
			for try := range tries {
				dsn := pgtest.DSN(t)
				start := make(chan struct{})
				errs := make(chan error, 2*each)
				var wg sync.WaitGroup
				for g := range 2 * each {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						if g%2 == 0 {
							s, err := postgres.Open(ctx, c.storeDSN(dsn), postgres.Options{})
							if err == nil {
								_, err = s.ListRuns(ctx, storeFilter())
								s.Close()
							}
							errs <- err
							return
						}
						w, err := postgres.OpenWarehouse(ctx, c.warehouse(dsn), postgres.WarehouseOptions{})
						if err == nil {
							w.Close()
						}
						errs <- err
					}()
				}
				close(start)
				wg.Wait()
				close(errs)
				for err := range errs {
					if err != nil {
						t.Fatalf("try %d: a first open racing the others: %v", try+1, err)
					}
				}
			}
		})
	}
}

// TestDatabaseWithWarehouseTablesOnly: a database whose first user was the
// warehouse (or that an earlier version refused after the warehouse won
// the race) holds only the warehouse's tables: it is a store not created
// yet, not someone else's database. A schema with a table of its own is
// still refused.
func TestDatabaseWithWarehouseTablesOnly(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	w := openWarehouse(t, dsn, postgres.WarehouseOptions{})
	whRun(t, w, engine.StepRequest{RunID: "r", StepID: "sql.ins", Kind: plan.KindSQL, SQL: "SELECT 1", LogicalAttempt: 1, EngineAttempt: 1, Fence: 1})
	// A read command does not create the store, and says there is none.
	if _, err := postgres.Open(ctx, dsn, postgres.Options{MustExist: true}); engine.CodeOf(err) != engine.CodeInvalidArgument {
		t.Fatalf("read open of a database with the warehouse's tables only: %v, want INVALID_ARGUMENT (no state store)", err)
	}
	s, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatalf("open of a database with the warehouse's tables only: %v", err)
	}
	useBoth(t, s, w, "run-after")
	s.Close()

	other := pgtest.DSN(t)
	db, err := sql.Open("pgx", other)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE customers (id int)`); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Open(ctx, other, postgres.Options{}); engine.CodeOf(err) != engine.CodeStoreCorrupt {
		t.Fatalf("open of someone else's schema: %v, want STORE_CORRUPT", err)
	}
}
