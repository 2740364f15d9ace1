package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/store/postgres"
	"github.com/dvtrun/dvtrun/store/postgres/pgtest"
	"github.com/dvtrun/dvtrun/store/storetest"
)

func openWarehouse(t *testing.T, dsn string, opts postgres.WarehouseOptions) *postgres.Warehouse {
	t.Helper()
	w, err := postgres.OpenWarehouse(context.Background(), dsn, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func whRun(t *testing.T, w *postgres.Warehouse, req engine.StepRequest) engine.StepResult {
	t.Helper()
	res, err := w.RunStep(context.Background(), req)
	if err != nil {
		t.Fatalf("%s: %v", req.StepID, err)
	}
	return res
}

// whString is the first column of q's rows, as text, joined by spaces.
func whString(t *testing.T, w *postgres.Warehouse, q string) string {
	t.Helper()
	rows, err := w.DB().Query(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s sql.NullString
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s.String)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, " ")
}

func TestWarehouseConformance(t *testing.T) {
	t.Run("incremental", func(t *testing.T) {
		storetest.RunWarehouseIncremental(t, openWarehouse(t, pgtest.DSN(t), postgres.WarehouseOptions{}))
	})
	t.Run("seed data", func(t *testing.T) {
		storetest.RunWarehouseSeedData(t, openWarehouse(t, pgtest.URL(t), postgres.WarehouseOptions{}))
	})
}

func TestWarehouseSteps(t *testing.T) {
	w := openWarehouse(t, pgtest.DSN(t), postgres.WarehouseOptions{})
	seed := []byte("id,name,score\n1,ann,1.5\n2,bob,\n3,,2\n")
	res := whRun(t, w, engine.StepRequest{StepID: "seed.people", Kind: plan.KindSeed, Relation: "people", SeedData: seed})
	if res.RowCount != 3 || res.RowsAffected != 3 {
		t.Fatalf("seed: %+v, want 3 rows", res)
	}
	if got := whString(t, w, "select format_type(atttypid, atttypmod) from pg_attribute where attrelid = 'people'::regclass and attnum > 0 order by attnum"); got != "bigint text numeric" {
		t.Errorf("seed column types %q", got)
	}
	if got := whString(t, w, "select coalesce(name, 'NULL') || ':' || coalesce(score::text, 'NULL') from people order by id"); got != "ann:1.5 bob:NULL NULL:2" {
		t.Errorf("seed rows %q (empty CSV fields are NULL)", got)
	}
	cases := []struct {
		name string
		req  engine.StepRequest
		want engine.StepResult
		rows string // select of the built relation, when set
	}{
		{"table", engine.StepRequest{StepID: "model.t", Kind: plan.KindModel, Relation: "T", Materialized: plan.MaterializedTable, SQL: "select id from people where id > ?;", Params: []any{1}},
			engine.StepResult{RowCount: 2}, "select id::text from t order by id"},
		{"view is the default", engine.StepRequest{StepID: "model.v", Kind: plan.KindModel, Relation: "v", SQL: "select name from people where name is not null -- trailing comment"},
			engine.StepResult{}, "select name from v order by 1"},
		{"schema-qualified table", engine.StepRequest{StepID: "model.mart", Kind: plan.KindModel, Relation: "analytics.mart", Materialized: plan.MaterializedTable, SQL: `select count(*) as n from "public"."people"`},
			engine.StepResult{RowCount: 1}, "select n::text from analytics.mart"},
		{"sql statements with placeholders numbered per statement", engine.StepRequest{StepID: "sql.s", Kind: plan.KindSQL,
			SQL: "create table log (n int, s text); insert into log values (?, '?'); insert into log select ?, $$a;?$$ from people /* ?; */", Params: []any{7}},
			engine.StepResult{RowsAffected: 4}, "select n || s from log order by s"},
		{"passing test", engine.StepRequest{StepID: "test.ok", Kind: plan.KindTest, SQL: "select * from people where id > ?", Params: []any{10}}, engine.StepResult{}, ""},
		{"failing test", engine.StepRequest{StepID: "test.fail", Kind: plan.KindTest, SQL: "select id, name from people where score is null or name is null order by id"}, engine.StepResult{Failures: 2}, ""},
	}
	wantRows := map[string]string{"table": "2 3", "view is the default": "ann bob", "schema-qualified table": "3",
		"sql statements with placeholders numbered per statement": "7? 7a;? 7a;? 7a;?"}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := whRun(t, w, c.req)
			if res.RowCount != c.want.RowCount || res.RowsAffected != c.want.RowsAffected || res.Failures != c.want.Failures {
				t.Fatalf("result %+v, want %+v", res, c.want)
			}
			if c.rows != "" {
				if got := whString(t, w, c.rows); got != wantRows[c.name] {
					t.Errorf("built %q, want %q", got, wantRows[c.name])
				}
			}
			if c.want.Failures > 0 && (res.FailingRows == nil || len(res.FailingRows.Rows) != 2 || res.FailingRows.Columns[1] != "name") {
				t.Errorf("failing rows %+v", res.FailingRows)
			}
		})
	}
}

func TestWarehouseStepErrors(t *testing.T) {
	w := openWarehouse(t, pgtest.DSN(t), postgres.WarehouseOptions{})
	whRun(t, w, engine.StepRequest{StepID: "seed.base", Kind: plan.KindSeed, Relation: "base", SeedData: []byte("id\n1\n2\n")})
	tests := []struct {
		name string
		req  engine.StepRequest
		code engine.Code
		want string
	}{
		{"model syntax error", engine.StepRequest{StepID: "model.m", Kind: plan.KindModel, Relation: "m", Materialized: "table", SQL: "selec 1"}, engine.CodeStepFailed, "step model.m on the Postgres warehouse"},
		{"view over a missing table", engine.StepRequest{StepID: "model.v", Kind: plan.KindModel, Relation: "v", SQL: "select * from missing_table"}, engine.CodeStepFailed, "missing_table"},
		{"failing table build keeps the old table", engine.StepRequest{StepID: "model.base", Kind: plan.KindModel, Relation: "base", Materialized: "table", SQL: "select 1/0 as id"}, engine.CodeStepFailed, "division by zero"},
		{"model with two statements", engine.StepRequest{StepID: "model.two", Kind: plan.KindModel, Relation: "two", Materialized: "table", SQL: "select 1; drop table base"}, engine.CodePlanInvalid, "several statements"},
		{"relation name that would need splicing", engine.StepRequest{StepID: "model.x", Kind: plan.KindModel, Relation: `x"; drop table base; --`, SQL: "select 1"}, engine.CodePlanInvalid, "not a valid identifier"},
		{"three-part relation", engine.StepRequest{StepID: "model.x", Kind: plan.KindModel, Relation: "db.s.x", SQL: "select 1"}, engine.CodePlanInvalid, "more than two parts"},
		{"reserved relation prefix", engine.StepRequest{StepID: "model.x", Kind: plan.KindModel, Relation: "dvt_tmp__x", SQL: "select 1"}, engine.CodePlanInvalid, "reserved prefix"},
		{"sql step with COMMIT", engine.StepRequest{StepID: "sql.c", Kind: plan.KindSQL, SQL: "delete from base; commit; insert into base values (3)"}, engine.CodePlanInvalid, `"commit" controls the transaction`},
		{"DDL then a failure rolls back", engine.StepRequest{StepID: "sql.s", Kind: plan.KindSQL, SQL: "delete from base; create table made (a int); insert into nowhere values (1)"}, engine.CodeStepFailed, "nowhere"},
		{"unknown kind", engine.StepRequest{StepID: "x.y", Kind: "snapshot"}, engine.CodeInvalidArgument, "unknown kind"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := w.RunStep(context.Background(), tc.req)
			if engine.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.want) || engine.IsTransient(err) {
				t.Errorf("got %v (code %s, transient %v), want code %s and %q", err, engine.CodeOf(err), engine.IsTransient(err), tc.code, tc.want)
			}
		})
	}
	// None of the failures touched base or left anything behind: DDL is
	// transactional.
	if got := whString(t, w, "select string_agg(id::text, ',' order by id) from base"); got != "1,2" {
		t.Errorf("base = %q after failed steps", got)
	}
	if got := whString(t, w, "select count(*) from pg_class where relname in ('made', 'm', 'v', 'two') or relname like 'dvt_tmp%'"); got != "0" {
		t.Errorf("%s relations left by failed steps", got)
	}
}

// TestWarehouseReplaceKeepsViews: a table rebuilt with the same columns
// keeps the views that read it (its rows are replaced in place); with other
// columns it goes with its views, as in dbt-postgres.
func TestWarehouseReplaceKeepsViews(t *testing.T) {
	w := openWarehouse(t, pgtest.DSN(t), postgres.WarehouseOptions{})
	whRun(t, w, engine.StepRequest{StepID: "seed.raw", Kind: plan.KindSeed, Relation: "raw", SeedData: []byte("id\n1\n")})
	whRun(t, w, engine.StepRequest{StepID: "model.stg", Kind: plan.KindModel, Relation: "stg", SQL: "select id * 10 as id10 from raw"})
	whRun(t, w, engine.StepRequest{StepID: "seed.raw", Kind: plan.KindSeed, Relation: "raw", SeedData: []byte("id\n2\n3\n")})
	if got := whString(t, w, "select id10::text from stg order by 1"); got != "20 30" {
		t.Fatalf("view over the rebuilt seed reads %q, want 20 30", got)
	}
	whRun(t, w, engine.StepRequest{StepID: "model.stg", Kind: plan.KindModel, Relation: "stg", SQL: "select id * 100 as id10, 'x' as extra from raw"})
	if got := whString(t, w, "select id10::text || extra from stg order by 1"); got != "200x 300x" {
		t.Fatalf("replaced view reads %q", got)
	}
	whRun(t, w, engine.StepRequest{StepID: "seed.raw", Kind: plan.KindSeed, Relation: "raw", SeedData: []byte("id,name\n4,d\n")})
	if got := whString(t, w, "select count(*) from pg_class where relname = 'stg'"); got != "0" {
		t.Errorf("a view over a table whose columns changed should go with it (CASCADE); pg_class has %s", got)
	}
}

// TestWarehouseSession: a step's session carries application_name naming
// run, step and attempt, and statement_timeout from its deadline, for its
// transaction only.
func TestWarehouseSession(t *testing.T) {
	w := openWarehouse(t, pgtest.DSN(t), postgres.WarehouseOptions{})
	whRun(t, w, engine.StepRequest{StepID: "sql.setup", Kind: plan.KindSQL, SQL: "create table seen (app text, timeout text)"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	record := "insert into seen select current_setting('application_name'), current_setting('statement_timeout')"
	if _, err := w.RunStep(ctx, engine.StepRequest{RunID: "01JRUN", StepID: "sql.seen", Kind: plan.KindSQL, SQL: record, LogicalAttempt: 1, EngineAttempt: 2, Fence: 1}); err != nil {
		t.Fatal(err)
	}
	whRun(t, w, engine.StepRequest{StepID: "sql.again", Kind: plan.KindSQL, SQL: record})
	got := whString(t, w, "select app || '|' || timeout from seen order by app desc")
	if want := "dvtrun sql.again|0 dvtrun 01JRUN sql.seen #2|"; !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "min") && !strings.HasSuffix(got, "s") {
		t.Errorf("sessions saw %q, want %q followed by the hour's timeout", got, want)
	}
	if got := whString(t, w, "select current_setting('application_name')"); got != "dvtrun warehouse" {
		t.Errorf("application_name outside a step is %q", got)
	}
}

func TestWarehouseCancellation(t *testing.T) {
	w := openWarehouse(t, pgtest.DSN(t), postgres.WarehouseOptions{})
	for _, kind := range []string{plan.KindTest, plan.KindModel, plan.KindSQL} {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			sql := "select 1 as slept from pg_sleep(60)"
			if kind == plan.KindSQL {
				sql = "create table slow as " + sql
			}
			start := time.Now()
			_, err := w.RunStep(ctx, engine.StepRequest{RunID: "r", StepID: kind + ".slow", Kind: kind, Relation: "slow", Materialized: "table", SQL: sql, LogicalAttempt: 1, Fence: 1})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("got %v, want the context's error", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("interrupted only after %s", d)
			}
		})
	}
	// The server stopped the statements (a cancel request, the deadline's
	// statement_timeout), and nothing was built.
	deadline := time.Now().Add(5 * time.Second)
	for whString(t, w, "select count(*) from pg_stat_activity where query like '%pg_sleep(60)%' and state = 'active' and pid <> pg_backend_pid()") != "0" {
		if time.Now().After(deadline) {
			t.Fatal("the slow statements still run on the server 5s after their steps were cancelled")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := whString(t, w, "select count(*) from pg_class where relname like '%slow%'"); got != "0" {
		t.Errorf("relations left: %s", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := w.RunStep(ctx, engine.StepRequest{StepID: "sql.x", Kind: plan.KindSQL, SQL: "create table x(a int)"}); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled context: %v", err)
	}
}

// TestWarehouseLockWait: a step that waits for a lock another session
// holds gives up after the budget with STORE_UNAVAILABLE, not transient,
// after progress lines that name the holder by its application_name.
func TestWarehouseLockWait(t *testing.T) {
	dsn := pgtest.DSN(t)
	const budget = 1500 * time.Millisecond
	var (
		mu      sync.Mutex
		reports []engine.LockWait
	)
	w := openWarehouse(t, dsn, postgres.WarehouseOptions{LockWait: budget, OnWait: func(lw engine.LockWait) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, lw)
	}})
	whRun(t, w, engine.StepRequest{StepID: "sql.setup", Kind: plan.KindSQL, SQL: "create table t (a int)"})
	holder := openWarehouse(t, dsn+" application_name=the-holder", postgres.WarehouseOptions{})
	ctx := context.Background()
	tx, err := holder.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "lock table t in exclusive mode"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = w.RunStep(ctx, engine.StepRequest{RunID: "r", StepID: "sql.ins", Kind: plan.KindSQL, SQL: "insert into t values (1)", LogicalAttempt: 1, Fence: 1})
	took := time.Since(start)
	if engine.CodeOf(err) != engine.CodeStoreUnavailable || engine.IsTransient(err) || !strings.Contains(err.Error(), "not released within 1.5s") {
		t.Fatalf("got %v, want a STORE_UNAVAILABLE that is not transient, naming the budget", err)
	}
	if took < budget || took > budget+2*time.Second {
		t.Errorf("the step gave up after %s, want its budget %s", took, budget)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reports) == 0 || !strings.Contains(reports[0].String(), "the-holder") ||
		!strings.HasPrefix(reports[0].String(), "waiting for the lock on table t in the Postgres warehouse") || !strings.Contains(reports[0].String(), "(step sql.ins)") {
		t.Errorf("progress reports %v, want one naming table t, the step and the holder's application_name", reports)
	} else {
		t.Logf("progress line: %s", reports[0])
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got := whString(t, w, "select count(*) from dvt_step_ledger"); got != "0" {
		t.Errorf("ledger rows after the refused step: %s", got)
	}
}

// TestWarehouseConcurrentSteps runs what a multi-threaded runner sends at
// once: each worker rebuilds its relation (tables and views, one of them
// read by a view so that it is replaced in place) while testing its
// neighbour's, which is being rebuilt at the same time and must never be
// seen missing or partly built.
func TestWarehouseConcurrentSteps(t *testing.T) {
	w := openWarehouse(t, pgtest.DSN(t), postgres.WarehouseOptions{})
	whRun(t, w, engine.StepRequest{StepID: "seed.n", Kind: plan.KindSeed, Relation: "n", SeedData: []byte("i\n1\n2\n3\n")})
	const workers = 8
	rel := func(g int) string { return "m" + string(rune('a'+g%workers)) }
	build := func(g int) (engine.StepResult, error) {
		return w.RunStep(context.Background(), engine.StepRequest{StepID: "model." + rel(g), Kind: plan.KindModel, Relation: rel(g),
			Materialized: []string{"table", "view"}[g%2], SQL: "select i * 2 as j from n"})
	}
	for g := range workers {
		if _, err := build(g); err != nil {
			t.Fatal(err)
		}
	}
	whRun(t, w, engine.StepRequest{StepID: "model.over_ma", Kind: plan.KindModel, Relation: "over_ma", SQL: "select j from ma"})
	errs := make(chan error, workers*20)
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				res, err := build(g)
				if err != nil {
					errs <- err
					continue
				}
				if g%2 == 0 && res.RowCount != 3 {
					errs <- errors.New(rel(g) + ": wrong row count")
				}
				tr, err := w.RunStep(context.Background(), engine.StepRequest{StepID: "test." + rel(g+1), Kind: plan.KindTest, SQL: "select * from " + rel(g+1)})
				if err != nil {
					errs <- err
				} else if tr.Failures != 3 {
					errs <- errors.New(rel(g+1) + " seen with a partial row set")
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := whString(t, w, "select count(*) from over_ma"); got != "3" {
		t.Errorf("the view over ma reads %s rows after its rebuilds, want 3", got)
	}
}

// TestWarehouseSlowStepIsNoLockWait: a step that runs long without waiting
// for any lock (pg_sleep) prints no lock-wait line; one that another
// session's lock on its table blocks does (TestWarehouseLockWait).
func TestWarehouseSlowStepIsNoLockWait(t *testing.T) {
	var (
		mu      sync.Mutex
		reports []engine.LockWait
	)
	w := openWarehouse(t, pgtest.DSN(t), postgres.WarehouseOptions{OnWait: func(lw engine.LockWait) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, lw)
	}})
	for _, req := range []engine.StepRequest{
		{RunID: "r", StepID: "sql.sleep", Kind: plan.KindSQL, SQL: "select pg_sleep(2.5)", LogicalAttempt: 1, Fence: 1},
		{StepID: "model.slow", Kind: plan.KindModel, Materialized: "table", Relation: "slow", SQL: "select 1 as n from pg_sleep(2.5)"},
	} {
		whRun(t, w, req)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reports) != 0 {
		t.Errorf("slow steps that wait for no lock reported lock waits: %v", reports)
	}
}
