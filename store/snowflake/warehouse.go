package snowflake

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/snowflakedb/gosnowflake"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/store"
)

// Warehouse runs plan steps in Snowflake. It implements engine.Warehouse
// and is safe for concurrent use.
//
// Step semantics (as the SQLite warehouse's):
//   - seed: the CSV at SeedPath (plan.ReadSeed) becomes table Relation:
//     CREATE OR REPLACE TABLE with NUMBER/FLOAT/VARCHAR columns, then
//     INSERTs with bind arrays.
//   - model: CREATE OR REPLACE TABLE|VIEW Relation AS SQL (view by default,
//     as in dbt). RowCount is set for tables.
//   - test: Failures is count(*) of the rows SQL returns.
//   - sql: executed as given; several statements run one after another.
//
// Every statement carries the step's QUERY_TAG (StepRequest.QueryTag) and
// its Snowflake query id comes back in StepResult.QueryIDs, so auditors can
// join events to QUERY_HISTORY. Cancelling ctx aborts the running query
// (the driver sends an abort request).
type Warehouse struct {
	db      *sql.DB
	where   string
	secrets []string
	q       map[string]string // sql/snowflake/warehouse.sql
	opts    WarehouseOptions

	fenceMu sync.Mutex
	fences  map[string]*runFence // by run id: the fence tables made sure of (warehouse_fence.go)
	taken   map[string]bool      // runs whose stale transactions this Warehouse ended: their fence is closed at their end too
	schema  string               // DB.SCHEMA of the sessions, once asked
	// database and schemaName are the DSN's (either may be ""): the
	// renderer's qualified names (Relation).
	database, schemaName string
	legacy               atomic.Int32 // the shared dvt_run_fences of earlier versions: legacyUnknown, legacyAbsent or legacyPresent
}

// WarehouseOptions configures OpenWarehouse.
type WarehouseOptions struct {
	// LockWait bounds how long a step waits, in all, for locks other
	// transactions hold (its run's fence, a table it updates): default
	// engine.DefaultLockWait. Then the step fails with STORE_UNAVAILABLE
	// (engine.LockWait.Exceeded), not transient: the run stops, resumable.
	// Sessions get LOCK_TIMEOUT = a slice of it (1–5 s) unless the DSN sets
	// LOCK_TIMEOUT.
	LockWait time.Duration
	// OnWait receives a progress report after each slice waited: the
	// table, the run, the holder's transaction and session and since when
	// (SHOW LOCKS). nil reports nothing.
	OnWait engine.WaitFunc
}

// sessionParams are set on every warehouse session unless the DSN sets
// them: no statement waits Snowflake's default 12 hours for a lock
// (LOCK_TIMEOUT, seconds: lockSlice), and a query whose client is gone
// (killed, or its network lost) is aborted instead of running on for up to
// 5 minutes (ABORT_DETACHED_QUERY).
func sessionParams(opts WarehouseOptions) map[string]string {
	return map[string]string{
		"LOCK_TIMEOUT":         strconv.Itoa(int(lockSlice(opts.LockWait) / time.Second)),
		"ABORT_DETACHED_QUERY": "TRUE",
	}
}

// OpenWarehouse connects with a gosnowflake DSN (see ConfigFromDSN).
func OpenWarehouse(ctx context.Context, dsn string, opts WarehouseOptions) (*Warehouse, error) {
	if opts.LockWait <= 0 {
		opts.LockWait = engine.DefaultLockWait
	}
	cfg, err := warehouseConfig(dsn, opts)
	if err != nil {
		return nil, err
	}
	q, err := warehouseQueries()
	if err != nil {
		return nil, err
	}
	w := &Warehouse{
		db:      sql.OpenDB(newConnector(cfg, RedactDSN(dsn))),
		where:   RedactDSN(dsn),
		secrets: append(secretsOfDSN(dsn), secretsOfConfig(cfg)...),
		q:       q,
		opts:    opts,
		fences:  map[string]*runFence{},
		taken:   map[string]bool{},

		database:   cfg.Database,
		schemaName: cfg.Schema,
	}
	if err := w.Ping(ctx); err != nil {
		w.db.Close()
		return nil, err
	}
	// The ledger and the closed fences' records, in one request. Processes
	// opening one schema for the first time at once (store and warehouse
	// of concurrent runs) may conflict on the catalog (000625): the
	// tables are there for the next try.
	mctx, err := gosnowflake.WithMultiStatement(gosnowflake.WithQueryTag(ctx, dvtrunTag("open warehouse", "")), 2)
	for try := 1; err == nil; try++ {
		_, err = w.db.ExecContext(mctx, q["create_step_ledger"]+"\n"+q["create_closed_fences"])
		if err == nil || !retryable(err) || try == 5 {
			break
		}
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(time.Duration(try*try) * 20 * time.Millisecond):
			err = nil
		}
	}
	if err != nil {
		w.db.Close()
		return nil, w.classify(ctx, "", err)
	}
	return w, nil
}

// warehouseConfig is the DSN's configuration with sessionParams added
// where the DSN does not set them.
func warehouseConfig(dsn string, opts WarehouseOptions) (*gosnowflake.Config, error) {
	cfg, err := ConfigFromDSN(dsn)
	if err != nil {
		return nil, err
	}
	if cfg.Params == nil {
		cfg.Params = map[string]*string{}
	}
	for k, v := range sessionParams(opts) {
		if !hasParam(cfg.Params, k) {
			cfg.Params[k] = &v
		}
	}
	return cfg, nil
}

// hasParam: the driver keeps a DSN's session parameters as spelled.
func hasParam(params map[string]*string, name string) bool {
	for k := range params {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// Ping logs in (if no session is open) and runs a trivial query.
func (w *Warehouse) Ping(ctx context.Context) error {
	var one int
	if err := w.db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		return w.classify(ctx, "", err)
	}
	return nil
}

// DB gives direct access, for inspecting what steps built.
func (w *Warehouse) DB() *sql.DB { return w.db }

// Close closes the connections and their sessions.
func (w *Warehouse) Close() error { return w.db.Close() }

// stepRun collects the query ids of one step's statements.
type stepRun struct {
	w    *Warehouse
	ctx  context.Context
	ids  []string
	conn sqlConn // the step's session, or its transaction
	lw   lockWaiter
}

// sqlConn is what a step's statements run on: *sql.Conn or *sql.Tx.
type sqlConn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// statement context: the step's query tag, and a fresh channel the driver
// sends this statement's query id to (it sends once, then closes it).
func (r *stepRun) stmtCtx() (context.Context, chan string) {
	ch := make(chan string, 1)
	return gosnowflake.WithQueryIDChan(r.ctx, ch), ch
}

func (r *stepRun) collect(ch chan string) {
	select {
	case id, ok := <-ch:
		if ok && id != "" {
			r.ids = append(r.ids, id)
		}
	default:
	}
}

// exec runs a statement of the step, waiting for other transactions'
// locks within the step's budget (lockWaiter).
func (r *stepRun) exec(q string, args ...any) (sql.Result, error) {
	var res sql.Result
	err := r.lw.do(r.ctx, "", "", func() error {
		ctx, ch := r.stmtCtx()
		var err error
		res, err = r.conn.ExecContext(ctx, q, args...)
		r.collect(ch)
		return err
	})
	return res, err
}

func (r *stepRun) count(q string, args ...any) (int64, error) {
	var n int64
	err := r.lw.do(r.ctx, "", "", func() error {
		ctx, ch := r.stmtCtx()
		err := r.conn.QueryRowContext(ctx, q, args...).Scan(&n)
		r.collect(ch)
		return err
	})
	return n, err
}

// sample reads the first engine.FailingRowsSample rows of q.
func (r *stepRun) sample(q string, args ...any) (*engine.RowSample, error) {
	var out *engine.RowSample
	err := r.lw.do(r.ctx, "", "", func() error {
		ctx, ch := r.stmtCtx()
		defer r.collect(ch)
		rows, err := r.conn.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		out, err = store.ScanSample(rows, engine.FailingRowsSample)
		return err
	})
	return out, err
}

// RunStep implements engine.Warehouse.
func (w *Warehouse) RunStep(ctx context.Context, req engine.StepRequest) (engine.StepResult, error) {
	if err := ctx.Err(); err != nil {
		return engine.StepResult{}, err
	}
	if req.QueryTag != "" {
		ctx = gosnowflake.WithQueryTag(ctx, req.QueryTag)
	}
	conn, err := w.db.Conn(ctx)
	if err != nil {
		return engine.StepResult{}, w.classify(ctx, req.StepID, err)
	}
	defer conn.Close()
	r := &stepRun{w: w, ctx: ctx, conn: conn, lw: lockWaiter{w: w}}
	var res engine.StepResult
	switch req.Kind {
	case plan.KindSeed:
		res, err = r.seed(req)
	case plan.KindModel:
		res, err = r.model(req)
	case plan.KindTest:
		res, err = r.test(req)
	case plan.KindSQL:
		res, err = r.sql(req, conn)
	default:
		err = engine.Errorf(engine.CodeInvalidArgument, "step %s: unknown kind %q (want seed, model, test or sql)", req.StepID, req.Kind)
	}
	if res.Ledger == nil { // a recorded result keeps the query ids of its commit
		res.QueryIDs = r.ids
	}
	if err != nil {
		// The ids of what ran before the failure come back with the error,
		// for the StepFailed payload.
		return res, w.classify(ctx, req.StepID, err)
	}
	return res, nil
}

// seedChunkBinds bounds values per INSERT: the driver uploads larger bind
// arrays to a stage instead of sending them inline.
const seedChunkBinds = 16000

func (r *stepRun) seed(req engine.StepRequest) (engine.StepResult, error) {
	rel, err := relationName(req)
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
	defs := make([]string, len(seed.Columns))
	for i, c := range seed.Columns {
		cols[i] = ident(c)
		defs[i] = cols[i] + " " + snowflakeType(seed.Types[i])
	}
	if _, err := r.exec("CREATE OR REPLACE TABLE " + rel + " (" + strings.Join(defs, ", ") + ")"); err != nil {
		return engine.StepResult{}, err
	}
	// Typed bind arrays cannot hold NULL, so rows are grouped by which
	// columns are NULL and each group inserts only its other columns (the
	// omitted ones default to NULL).
	groups := map[string][]int{}
	var order []string
	for i, row := range seed.Rows {
		var mask strings.Builder
		for _, v := range row {
			if v == nil {
				mask.WriteByte('0')
			} else {
				mask.WriteByte('1')
			}
		}
		m := mask.String()
		if _, ok := groups[m]; !ok {
			order = append(order, m)
		}
		groups[m] = append(groups[m], i)
	}
	var inserted int64
	for _, m := range order {
		var present []int
		for c := range m {
			if m[c] == '1' {
				present = append(present, c)
			}
		}
		idx := groups[m]
		if len(present) == 0 {
			// An all-NULL row: nothing to bind.
			for range idx {
				if _, err := r.exec("INSERT INTO " + rel + " (" + cols[0] + ") SELECT NULL"); err != nil {
					return engine.StepResult{}, err
				}
				inserted++
			}
			continue
		}
		names := make([]string, len(present))
		for j, c := range present {
			names[j] = cols[c]
		}
		stmt := "INSERT INTO " + rel + " (" + strings.Join(names, ", ") + ") VALUES (" + placeholders(len(present)) + ")"
		chunk := max(1, seedChunkBinds/len(present))
		for lo := 0; lo < len(idx); lo += chunk {
			part := idx[lo:min(lo+chunk, len(idx))]
			args := make([]any, len(present))
			for j, c := range present {
				args[j] = seedArray(seed, c, part)
			}
			res, err := r.exec(stmt, args...)
			if err != nil {
				return engine.StepResult{}, err
			}
			n, _ := res.RowsAffected()
			inserted += n
		}
	}
	return engine.StepResult{RowCount: int64(len(seed.Rows)), RowsAffected: inserted}, nil
}

// seedArray is column c of the given rows as a typed bind array.
func seedArray(seed *plan.SeedTable, c int, rows []int) any {
	switch seed.Types[c] {
	case plan.TypeInteger:
		a := make([]int64, len(rows))
		for i, r := range rows {
			a[i] = seed.Rows[r][c].(int64)
		}
		return gosnowflake.Array(a)
	case plan.TypeReal:
		a := make([]float64, len(rows))
		for i, r := range rows {
			a[i] = seed.Rows[r][c].(float64)
		}
		return gosnowflake.Array(a)
	default:
		a := make([]string, len(rows))
		for i, r := range rows {
			a[i] = seed.Rows[r][c].(string)
		}
		return gosnowflake.Array(a)
	}
}

func snowflakeType(seedType string) string {
	switch seedType {
	case plan.TypeInteger:
		return "NUMBER(38, 0)"
	case plan.TypeReal:
		return "FLOAT"
	default:
		return "VARCHAR"
	}
}

func (r *stepRun) model(req engine.StepRequest) (engine.StepResult, error) {
	rel, err := relationName(req)
	if err != nil {
		return engine.StepResult{}, err
	}
	body, err := singleStatement(req.SQL)
	if err != nil {
		return engine.StepResult{}, engine.Errorf(engine.CodePlanInvalid, "model %s: %w", req.StepID, err)
	}
	switch mat := req.Materialized; mat {
	case plan.MaterializedTable:
		if _, err := r.exec("CREATE OR REPLACE TABLE "+rel+" AS\n"+body+"\n", req.Params...); err != nil {
			return engine.StepResult{}, err
		}
		n, err := r.count("SELECT COUNT(*) FROM " + rel)
		if err != nil {
			return engine.StepResult{}, err
		}
		return engine.StepResult{RowCount: n}, nil
	case plan.MaterializedView, "":
		if len(req.Params) > 0 {
			return engine.StepResult{}, engine.Errorf(engine.CodePlanInvalid, "model %s: a view cannot take parameters (Snowflake stores its text)", req.StepID)
		}
		if _, err := r.exec("CREATE OR REPLACE VIEW " + rel + " AS\n" + body + "\n"); err != nil {
			return engine.StepResult{}, err
		}
		return engine.StepResult{}, nil
	case plan.MaterializedIncremental:
		return r.incremental(req, rel, body)
	default:
		return engine.StepResult{}, engine.Errorf(engine.CodePlanInvalid, "model %s: materialized %q is not table, view or incremental", req.StepID, req.Materialized)
	}
}

func (r *stepRun) test(req engine.StepRequest) (engine.StepResult, error) {
	body, err := singleStatement(req.SQL)
	if err != nil {
		return engine.StepResult{}, engine.Errorf(engine.CodePlanInvalid, "test %s: %w", req.StepID, err)
	}
	// The newlines keep a trailing -- comment from swallowing the ')'.
	n, err := r.count("SELECT COUNT(*) FROM (\n"+body+"\n)", req.Params...)
	if err != nil || n == 0 {
		return engine.StepResult{Failures: n}, err
	}
	// A failing test's first rows, for its StepFailed: the same query,
	// bounded (its query id joins the step's).
	sample, err := r.sample("SELECT * FROM (\n"+body+"\n) LIMIT "+strconv.Itoa(engine.FailingRowsSample), req.Params...)
	if err != nil {
		return engine.StepResult{}, err
	}
	return engine.StepResult{Failures: n, FailingRows: sample}, nil
}

func (r *stepRun) sql(req engine.StepRequest, conn *sql.Conn) (engine.StepResult, error) {
	stmts := splitStatements(req.SQL)
	if len(stmts) == 0 {
		return engine.StepResult{}, engine.Errorf(engine.CodePlanInvalid, "sql step %s: SQL is empty", req.StepID)
	}
	if len(stmts) > 1 && len(req.Params) > 0 {
		return engine.StepResult{}, engine.Errorf(engine.CodePlanInvalid, "sql step %s: parameters need a single statement (Snowflake cannot bind in multi-statement requests)", req.StepID)
	}
	run := func() (engine.StepResult, error) {
		var total int64
		for _, st := range stmts {
			res, err := r.exec(st, req.Params...)
			if err != nil {
				return engine.StepResult{}, err
			}
			if n, err := res.RowsAffected(); err == nil {
				total += n
			}
		}
		// The ids go into the ledger row with the result.
		return engine.StepResult{RowsAffected: total, QueryIDs: slices.Clone(r.ids)}, nil
	}
	if !dmlOnly(stmts) {
		// DDL commits an open transaction in Snowflake, so a step with DDL
		// cannot join the ledger's: it runs as before, at least once.
		return run()
	}
	return r.ledgered(req, conn, run)
}

// ledgered runs DML work (run's statements go through r) in the step
// ledger's transaction on conn, or on its own when req names no logical
// attempt.
//
// The transaction holds the step's ledger row (see
// sql/snowflake/warehouse.sql): the run's fence is claimed first, which also
// serialises the run's ledgered steps; an attempt whose row exists comes
// back with its recorded result and is not run again; otherwise the work
// and a conditional insert of the row commit together.
func (r *stepRun) ledgered(req engine.StepRequest, conn *sql.Conn, run func() (engine.StepResult, error)) (engine.StepResult, error) {
	if req.RunID == "" || req.LogicalAttempt <= 0 {
		return run()
	}
	w, ctx := r.w, r.ctx
	f, err := r.ensureFence(conn, req.RunID, req.Fence)
	if err != nil {
		return engine.StepResult{}, err
	}
	claimText, err := w.fenceStmt("claim_fence", f.table)
	if err != nil {
		return engine.StepResult{}, err
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return engine.StepResult{}, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	var claim sql.Result
	if err := r.lw.do(ctx, f.name, req.RunID, func() error {
		claim, err = tx.ExecContext(ctx, claimText, req.Fence, req.RunID, req.Fence, req.RunID)
		return err
	}); err != nil {
		if objectMissing(err) {
			// The run's table is gone under the fence this Warehouse had
			// made sure of: closed at the run's end, or removed by hand.
			_ = tx.Rollback()
			return engine.StepResult{}, r.fenceGone(conn, req, err)
		}
		return engine.StepResult{}, err
	}
	if n, _ := claim.RowsAffected(); n == 0 {
		_ = tx.Rollback()
		if closed, err := w.fenceClosed(ctx, conn, req.RunID); err != nil {
			return engine.StepResult{}, err
		} else if closed {
			return engine.StepResult{}, r.refuseClosed(conn, req, true)
		}
		return engine.StepResult{}, engine.Errorf(engine.CodeLeaseLost, "step %s: run %s has committed work under a newer lease than this runner's (fence %d); nothing was written", req.StepID, req.RunID, req.Fence)
	}
	if e, ok, err := w.lookup(ctx, tx, req.RunID, req.StepID, req.LogicalAttempt); err != nil || ok {
		return e.Result, err
	}
	r.conn = tx
	res, err := run()
	r.conn = conn
	if err != nil {
		return res, err
	}
	b, err := json.Marshal(res)
	if err != nil {
		return engine.StepResult{}, err
	}
	ins, err := tx.ExecContext(ctx, w.q["insert_ledger"], req.RunID, req.StepID, req.LogicalAttempt, req.EngineAttempt, req.Fence, string(b),
		req.RunID, req.StepID, req.LogicalAttempt)
	if err != nil {
		return engine.StepResult{}, err
	}
	if n, _ := ins.RowsAffected(); n == 0 {
		// Committed by another runner in between: roll this work back.
		if err := tx.Rollback(); err != nil {
			return engine.StepResult{}, err
		}
		e, ok, err := w.lookup(ctx, conn, req.RunID, req.StepID, req.LogicalAttempt)
		if err == nil && !ok {
			err = engine.Errorf(engine.CodeStoreCorrupt, "step %s: the ledger refused attempt %d but holds no row for it", req.StepID, req.LogicalAttempt)
		}
		return e.Result, err
	}
	if err := tx.Commit(); err != nil {
		return engine.StepResult{}, err
	}
	return res, nil
}

// LookupStep implements engine.Ledger.
func (w *Warehouse) LookupStep(ctx context.Context, runID, stepID string, logicalAttempt int) (engine.LedgerEntry, bool, error) {
	e, ok, err := w.lookup(ctx, w.db, runID, stepID, logicalAttempt)
	if err != nil {
		return engine.LedgerEntry{}, false, w.classify(ctx, stepID, err)
	}
	return e, ok, nil
}

// lookup reads a step attempt's ledger row (store.LookupLedger).
func (w *Warehouse) lookup(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, runID, stepID string, logical int) (engine.LedgerEntry, bool, error) {
	return store.LookupLedger(ctx, q, w.q["ledger_entry"], runID, stepID, logical)
}

// dmlOnly reports whether every statement is DML or a query, which an
// explicit Snowflake transaction can hold.
func dmlOnly(stmts []string) bool {
	for _, st := range stmts {
		st = strings.TrimLeft(st, " \t\r\n(")
		for strings.HasPrefix(st, "/*") {
			end := strings.Index(st, "*/")
			if end < 0 {
				return false
			}
			st = strings.TrimLeft(st[end+2:], " \t\r\n(")
		}
		word := st
		if i := strings.IndexFunc(st, func(c rune) bool { return !unicode.IsLetter(c) }); i >= 0 {
			word = st[:i]
		}
		switch strings.ToUpper(word) {
		case "INSERT", "UPDATE", "DELETE", "MERGE", "TRUNCATE", "SELECT", "WITH":
		default:
			return false
		}
	}
	return true
}

// singleStatement trims a body and its trailing semicolons and refuses
// several statements, which CREATE … AS and count(*) cannot wrap.
func singleStatement(sql string) (string, error) {
	stmts := splitStatements(sql)
	switch len(stmts) {
	case 0:
		return "", errors.New("SQL is empty")
	case 1:
		return strings.TrimSpace(strings.TrimRight(strings.TrimSpace(sql), ";")), nil
	}
	return "", fmt.Errorf("SQL holds %d statements; a model or test is one query", len(stmts))
}

// simpleIdent is an identifier Snowflake would resolve unquoted.
var simpleIdent = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]*$`)

// relationRE is the identifier rule of engine plans.
var relationRE = regexp.MustCompile(`^[A-Za-z_\p{L}][A-Za-z0-9_$\p{L}\p{N}]*$`)

// ident quotes a name for Snowflake. A simple name is upper-cased first so
// that the quoted form is the object an unquoted reference in a model's SQL
// (select * from orders) resolves to.
func ident(name string) string {
	if simpleIdent.MatchString(name) {
		name = strings.ToUpper(name)
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

func relationName(req engine.StepRequest) (string, error) {
	switch rel := req.Relation; {
	case rel == "":
		return "", engine.Errorf(engine.CodeInvalidArgument, "step %s: no relation name", req.StepID)
	case !relationRE.MatchString(rel):
		if schema, name, ok := strings.Cut(rel, "."); ok && relationRE.MatchString(schema) && relationRE.MatchString(name) {
			return "", engine.Errorf(engine.CodePlanInvalid, "step %s: relation name %q is schema-qualified; the Snowflake warehouse builds in its session's schema (import the dbt manifest without --keep-schemas)", req.StepID, rel)
		}
		return "", engine.Errorf(engine.CodePlanInvalid, "step %s: relation name %q is not a valid identifier", req.StepID, rel)
	default:
		return ident(rel), nil
	}
}

// classify: a done context wins (the caller gets ctx.Err(), the query was
// aborted by the driver); contention, network and expired sessions are
// transient STORE_UNAVAILABLE; anything else the step's SQL did is
// STEP_FAILED with Snowflake's message.
func (w *Warehouse) classify(ctx context.Context, stepID string, err error) error {
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
	err = scrub(err, w.secrets)
	what := "Snowflake warehouse " + w.where
	if stepID != "" {
		what = "step " + stepID + " on " + what
	}
	if retryable(err) {
		return engine.MarkTransient(&engine.Error{Code: engine.CodeStoreUnavailable, Msg: fmt.Sprintf("%s: %v", what, err), Err: err})
	}
	return &engine.Error{Code: engine.CodeStepFailed, Msg: fmt.Sprintf("%s: %v", what, err), Err: err}
}

var _ engine.Warehouse = (*Warehouse)(nil)
