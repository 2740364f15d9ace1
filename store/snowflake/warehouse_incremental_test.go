package snowflake_test

import (
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// TestWarehouseIncremental runs the shared incremental scenario through
// gosnowflake on the test server (DuckDB executes the MERGE).
func TestWarehouseIncremental(t *testing.T) {
	w, _ := openWarehouse(t)
	storetest.RunWarehouseIncremental(t, w)
}

// TestWarehouseSeedData: a seed loads its request's bytes, not a file.
func TestWarehouseSeedData(t *testing.T) {
	w, _ := openWarehouse(t)
	storetest.RunWarehouseSeedData(t, w)
}

// TestRelationTypeAsDocumented pins what the incremental build relies on
// and the test server can only imitate: Snowflake's
// INFORMATION_SCHEMA.TABLES has a row per table and view of the current
// database, TABLE_TYPE 'BASE TABLE' for a table and 'VIEW' for a view,
// TABLE_NAME as stored (upper case for an unquoted name)
// (https://docs.snowflake.com/en/sql-reference/info-schema/tables);
// INFORMATION_SCHEMA.COLUMNS has a row per column with COLUMN_NAME and
// ORDINAL_POSITION (…/info-schema/columns); and
// CURRENT_DATABASE()/CURRENT_SCHEMA() name the session's database and
// schema. A view in the incremental model's place is replaced by a table.
func TestRelationTypeAsDocumented(t *testing.T) {
	w, srv := openWarehouse(t)
	q, err := sqlfiles.Queries(sqlfiles.Snowflake, "warehouse.sql")
	if err != nil {
		t.Fatal(err)
	}
	run := func(req engine.StepRequest) engine.StepResult {
		t.Helper()
		res, err := w.RunStep(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", req.StepID, err)
		}
		return res
	}
	run(engine.StepRequest{StepID: "model.t", Kind: plan.KindModel, Relation: "doc_t", Materialized: plan.MaterializedTable, SQL: "select 1 as id"})
	run(engine.StepRequest{StepID: "model.v", Kind: plan.KindModel, Relation: "doc_v", Materialized: plan.MaterializedView, SQL: "select 1 as id"})
	for name, want := range map[string]string{"DOC_T": "BASE TABLE", "DOC_V": "VIEW", "doc_t": ""} {
		var kind, col string
		err := w.DB().QueryRowContext(ctx, q["relation_columns"], name).Scan(&kind, &col)
		if want == "" {
			if !errors.Is(err, sql.ErrNoRows) {
				t.Errorf("%s (not the stored spelling): %q %v, want no row", name, kind, err)
			}
			continue
		}
		// Snowflake stores the unquoted column as ID; the test server keeps
		// DuckDB's spelling (id). The warehouse quotes the name as returned,
		// which is right for either.
		if err != nil || kind != want || !strings.EqualFold(col, "ID") {
			t.Errorf("%s: TABLE_TYPE %q, column %q (%v), want %q and ID", name, kind, col, err, want)
		}
	}
	inc := engine.StepRequest{StepID: "model.v", Kind: plan.KindModel, Relation: "doc_v", Materialized: plan.MaterializedIncremental, SQL: "select 2 as id", UniqueKey: []string{"id"}}
	if res := run(inc); res.RowCount != 1 {
		t.Fatalf("incremental over a view: %+v", res)
	}
	inc.SQL = "select 3 as id"
	srv.ResetCounters()
	if res := run(inc); res.RowCount != 2 || res.RowsAffected != 1 {
		t.Errorf("second run should merge into the table built in the view's place: %+v", res)
	}
	// Round trips are what a step costs on Snowflake: the relation and its
	// columns, the duplicate-key check, the MERGE, the row count.
	if n := srv.QueryRequests() + srv.ResultRequests(); n > 4 {
		t.Errorf("an incremental merge took %d requests, want at most 4", n)
	}
}
