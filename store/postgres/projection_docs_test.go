package postgres_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/eventgen"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// TestAuditDocQueriesMatchSQLite runs every query of docs/reference/sql.md on the
// Postgres views and on the SQLite views over the same 300 generated runs,
// and requires the same rows. The SQLite results are themselves compared
// with the Go reducer (store/sqlite TestAuditDocQueries), so the documented
// queries mean the same on both.
func TestAuditDocQueriesMatchSQLite(t *testing.T) {
	queries := storetest.DocQueries(t, "../../docs/reference/sql.md")
	streams := map[string][]engine.RunEventRecord{}
	for seed := uint64(1); seed <= 300; seed++ {
		id := fmt.Sprintf("run-%06d", seed)
		tenant := "t1"
		if seed > 150 {
			tenant = "t2"
		}
		streams[id] = eventgen.Stream(seed, id, eventgen.Options{Duplicates: true, AllowGaps: true, Noise: 0.2, TenantID: tenant})
	}
	pg := openProjectionStore(t)
	insertRaw(t, pg, streams)
	lite, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "state.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lite.Close() })
	storetest.LoadSQLiteLog(t, lite.DB().DB, streams)
	for _, q := range queries {
		name, text := q[0], q[1]
		t.Run(name, func(t *testing.T) {
			want := storetest.DocRows(t, lite.DB().DB, text)
			got := storetest.DocRows(t, pg.DB().DB, text)
			if len(want) == 0 {
				t.Fatalf("%s returns no rows on SQLite: the fixture does not exercise it", name)
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("%s: Postgres %d rows, SQLite %d\npostgres:\n%s\nsqlite:\n%s", name, len(got), len(want), strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}
