package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store"
)

// Warehouse runs plan steps in an SQLite database of its own (not the state
// store's file). It implements engine.Warehouse and is safe for concurrent
// use.
//
// Step semantics:
//   - seed: the CSV at SeedPath (plan.ReadSeed) becomes table Relation.
//   - model: SQL is one SELECT; Materialized "table" builds a table, "view"
//     (also the default, as in dbt) a view. RowCount is set for tables.
//   - test: SQL is one query; Failures is the number of rows it returns.
//   - sql: SQL is executed as given. Several statements separated by ';' are
//     allowed and run in one transaction (all or nothing); they must not
//     contain BEGIN/COMMIT. Each statement numbers its ? placeholders from 1
//     and binds them from Params. RowsAffected is the total of rows
//     inserted, updated and deleted.
//
// Seeds and models replace their relation atomically: the new relation is
// built, the old one dropped and the new one put in its place in one
// transaction, so a failed build leaves the previous relation as it was, and
// views over it (resolved by name) keep working.
type Warehouse struct {
	db   *sql.DB
	path string
	q    map[string]string
	// writeSem serialises this process's write steps: SQLite has one writer
	// at a time, and waiting here (interruptible by ctx) beats spinning in
	// the busy handler. Other processes are held off by lock.
	writeSem chan struct{}
	// lock bounds the wait for another process's write lock: past its
	// budget a step fails with STORE_UNAVAILABLE, not transient, so the
	// runner stops the run resumable instead of retrying into a new budget.
	// Runs that share a warehouse queue behind each other's steps, so the
	// budget (default a minute) outlasts a competing run's step.
	lock *lockWaiter
}

// WarehouseOptions configures a Warehouse.
type WarehouseOptions struct {
	// LockWait is the most a write step waits for the write lock another
	// process holds (default engine.DefaultLockWait).
	LockWait time.Duration
	// OnWait receives a progress report every few seconds of such a wait.
	OnWait engine.WaitFunc
	// Holder, when set, fills in who probably holds the lock (say, the
	// run's previous lease holder, as the state store knows it) in the
	// progress reports and the error.
	Holder func(*engine.LockWait)
}

// tmpPrefix names the relation a table is built into before it replaces
// the old one. Relation names may not start with it.
const tmpPrefix = "dvt_tmp__"

// OpenWarehouse opens (creating it and its directory if needed) the SQLite
// warehouse database at path, with the default options.
func OpenWarehouse(ctx context.Context, path string) (*Warehouse, error) {
	return OpenWarehouseWith(ctx, path, WarehouseOptions{})
}

// OpenWarehouseWith is OpenWarehouse with options.
func OpenWarehouseWith(ctx context.Context, path string, opts WarehouseOptions) (*Warehouse, error) {
	if path == "" {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "warehouse path is empty")
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, engine.Errorf(engine.CodeStoreUnavailable, "cannot create the warehouse directory %s: %w", dir, err)
		}
	}
	q, err := sqlfiles.Queries(sqlfiles.SQLite, "warehouse.sql")
	if err != nil {
		return nil, err
	}
	lock := newLockWaiter("warehouse "+path, opts.LockWait, opts.OnWait, opts.Holder)
	db, err := sql.Open("sqlite", warehouseDSN(path, lock.slice()))
	if err != nil {
		return nil, classifyWarehouse(ctx, path, "", err)
	}
	w := &Warehouse{db: db, path: path, q: q, writeSem: make(chan struct{}, 1), lock: lock}
	if err := w.Ping(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return w, nil
}

// warehouseDSN: WAL so tests read while a model builds, BEGIN IMMEDIATE so
// a build takes the write lock up front (where lockWaiter waits for it, a
// busy slice at a time), and legacy_alter_table so that renaming the
// freshly built table into place neither rewrites nor re-checks the views
// that refer to it by name (with it off, SQLite refuses the rename while a
// view names the table just dropped).
func warehouseDSN(path string, busy time.Duration) string {
	return "file:" + path + "?mode=rwc" +
		"&_pragma=busy_timeout(" + fmt.Sprint(busy.Milliseconds()) + ")" +
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)" +
		"&_pragma=legacy_alter_table(ON)" +
		"&_txlock=immediate"
}

// Ping checks that the database is reachable and is an SQLite database.
func (w *Warehouse) Ping(ctx context.Context) error {
	var n int64
	if err := w.lock.wait(ctx, func() error { return w.db.QueryRowContext(ctx, w.q["schema_probe"]).Scan(&n) }); err != nil {
		return classifyWarehouse(ctx, w.path, "", err)
	}
	return nil
}

// DB gives direct access, for inspecting what the steps built.
func (w *Warehouse) DB() *sql.DB { return w.db }

// Close closes the database.
func (w *Warehouse) Close() error { return w.db.Close() }

// RunStep implements engine.Warehouse.
func (w *Warehouse) RunStep(ctx context.Context, req engine.StepRequest) (engine.StepResult, error) {
	if err := ctx.Err(); err != nil {
		return engine.StepResult{}, err
	}
	var (
		res engine.StepResult
		err error
	)
	switch req.Kind {
	case plan.KindSeed:
		res, err = w.runSeed(ctx, req)
	case plan.KindModel:
		res, err = w.runModel(ctx, req)
	case plan.KindTest:
		res, err = w.runTest(ctx, req)
	case plan.KindSQL:
		res, err = w.runSQL(ctx, req)
	default:
		err = engine.Errorf(engine.CodeInvalidArgument, "step %s: unknown kind %q (want seed, model, test or sql)", req.StepID, req.Kind)
	}
	if err != nil {
		return engine.StepResult{}, classifyWarehouse(ctx, w.path, req.StepID, err)
	}
	return res, nil
}

func (w *Warehouse) runSeed(ctx context.Context, req engine.StepRequest) (engine.StepResult, error) {
	rel, err := checkRelation(req)
	if err != nil {
		return engine.StepResult{}, err
	}
	f, err := req.OpenSeed()
	if err != nil {
		return engine.StepResult{}, engine.Errorf(engine.CodePlanInvalid, "seed %s: cannot read its CSV file: %w", req.StepID, err)
	}
	defer f.Close()
	seed, err := plan.ReadSeed(f, req.SeedPath)
	if err != nil {
		return engine.StepResult{}, err
	}
	cols := make([]string, len(seed.Columns))
	for i, c := range seed.Columns {
		cols[i] = quoteIdent(c) + " " + seed.Types[i]
	}
	return w.write(ctx, req, func(tx *sql.Tx) (engine.StepResult, error) {
		var n int64
		err := w.replace(ctx, tx, rel, plan.MaterializedTable, func(target string) error {
			return insertSeed(ctx, tx, target, cols, seed.Rows)
		}, &n)
		return engine.StepResult{RowCount: n, RowsAffected: int64(len(seed.Rows))}, err
	})
}

// insertSeed creates table target with cols and inserts rows.
func insertSeed(ctx context.Context, tx *sql.Tx, target string, cols []string, rows [][]any) error {
	if _, err := tx.ExecContext(ctx, "CREATE TABLE "+target+" ("+strings.Join(cols, ", ")+")"); err != nil {
		return err
	}
	ins, err := tx.PrepareContext(ctx, "INSERT INTO "+target+" VALUES ("+placeholders(len(cols))+")")
	if err != nil {
		return err
	}
	defer ins.Close()
	for _, row := range rows {
		if _, err := ins.ExecContext(ctx, row...); err != nil {
			return err
		}
	}
	return nil
}

func (w *Warehouse) runModel(ctx context.Context, req engine.StepRequest) (engine.StepResult, error) {
	rel, err := checkRelation(req)
	if err != nil {
		return engine.StepResult{}, err
	}
	body, err := plan.SingleStatement(req.SQL)
	if err != nil {
		return engine.StepResult{}, engine.Errorf(engine.CodePlanInvalid, "model %s: %w", req.StepID, err)
	}
	mat := req.Materialized
	if mat == "" {
		mat = plan.MaterializedView
	}
	var build func(tx *sql.Tx, target string) error
	switch mat {
	case plan.MaterializedTable:
		build = func(tx *sql.Tx, target string) error {
			_, err := tx.ExecContext(ctx, "CREATE TABLE "+target+" AS\n"+body+"\n", req.Params...)
			return err
		}
	case plan.MaterializedView:
		if len(req.Params) > 0 {
			return engine.StepResult{}, engine.Errorf(engine.CodePlanInvalid, "model %s: a view cannot take parameters (SQLite stores its text)", req.StepID)
		}
		build = func(tx *sql.Tx, target string) error {
			if _, err := tx.ExecContext(ctx, "CREATE VIEW "+target+" AS\n"+body+"\n"); err != nil {
				return err
			}
			// CREATE VIEW accepts a view over tables that do not exist;
			// compiling a read of it is what reports them, before commit.
			rows, err := tx.QueryContext(ctx, "SELECT * FROM "+target+" LIMIT 0")
			if err != nil {
				return err
			}
			return rows.Close()
		}
	case plan.MaterializedIncremental:
		return w.runIncremental(ctx, req, rel, body)
	default:
		return engine.StepResult{}, engine.Errorf(engine.CodePlanInvalid, "model %s: materialized %q is not table, view or incremental", req.StepID, req.Materialized)
	}
	return w.write(ctx, req, func(tx *sql.Tx) (engine.StepResult, error) {
		var n int64
		count := &n
		if mat == plan.MaterializedView {
			count = nil
		}
		err := w.replace(ctx, tx, rel, mat, func(target string) error { return build(tx, target) }, count)
		return engine.StepResult{RowCount: n}, err
	})
}

// replace builds relation rel inside tx. Tables are built under a
// temporary name and renamed into place once the old relation is dropped;
// a view (which SQLite cannot rename) is dropped and recreated. If build
// fails, the transaction rolls back and rel is as it was. When count is not
// nil it receives the new table's row count.
func (w *Warehouse) replace(ctx context.Context, tx *sql.Tx, rel, mat string, build func(target string) error, count *int64) error {
	var old string
	switch err := tx.QueryRowContext(ctx, w.q["relation_type"], rel).Scan(&old); {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return err
	}
	dropOld := func() error {
		switch old {
		case "table":
			_, err := tx.ExecContext(ctx, "DROP TABLE "+quoteIdent(rel))
			return err
		case "view":
			_, err := tx.ExecContext(ctx, "DROP VIEW "+quoteIdent(rel))
			return err
		}
		return nil
	}
	if mat == plan.MaterializedView {
		if err := dropOld(); err != nil {
			return err
		}
		if err := build(quoteIdent(rel)); err != nil {
			return err
		}
	} else {
		tmp := quoteIdent(tmpPrefix + rel)
		if _, err := tx.ExecContext(ctx, "DROP TABLE IF EXISTS "+tmp); err != nil {
			return err
		}
		if err := build(tmp); err != nil {
			return err
		}
		if err := dropOld(); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "ALTER TABLE "+tmp+" RENAME TO "+quoteIdent(rel)); err != nil {
			return err
		}
		if count != nil {
			if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM "+quoteIdent(rel)).Scan(count); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *Warehouse) runTest(ctx context.Context, req engine.StepRequest) (engine.StepResult, error) {
	body, err := plan.SingleStatement(req.SQL)
	if err != nil {
		return engine.StepResult{}, engine.Errorf(engine.CodePlanInvalid, "test %s: %w", req.StepID, err)
	}
	var res engine.StepResult
	// The newlines keep a trailing -- comment in the test's SQL from
	// swallowing the closing parenthesis. A failing test's first rows are
	// read too, for its StepFailed (the same query, bounded).
	err = w.lock.wait(ctx, func() error {
		res = engine.StepResult{}
		if err := w.db.QueryRowContext(ctx, "SELECT count(*) FROM (\n"+body+"\n)", req.Params...).Scan(&res.Failures); err != nil || res.Failures == 0 {
			return err
		}
		rows, err := w.db.QueryContext(ctx, "SELECT * FROM (\n"+body+"\n) LIMIT "+strconv.Itoa(engine.FailingRowsSample), req.Params...)
		if err != nil {
			return err
		}
		defer rows.Close()
		res.FailingRows, err = store.ScanSample(rows, engine.FailingRowsSample)
		return err
	})
	if err != nil {
		return engine.StepResult{}, err
	}
	return res, nil
}

func (w *Warehouse) runSQL(ctx context.Context, req engine.StepRequest) (engine.StepResult, error) {
	if strings.TrimSpace(req.SQL) == "" {
		return engine.StepResult{}, engine.Errorf(engine.CodePlanInvalid, "sql step %s: SQL is empty", req.StepID)
	}
	if stmt := plan.TransactionControl(req.SQL); stmt != "" {
		return engine.StepResult{}, engine.Errorf(engine.CodePlanInvalid, "sql step %s: %q controls the transaction; the step already runs in one", req.StepID, stmt)
	}
	return w.write(ctx, req, func(tx *sql.Tx) (engine.StepResult, error) {
		var before, after int64
		if err := tx.QueryRowContext(ctx, w.q["total_changes"]).Scan(&before); err != nil {
			return engine.StepResult{}, err
		}
		if _, err := tx.ExecContext(ctx, req.SQL, req.Params...); err != nil {
			return engine.StepResult{}, err
		}
		if err := tx.QueryRowContext(ctx, w.q["total_changes"]).Scan(&after); err != nil {
			return engine.StepResult{}, err
		}
		return engine.StepResult{RowsAffected: after - before}, nil
	})
}

// write runs a step's work in one transaction together with the step's
// ledger row (when req names a logical attempt): the run's fence is claimed
// first, so a runner that was taken over gets LEASE_LOST and commits
// nothing; an attempt whose row exists already comes back with its
// recorded result and is not run again; otherwise work and ledger row
// commit together, and the primary key admits one commit per attempt.
func (w *Warehouse) write(ctx context.Context, req engine.StepRequest, work func(tx *sql.Tx) (engine.StepResult, error)) (engine.StepResult, error) {
	if err := w.acquire(ctx); err != nil {
		return engine.StepResult{}, err
	}
	defer w.release()
	var tx *sql.Tx
	err := w.lock.wait(ctx, func() (err error) {
		tx, err = w.db.BeginTx(ctx, nil)
		return err
	})
	if err != nil {
		return engine.StepResult{}, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	ledger := req.RunID != "" && req.LogicalAttempt > 0
	if ledger {
		// The ledger's tables are created by the first step that needs
		// them, in its own transaction: opening a warehouse writes nothing,
		// so it never waits for another process's write lock.
		for _, name := range []string{"create_step_ledger", "create_run_fences"} {
			if _, err := tx.ExecContext(ctx, w.q[name]); err != nil {
				return engine.StepResult{}, err
			}
		}
		claim, err := tx.ExecContext(ctx, w.q["claim_fence"], req.RunID, req.Fence)
		if err != nil {
			return engine.StepResult{}, err
		}
		if n, _ := claim.RowsAffected(); n == 0 {
			return engine.StepResult{}, engine.Errorf(engine.CodeLeaseLost, "step %s: run %s has committed work under a newer lease than this runner's (fence %d); nothing was written", req.StepID, req.RunID, req.Fence)
		}
		if e, ok, err := lookupLedger(ctx, tx, w.q["ledger_entry"], req.RunID, req.StepID, req.LogicalAttempt); err != nil || ok {
			return e.Result, err
		}
	}
	res, err := work(tx)
	if err != nil {
		return engine.StepResult{}, err
	}
	if ledger {
		b, err := json.Marshal(res)
		if err != nil {
			return engine.StepResult{}, err
		}
		if _, err := tx.ExecContext(ctx, w.q["insert_ledger"], req.RunID, req.StepID, req.LogicalAttempt, req.EngineAttempt, req.Fence, string(b)); err != nil {
			return engine.StepResult{}, err
		}
	}
	if err := tx.Commit(); err != nil {
		return engine.StepResult{}, err
	}
	return res, nil
}

// LookupStep implements engine.Ledger.
func (w *Warehouse) LookupStep(ctx context.Context, runID, stepID string, logicalAttempt int) (engine.LedgerEntry, bool, error) {
	var tables int64
	err := w.lock.wait(ctx, func() error { return w.db.QueryRowContext(ctx, w.q["ledger_exists"]).Scan(&tables) })
	if err != nil || tables == 0 {
		return engine.LedgerEntry{}, false, classifyWarehouse(ctx, w.path, stepID, err) // no ledger yet: nothing committed
	}
	var (
		e  engine.LedgerEntry
		ok bool
	)
	err = w.lock.wait(ctx, func() (err error) {
		e, ok, err = lookupLedger(ctx, w.db, w.q["ledger_entry"], runID, stepID, logicalAttempt)
		return err
	})
	if err != nil {
		return engine.LedgerEntry{}, false, classifyWarehouse(ctx, w.path, stepID, err)
	}
	return e, ok, nil
}

type rowQueryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// lookupLedger reads a step attempt's ledger row; the returned entry's
// Result.Ledger points at the entry, marking the result as recorded.
func lookupLedger(ctx context.Context, q rowQueryer, query, runID, stepID string, logical int) (engine.LedgerEntry, bool, error) {
	e := engine.LedgerEntry{RunID: runID, StepID: stepID, LogicalAttempt: logical}
	var result, committed string
	err := q.QueryRowContext(ctx, query, runID, stepID, logical).Scan(&e.EngineAttempt, &e.Fence, &result, &committed)
	if errors.Is(err, sql.ErrNoRows) {
		return engine.LedgerEntry{}, false, nil
	}
	if err != nil {
		return engine.LedgerEntry{}, false, err
	}
	e.CommittedAt, _ = time.Parse(time.RFC3339Nano, committed)
	e, err = engine.DecodeLedgerEntry(e, []byte(result))
	return e, err == nil, err
}

func (w *Warehouse) acquire(ctx context.Context) error {
	select {
	case w.writeSem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *Warehouse) release() { <-w.writeSem }

// relationRE is the identifier rule of engine plans: letters, digits, _ and
// $, not starting with a digit.
var relationRE = regexp.MustCompile(`^[A-Za-z_\p{L}][A-Za-z0-9_$\p{L}\p{N}]*$`)

func checkRelation(req engine.StepRequest) (string, error) {
	rel := req.Relation
	lower := strings.ToLower(rel)
	switch {
	case rel == "":
		return "", engine.Errorf(engine.CodeInvalidArgument, "step %s: no relation name", req.StepID)
	case qualified(rel):
		return "", engine.Errorf(engine.CodePlanInvalid, "step %s: relation name %q is schema-qualified, and SQLite has one schema (import the dbt manifest without --keep-schemas)", req.StepID, rel)
	case !relationRE.MatchString(rel):
		return "", engine.Errorf(engine.CodePlanInvalid, "step %s: relation name %q is not a valid identifier", req.StepID, rel)
	case strings.HasPrefix(lower, "sqlite_"), strings.HasPrefix(lower, tmpPrefix):
		return "", engine.Errorf(engine.CodePlanInvalid, "step %s: relation name %q uses a reserved prefix", req.StepID, rel)
	}
	return rel, nil
}

// qualified: rel is schema.name, which plans allow for Postgres.
func qualified(rel string) bool {
	schema, name, ok := strings.Cut(rel, ".")
	return ok && relationRE.MatchString(schema) && relationRE.MatchString(name)
}

// quoteIdent quotes an SQL identifier, doubling embedded quotes.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// classifyWarehouse turns driver errors into coded errors naming the step:
// busy/locked are transient, a corrupt file is STORE_CORRUPT, anything else
// the step's SQL did is STEP_FAILED. A done context wins: the caller gets
// ctx.Err() itself.
func classifyWarehouse(ctx context.Context, path, stepID string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var ee *engine.Error
	if errors.As(err, &ee) {
		return err
	}
	what := "warehouse " + path
	if stepID != "" {
		what = "step " + stepID
	}
	var se *msqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return engine.MarkTransient(engine.Errorf(engine.CodeStoreUnavailable, "%s: the warehouse %s is busy: %w", what, path, err))
		case sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT:
			return engine.Errorf(engine.CodeStoreCorrupt, "%s is not a usable SQLite database: %w", path, err)
		case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_PERM:
			return engine.Errorf(engine.CodeStoreUnavailable, "cannot use the warehouse %s: %w", path, err)
		}
	}
	if stepID == "" {
		return engine.Errorf(engine.CodeStoreUnavailable, "%s: %w", what, err)
	}
	return engine.Errorf(engine.CodeStepFailed, "%s: %w", what, err)
}
