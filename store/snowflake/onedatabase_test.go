package snowflake_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/store"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// TestOneDatabase: store and warehouse on one Snowflake database and
// schema work from the first command whichever opens first, or both at
// once (dvtrun run opens them together), and from the next command.
func TestOneDatabase(t *testing.T) {
	for _, order := range []string{"store first", "warehouse first", "at once"} {
		t.Run(order, func(t *testing.T) {
			srv := sftest.Start(t)
			dsn := srv.DSN("dvt", "public")
			for cmd := range 2 {
				s, w, err := openSnowflakeBoth(dsn, order)
				if err != nil {
					t.Fatalf("command %d: %v", cmd+1, err)
				}
				f := storetest.NewFixture()
				f.Meta.RunID = fmt.Sprintf("run-%d", cmd)
				f.Bootstrap(t, s)
				if _, err := w.RunStep(ctx, engine.StepRequest{RunID: f.Meta.RunID, StepID: "sql.n", Kind: plan.KindSQL,
					SQL: "SELECT 1", LogicalAttempt: 1, EngineAttempt: 1, Fence: 1}); err != nil {
					t.Fatalf("command %d: step: %v", cmd+1, err)
				}
				s.Close()
				w.Close()
			}
		})
	}
}

// TestOneDatabaseRace: several stores and warehouses racing their first
// open of one fresh schema, repeated on a new schema each time: every open
// succeeds and the store works.
func TestOneDatabaseRace(t *testing.T) {
	srv := sftest.Start(t)
	const tries, each = 6, 2
	for try := range tries {
		dsn := srv.DSN("dvt", fmt.Sprintf("race_%d", try))
		start := make(chan struct{})
		errs := make(chan error, 2*each)
		var wg sync.WaitGroup
		for g := range 2 * each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if g%2 == 0 {
					s, err := snowflake.Open(ctx, dsn, snowflake.Options{})
					if err == nil {
						_, err = s.ListRuns(ctx, store.RunFilter{})
						s.Close()
					}
					errs <- err
					return
				}
				w, err := snowflake.OpenWarehouse(ctx, dsn, snowflake.WarehouseOptions{})
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
}

func openSnowflakeBoth(dsn, order string) (*snowflake.Store, *snowflake.Warehouse, error) {
	var (
		s *snowflake.Store
		w *snowflake.Warehouse
	)
	openS := func() (err error) { s, err = snowflake.Open(ctx, dsn, snowflake.Options{}); return err }
	openW := func() (err error) {
		w, err = snowflake.OpenWarehouse(ctx, dsn, snowflake.WarehouseOptions{})
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
