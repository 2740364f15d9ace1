package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/store"
)

func openWarehouseT(t *testing.T) *Warehouse {
	t.Helper()
	w, err := OpenWarehouse(context.Background(), filepath.Join(t.TempDir(), "sub", "wh.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func whWriteCSV(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func whRun(t *testing.T, w *Warehouse, req engine.StepRequest) engine.StepResult {
	t.Helper()
	res, err := w.RunStep(context.Background(), req)
	if err != nil {
		t.Fatalf("%s: %v", req.StepID, err)
	}
	return res
}

func whQueryStrings(t *testing.T, w *Warehouse, q string) []string {
	t.Helper()
	rows, err := w.DB().Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestWarehouseSeeds(t *testing.T) {
	tests := []struct {
		name     string
		csv      string
		rows     int64
		query    string // a single-column query over the seed, in order
		want     []string
		typesSQL []string // typeof() of each column of the first row
	}{
		{
			name:     "CRLF with quoted commas and newlines",
			csv:      "id,name,note\r\n1,\"Smith, Ann\",\"line1\r\nline2\"\r\n2,Bob,plain\r\n",
			rows:     2,
			query:    `SELECT name || '|' || note FROM s ORDER BY id`,
			want:     []string{"Smith, Ann|line1\nline2", "Bob|plain"},
			typesSQL: []string{"integer", "text", "text"},
		},
		{
			name:     "types and NULLs",
			csv:      "k,amount,qty\na,1.5,\nb,2,7\n",
			rows:     2,
			query:    `SELECT k || ':' || coalesce(amount, '-') || ':' || coalesce(qty, 'null') FROM s ORDER BY k`,
			want:     []string{"a:1.5:null", "b:2.0:7"},
			typesSQL: []string{"text", "real", "null"},
		},
		{
			name:     "column names needing quotes",
			csv:      "order id,\"say \"\"x\"\"\",select\n1,2,3\n",
			rows:     1,
			query:    `SELECT "order id" + "say ""x""" + "select" FROM s`,
			want:     []string{"6"},
			typesSQL: []string{"integer", "integer", "integer"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := openWarehouseT(t)
			res := whRun(t, w, engine.StepRequest{StepID: "seed.s", Kind: plan.KindSeed, Relation: "s", SeedPath: whWriteCSV(t, "s.csv", tc.csv)})
			if res.RowCount != tc.rows {
				t.Errorf("RowCount %d, want %d", res.RowCount, tc.rows)
			}
			if got := whQueryStrings(t, w, tc.query); strings.Join(got, "\x00") != strings.Join(tc.want, "\x00") {
				t.Errorf("rows %q, want %q", got, tc.want)
			}
			rows, err := w.DB().Query(`SELECT * FROM s LIMIT 1`)
			if err != nil {
				t.Fatal(err)
			}
			names, _ := rows.Columns()
			rows.Close()
			for i, n := range names {
				got := whQueryStrings(t, w, `SELECT typeof(`+quoteIdent(n)+`) FROM s LIMIT 1`)
				if len(got) != 1 || got[0] != tc.typesSQL[i] {
					t.Errorf("column %s: typeof %v, want %s", n, got, tc.typesSQL[i])
				}
			}
		})
	}
}

func TestWarehouseStepErrors(t *testing.T) {
	w := openWarehouseT(t)
	whRun(t, w, engine.StepRequest{StepID: "seed.base", Kind: plan.KindSeed, Relation: "base", SeedPath: whWriteCSV(t, "base.csv", "id\n1\n2\n")})
	tests := []struct {
		name string
		req  engine.StepRequest
		code engine.Code
		want string
	}{
		{"malformed CSV row names file:line", engine.StepRequest{StepID: "seed.bad", Kind: plan.KindSeed, Relation: "bad", SeedPath: whWriteCSV(t, "bad.csv", "a,b\r\n1,2\r\n3\r\n")}, engine.CodePlanInvalid, "bad.csv:3: the row has 1 fields"},
		{"missing CSV", engine.StepRequest{StepID: "seed.gone", Kind: plan.KindSeed, Relation: "gone", SeedPath: filepath.Join(t.TempDir(), "nope.csv")}, engine.CodePlanInvalid, "seed seed.gone: cannot read its CSV file"},
		{"model syntax error", engine.StepRequest{StepID: "model.m", Kind: plan.KindModel, Relation: "m", Materialized: "table", SQL: "selec 1"}, engine.CodeStepFailed, "step model.m:"},
		{"view over a missing table", engine.StepRequest{StepID: "model.v", Kind: plan.KindModel, Relation: "v", Materialized: "view", SQL: "select * from missing_table"}, engine.CodeStepFailed, "missing_table"},
		{"test syntax error", engine.StepRequest{StepID: "test.t", Kind: plan.KindTest, SQL: "select * from"}, engine.CodeStepFailed, "step test.t:"},
		{"model with two statements", engine.StepRequest{StepID: "model.two", Kind: plan.KindModel, Relation: "two", Materialized: "table", SQL: "select 1; drop table base"}, engine.CodePlanInvalid, "several statements"},
		{"relation name that would need splicing", engine.StepRequest{StepID: "model.x", Kind: plan.KindModel, Relation: `x"; drop table base; --`, SQL: "select 1"}, engine.CodePlanInvalid, "not a valid identifier"},
		{"reserved relation prefix", engine.StepRequest{StepID: "model.x", Kind: plan.KindModel, Relation: "sqlite_stat9", SQL: "select 1"}, engine.CodePlanInvalid, "reserved prefix"},
		{"schema-qualified relation", engine.StepRequest{StepID: "model.x", Kind: plan.KindModel, Relation: "public.x", SQL: "select 1"}, engine.CodePlanInvalid, "SQLite has one schema"},
		{"unknown materialization", engine.StepRequest{StepID: "model.inc", Kind: plan.KindModel, Relation: "inc", Materialized: "snapshot", SQL: "select 1"}, engine.CodePlanInvalid, "not table, view or incremental"},
		{"unknown kind", engine.StepRequest{StepID: "x.y", Kind: "snapshot"}, engine.CodeInvalidArgument, "unknown kind"},
		{"sql step with COMMIT", engine.StepRequest{StepID: "sql.c", Kind: plan.KindSQL, SQL: "delete from base; commit; insert into base values (3)"}, engine.CodePlanInvalid, `"commit" controls the transaction`},
		{"sql step with BEGIN after a comment", engine.StepRequest{StepID: "sql.b", Kind: plan.KindSQL, SQL: "/* x */ -- y\n Begin immediate; delete from base"}, engine.CodePlanInvalid, "controls the transaction"},
		{"sql step failing midway rolls back", engine.StepRequest{StepID: "sql.s", Kind: plan.KindSQL, SQL: "delete from base; insert into nowhere values (1)"}, engine.CodeStepFailed, "nowhere"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := w.RunStep(context.Background(), tc.req)
			if err == nil {
				t.Fatal("no error")
			}
			if engine.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v (code %s), want code %s and %q", err, engine.CodeOf(err), tc.code, tc.want)
			}
			if engine.IsTransient(err) {
				t.Errorf("%v marked transient", err)
			}
		})
	}
	// None of the failures touched base.
	if got := whQueryStrings(t, w, `SELECT group_concat(id) FROM base`); got[0] != "1,2" {
		t.Errorf("base = %v after failed steps", got)
	}
}

func TestWarehouseAtomicReplace(t *testing.T) {
	w := openWarehouseT(t)
	seed := func(body string) engine.StepResult {
		return whRun(t, w, engine.StepRequest{StepID: "seed.items", Kind: plan.KindSeed, Relation: "items", SeedPath: whWriteCSV(t, "items.csv", body)})
	}
	seed("id,price\n1,10\n2,20\n")
	whRun(t, w, engine.StepRequest{StepID: "model.items_v", Kind: plan.KindModel, Relation: "items_v", Materialized: "view", SQL: "select id, price * 2 as double_price from items"})
	model := func(sql string) (engine.StepResult, error) {
		return w.RunStep(context.Background(), engine.StepRequest{StepID: "model.totals", Kind: plan.KindModel, Relation: "totals", Materialized: "table", SQL: sql})
	}
	res, err := model("select sum(double_price) as total from items_v;")
	if err != nil || res.RowCount != 1 {
		t.Fatalf("first build: %v %+v", err, res)
	}

	// Rebuilding the seed (new column set) keeps the view over it working.
	if res := seed("id,price,extra\n1,1,x\n2,2,y\n3,3,z\n"); res.RowCount != 3 {
		t.Errorf("reseed RowCount %d", res.RowCount)
	}
	if got := whQueryStrings(t, w, `SELECT sum(double_price) FROM items_v`); got[0] != "12" {
		t.Errorf("view over rebuilt seed: %v", got)
	}

	// A failing rebuild leaves the previous table intact.
	if _, err := model("select total from no_such_relation"); engine.CodeOf(err) != engine.CodeStepFailed {
		t.Fatalf("failing model: %v", err)
	}
	if got := whQueryStrings(t, w, `SELECT total FROM totals`); len(got) != 1 || got[0] != "60" {
		t.Errorf("totals after failed rebuild: %v, want the old 60", got)
	}

	// A successful rebuild replaces it, and no temporary relation is left.
	if res, err := model("select sum(double_price) as total from items_v union all select 0"); err != nil || res.RowCount != 2 {
		t.Fatalf("rebuild: %v %+v", err, res)
	}
	if got := whQueryStrings(t, w, `SELECT name FROM sqlite_master WHERE name LIKE 'dvt_tmp%'`); len(got) != 0 {
		t.Errorf("left behind: %v", got)
	}

	// A table model may become a view and back.
	for _, mat := range []string{"view", "table"} {
		res := whRun(t, w, engine.StepRequest{StepID: "model.totals", Kind: plan.KindModel, Relation: "totals", Materialized: mat, SQL: "select 1 as total"})
		kind := whQueryStrings(t, w, `SELECT type FROM sqlite_master WHERE name = 'totals'`)
		if len(kind) != 1 || kind[0] != mat {
			t.Errorf("totals is %v, want %s", kind, mat)
		}
		if want := map[string]int64{"view": 0, "table": 1}[mat]; res.RowCount != want {
			t.Errorf("%s RowCount %d, want %d", mat, res.RowCount, want)
		}
	}
}

func TestWarehouseTestsAndSQL(t *testing.T) {
	w := openWarehouseT(t)
	whRun(t, w, engine.StepRequest{StepID: "seed.p", Kind: plan.KindSeed, Relation: "p", SeedPath: whWriteCSV(t, "p.csv", "id,status\n1,ok\n2,bad\n3,\n4,bad\n")})
	tests := []struct {
		name     string
		sql      string
		params   []any
		failures int64
	}{
		{"passing test", "select * from p where id is null", nil, 0},
		{"failures counted", "select * from p where status = 'bad'", nil, 2},
		{"trailing semicolon and comment", "select * from p where status is null; -- nulls\n", nil, 1},
		{"trailing line comment without newline", "select * from p -- all rows", nil, 4},
		{"semicolon inside a string", "select * from p where status = ';'", nil, 0},
		{"params bound", "select * from p where id > ?", []any{2}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := whRun(t, w, engine.StepRequest{StepID: "test.x", Kind: plan.KindTest, SQL: tc.sql, Params: tc.params, Severity: plan.SeverityWarn})
			if res.Failures != tc.failures {
				t.Errorf("Failures %d, want %d", res.Failures, tc.failures)
			}
		})
	}

	res := whRun(t, w, engine.StepRequest{StepID: "sql.fix", Kind: plan.KindSQL, SQL: "create table audit(n);\nupdate p set status = ? where status = 'bad';\ninsert into audit values (1);", Params: []any{"fixed"}})
	if res.RowsAffected != 3 {
		t.Errorf("RowsAffected %d, want 3 (2 updates + 1 insert)", res.RowsAffected)
	}
	if got := whQueryStrings(t, w, `SELECT count(*) FROM p WHERE status = 'fixed'`); got[0] != "2" {
		t.Errorf("update not applied: %v", got)
	}
}

// TestWarehouseFailingRows: a failing test's result keeps its first rows
// (at most engine.FailingRowsSample), with its columns; a passing one none.
func TestWarehouseFailingRows(t *testing.T) {
	w := openWarehouseT(t)
	whRun(t, w, engine.StepRequest{StepID: "seed.p", Kind: plan.KindSeed, Relation: "p", SeedPath: whWriteCSV(t, "p.csv", "id,status\n1,ok\n2,bad\n3,\n4,bad\n")})
	tests := []struct {
		name     string
		sql      string
		failures int64
		columns  []string
		first    []any
		rows     int
	}{
		{"passing", "select * from p where id > 10", 0, nil, nil, 0},
		{"two failing rows", "select id, status from p where status = 'bad' order by id", 2, []string{"id", "status"}, []any{int64(2), "bad"}, 2},
		{"a null value", "select status from p where status is null or status = ''", 1, []string{"status"}, nil, 1},
		{"bounded", "select a.id from p a, p b order by a.id", 16, []string{"id"}, []any{int64(1)}, engine.FailingRowsSample},
		{"long text cut", "select replace(hex(zeroblob(1500)), '0', 'é') as v", 1, []string{"v"}, []any{strings.Repeat("é", store.SampleValueMax/2) + "…"}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := whRun(t, w, engine.StepRequest{StepID: "test.x", Kind: plan.KindTest, SQL: tc.sql})
			if res.Failures != tc.failures {
				t.Fatalf("Failures %d, want %d", res.Failures, tc.failures)
			}
			if tc.failures == 0 {
				if res.FailingRows != nil {
					t.Fatalf("a passing test has failing rows %+v", res.FailingRows)
				}
				return
			}
			fr := res.FailingRows
			if fr == nil || !slices.Equal(fr.Columns, tc.columns) || len(fr.Rows) != tc.rows {
				t.Fatalf("failing rows %+v, want columns %v and %d rows", fr, tc.columns, tc.rows)
			}
			if tc.first != nil && !slices.Equal(fr.Rows[0], tc.first) {
				t.Fatalf("first row %#v, want %#v", fr.Rows[0], tc.first)
			}
		})
	}
}

func TestWarehouseCancellation(t *testing.T) {
	w := openWarehouseT(t)
	// A query that runs for minutes unless interrupted.
	slow := "with recursive c(i) as (select 1 union all select i + 1 from c where i < 1000000000) select i from c where i < 0"
	for _, kind := range []string{plan.KindTest, plan.KindModel, plan.KindSQL} {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			sql := slow
			if kind == plan.KindSQL {
				sql = "create table slow as " + slow
			}
			_, err := w.RunStep(ctx, engine.StepRequest{StepID: kind + ".slow", Kind: kind, Relation: "slow", Materialized: "table", SQL: sql})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("got %v, want the context's error", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("interrupted only after %s", d)
			}
		})
	}
	// The connection pool is still usable, and nothing was built.
	if got := whQueryStrings(t, w, `SELECT count(*) FROM sqlite_master WHERE name LIKE '%slow%'`); got[0] != "0" {
		t.Errorf("relations left: %v", got)
	}
	// An already cancelled context runs nothing.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := w.RunStep(ctx, engine.StepRequest{StepID: "sql.x", Kind: plan.KindSQL, SQL: "create table x(a)"}); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v", err)
	}
}

func TestOpenWarehouseErrors(t *testing.T) {
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt.db")
	if err := os.WriteFile(corrupt, []byte(strings.Repeat("this is not an SQLite database\n", 200)), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		path string
		code engine.Code
	}{
		{"corrupt file", corrupt, engine.CodeStoreCorrupt},
		{"path is a directory", dir, engine.CodeStoreUnavailable},
		{"empty path", "", engine.CodeInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, err := OpenWarehouse(context.Background(), tc.path)
			if err == nil {
				w.Close()
				t.Fatal("opened")
			}
			if engine.CodeOf(err) != tc.code {
				t.Errorf("got %v, want code %s", err, tc.code)
			}
		})
	}
}

// TestWarehouseLockWait: another process holding the write lock makes a
// write step wait at most the lock-wait budget, reporting what it waits
// for, then fail with STORE_UNAVAILABLE that is not transient (the runner
// stops the run resumable instead of retrying into a new budget). A step
// that tries again while the lock is still held (an engine attempt, or the
// next step queued in this process) has no new budget; once the lock is
// gone the step succeeds, and the next wait has the whole budget again.
func TestWarehouseLockWait(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wh.db")
	ctx := context.Background()
	holder, err := OpenWarehouse(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	const budget = 1500 * time.Millisecond
	var (
		mu      sync.Mutex
		reports []engine.LockWait
	)
	w, err := OpenWarehouseWith(ctx, path, WarehouseOptions{
		LockWait: budget,
		OnWait: func(lw engine.LockWait) {
			mu.Lock()
			defer mu.Unlock()
			reports = append(reports, lw)
		},
		Holder: func(lw *engine.LockWait) { lw.RunID, lw.Holder = "r-old", "runner-a" },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	hold := func() *sql.Tx {
		tx, err := holder.DB().BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock
		if err != nil {
			t.Fatal(err)
		}
		return tx
	}
	req := engine.StepRequest{RunID: "r-new", StepID: "sql.t", Kind: plan.KindSQL, SQL: "create table if not exists t(a)", LogicalAttempt: 1, Fence: 1}
	step := func() (time.Duration, error) {
		start := time.Now()
		_, err := w.RunStep(ctx, req)
		return time.Since(start), err
	}
	wantExceeded := func(what string, err error) {
		t.Helper()
		if engine.CodeOf(err) != engine.CodeStoreUnavailable || engine.IsTransient(err) {
			t.Fatalf("%s: got %v, want a STORE_UNAVAILABLE that is not transient", what, err)
		}
		for _, s := range []string{"warehouse " + path, "run r-old", "held by runner-a", "not released within 1.5s"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %q lacks %q", what, err, s)
			}
		}
	}

	tx := hold()
	took, err := step()
	wantExceeded("first wait", err)
	if took < budget || took > budget+time.Second {
		t.Errorf("the step gave up after %s, want its budget %s (+ at most 1s)", took, budget)
	}
	mu.Lock()
	if len(reports) == 0 {
		t.Error("no progress report during a 1.5s wait")
	}
	for _, r := range reports {
		if line := r.String(); !strings.Contains(line, "warehouse "+path) || !strings.Contains(line, "held by runner-a") || r.Since.IsZero() {
			t.Errorf("progress line %q does not say what is waited for, held by whom since when", line)
		}
	}
	mu.Unlock()
	// The retry meets the same holder: the budget is spent already.
	took, err = step()
	wantExceeded("retry", err)
	if took > 700*time.Millisecond {
		t.Errorf("the retry waited %s more: step retries multiply the budget", took)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := step(); err != nil {
		t.Fatalf("after the holder let go: %v", err)
	}
	// A new holder: the whole budget again.
	tx = hold()
	defer tx.Rollback()
	took, err = step()
	wantExceeded("a new wait", err)
	if took < budget {
		t.Errorf("a new wait gave up after %s, want the whole budget %s", took, budget)
	}
}

// TestWarehouseConcurrentSteps runs what a multi-threaded runner sends at
// once: each worker rebuilds its relation while testing its neighbour's,
// which is being rebuilt at the same time and must never be seen missing or
// partly built.
func TestWarehouseConcurrentSteps(t *testing.T) {
	w := openWarehouseT(t)
	whRun(t, w, engine.StepRequest{StepID: "seed.n", Kind: plan.KindSeed, Relation: "n", SeedPath: whWriteCSV(t, "n.csv", "i\n1\n2\n3\n")})
	const workers = 8
	rel := func(g int) string { return "m" + string(rune('a'+g%workers)) }
	build := func(g int) (engine.StepResult, error) {
		return w.RunStep(context.Background(), engine.StepRequest{StepID: "model." + rel(g), Kind: plan.KindModel, Relation: rel(g), Materialized: []string{"table", "view"}[g%2], SQL: "select i * 2 as j from n"})
	}
	for g := range workers {
		if _, err := build(g); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, workers*20)
	done := make(chan struct{})
	for g := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
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
	for range workers {
		<-done
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
