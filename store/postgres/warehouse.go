package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store"
)

// Warehouse runs plan steps in a Postgres database. It implements
// engine.Warehouse and engine.Ledger and is safe for concurrent use, by
// any number of processes.
//
// Step semantics (as the SQLite warehouse's):
//   - seed: the CSV (plan.ReadSeed) becomes table Relation, BIGINT,
//     NUMERIC and TEXT columns, loaded with COPY.
//   - model: table (CREATE TABLE … AS), view (the default, as in dbt) or
//     incremental (MERGE on UniqueKey, Postgres 15 or later; INSERT
//     without one). RowCount is set for tables.
//   - test: Failures is count(*) of the rows SQL returns.
//   - sql: the statements run one after another; ? placeholders are
//     numbered per statement and bound from Params.
//
// Every step is one transaction, its ledger row included: Postgres DDL is
// transactional, so a seed or a table model commits with its ledger row
// exactly as a sql step's INSERT does, and a step that fails or whose
// process dies leaves nothing behind (no half-built table, no ledger row).
// Relation names may be schema-qualified (schema.name, as dbt-postgres
// builds them); the schema is created when missing. An unqualified name is
// built in the session's current_schema().
//
// The session of a step carries application_name "dvtrun <run> <step>
// #<attempt>" (pg_stat_activity, log_line_prefix %a), as QUERY_TAG does on
// Snowflake; its statement_timeout is what remains of the step's deadline;
// lock_timeout bounds each lock wait by the --lock-wait budget; a cancelled
// context sends the server a cancel request.
type Warehouse struct {
	db    *sql.DB
	name  string // as printed: no password
	q     map[string]string
	opts  WarehouseOptions
	merge bool // the server has MERGE (Postgres 15 or later)
	// schema is current_schema() when the warehouse opened: where a step's
	// unqualified relation is built, and the renderer's schema (Relation).
	schema string
}

// WarehouseOptions configures OpenWarehouse.
type WarehouseOptions struct {
	// LockWait is the most one statement of a step waits for a lock
	// another session holds (the session's lock_timeout; default
	// engine.DefaultLockWait). Then the step fails with STORE_UNAVAILABLE
	// (engine.LockWait.Exceeded), not transient: the run stops, resumable.
	LockWait time.Duration
	// OnWait receives a progress report every few seconds of such a wait,
	// naming the blocking session by its application_name.
	OnWait engine.WaitFunc
	// IdleInTransaction ends a step's session that sits idle inside its
	// transaction this long (its process stopped, not dead), releasing its
	// locks; default DefaultIdleInTransaction.
	IdleInTransaction time.Duration
}

// tmpPrefix names the table a table model or seed is built into before it
// takes the relation's place. Relation names may not start with it.
const tmpPrefix = "dvt_tmp__"

// OpenWarehouse connects to the database of dsn (a libpq URL or key=value
// DSN) and creates the step ledger's tables if they are missing.
func OpenWarehouse(ctx context.Context, dsn string, opts WarehouseOptions) (*Warehouse, error) {
	if opts.LockWait <= 0 {
		opts.LockWait = engine.DefaultLockWait
	}
	if opts.IdleInTransaction <= 0 {
		opts.IdleInTransaction = DefaultIdleInTransaction
	}
	pc, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "the Postgres warehouse DSN %s does not parse", Redact(dsn))
	}
	cfg, err := pgxConfig(dsn, opts.LockWait, opts.IdleInTransaction)
	if err != nil {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "the Postgres warehouse DSN %s does not parse", Redact(dsn))
	}
	if _, set := pc.RuntimeParams["application_name"]; !set {
		cfg.RuntimeParams["application_name"] = "dvtrun warehouse"
	}
	// A step's statements are one-off text (DDL around a model's select):
	// the simple protocol sends each in one round trip, with no prepared
	// statement to cache, and lets CREATE TABLE … AS take parameters
	// (bound client-side by pgx, quoted, never spliced as text).
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	// A cancelled context sends the server a cancel request, so the
	// statement stops there too (by default pgx only closes the socket,
	// and the server would run the statement to its end).
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, CancelRequestDelay: 0, DeadlineDelay: 2 * time.Second}
	}
	w := &Warehouse{
		db:   stdlib.OpenDB(*cfg, stdlib.OptionAfterConnect(checkClient)),
		name: "Postgres warehouse " + strings.TrimPrefix(describe(pc), "Postgres "),
		opts: opts,
	}
	if w.q, err = sqlfiles.Queries(sqlfiles.Postgres, "warehouse.sql"); err != nil {
		w.db.Close()
		return nil, err
	}
	if err := createSearchPathSchema(ctx, w.db); err != nil {
		w.db.Close()
		return nil, w.classify(ctx, "", err)
	}
	var version int
	var schema sql.NullString
	if err := w.db.QueryRowContext(ctx, w.q["server_version"]).Scan(&version, &schema); err != nil {
		w.db.Close()
		return nil, w.classify(ctx, "", err)
	}
	w.merge = version >= 150000
	w.schema = schema.String
	if _, err := w.db.ExecContext(ctx, "BEGIN;\n"+w.q["create_ledger"]+";\nCOMMIT"); err != nil {
		w.db.Close()
		return nil, w.classify(ctx, "", err)
	}
	return w, nil
}

// checkClient: a session whose client is gone (the runner killed, its
// network lost) has its running statement cancelled within a second
// instead of running on to its end, as ABORT_DETACHED_QUERY does on
// Snowflake. The setting is Postgres 14's; older servers go without.
func checkClient(ctx context.Context, c *pgx.Conn) error {
	_, err := c.Exec(ctx, "SET client_connection_check_interval = 1000")
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42704" { // unrecognized configuration parameter
		return nil
	}
	return err
}

// Name is the warehouse as printed (no credentials).
func (w *Warehouse) Name() string { return w.name }

// DB gives direct access, for inspecting what steps built.
func (w *Warehouse) DB() *sql.DB { return w.db }

// Close closes the connection pool.
func (w *Warehouse) Close() error { return w.db.Close() }

// step is one step's transaction.
type step struct {
	w      *Warehouse
	ctx    context.Context
	req    engine.StepRequest
	conn   *sql.Conn
	tx     *sql.Tx
	schema string // current_schema() of the session: where unqualified relations go
}

// RunStep implements engine.Warehouse.
func (w *Warehouse) RunStep(ctx context.Context, req engine.StepRequest) (engine.StepResult, error) {
	if err := ctx.Err(); err != nil {
		return engine.StepResult{}, err
	}
	conn, err := w.db.Conn(ctx)
	if err != nil {
		return engine.StepResult{}, w.classify(ctx, req.StepID, err)
	}
	defer conn.Close()
	var pid uint32
	_ = conn.Raw(func(dc any) error {
		pid = dc.(*stdlib.Conn).Conn().PgConn().PID()
		return nil
	})
	var res engine.StepResult
	where := " in the " + w.name + " (step " + req.StepID + ")"
	lw := lockWatch{db: w.db, onWait: w.opts.OnWait, budget: w.opts.LockWait, where: where}
	err = lw.watch(ctx, "a relation"+where, req.RunID, func() uint32 { return pid }, func() (err error) {
		res, err = w.runStep(ctx, conn, req)
		return err
	})
	if err != nil {
		return engine.StepResult{}, w.classify(ctx, req.StepID, err)
	}
	return res, nil
}

func (w *Warehouse) runStep(ctx context.Context, conn *sql.Conn, req engine.StepRequest) (engine.StepResult, error) {
	var seed *plan.SeedTable
	if req.Kind == plan.KindSeed {
		var err error
		if seed, err = readSeed(req); err != nil {
			return engine.StepResult{}, err
		}
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return engine.StepResult{}, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	s := &step{w: w, ctx: ctx, req: req, conn: conn, tx: tx}
	var schema sql.NullString
	var a, b string
	if err := tx.QueryRowContext(ctx, w.q["step_session"], applicationName(req), statementTimeout(ctx)).Scan(&a, &b, &schema); err != nil {
		return engine.StepResult{}, err
	}
	s.schema = schema.String
	switch req.Kind {
	case plan.KindTest:
		// A read: no ledger row (a test has no effect to repeat).
		return s.test()
	case plan.KindSeed, plan.KindModel, plan.KindSQL:
	default:
		return engine.StepResult{}, engine.Errorf(engine.CodeInvalidArgument, "step %s: unknown kind %q (want seed, model, test or sql)", req.StepID, req.Kind)
	}
	ledger := req.RunID != "" && req.LogicalAttempt > 0
	if ledger {
		if e, ok, err := s.claim(); err != nil || ok {
			return e.Result, err
		}
	}
	var res engine.StepResult
	switch req.Kind {
	case plan.KindSeed:
		res, err = s.seed(seed)
	case plan.KindModel:
		res, err = s.model()
	case plan.KindSQL:
		res, err = s.sql()
	}
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

// claim takes the step's place in the ledger within its transaction: the
// run's fence is claimed (a runner that was taken over gets LEASE_LOST and
// commits nothing; steps of one runner share the claim, so they run side
// by side), other runners of the same attempt wait for this one, and an
// attempt whose row exists comes back with its recorded result (ok).
func (s *step) claim() (engine.LedgerEntry, bool, error) {
	ctx, tx, req, q := s.ctx, s.tx, s.req, s.w.q
	if _, err := tx.ExecContext(ctx, q["claim_fence_row"], req.RunID, req.Fence); err != nil {
		return engine.LedgerEntry{}, false, err
	}
	if _, err := tx.ExecContext(ctx, q["raise_fence"], req.RunID, req.Fence); err != nil {
		return engine.LedgerEntry{}, false, err
	}
	var fence int64
	if err := tx.QueryRowContext(ctx, q["claim_fence"], req.RunID).Scan(&fence); err != nil {
		return engine.LedgerEntry{}, false, err
	}
	if fence > req.Fence {
		return engine.LedgerEntry{}, false, engine.Errorf(engine.CodeLeaseLost, "step %s: run %s has committed work under a newer lease than this runner's (fence %d); nothing was written", req.StepID, req.RunID, req.Fence)
	}
	if _, err := tx.ExecContext(ctx, q["lock_attempt"], fmt.Sprintf("%q %q %d", req.RunID, req.StepID, req.LogicalAttempt)); err != nil {
		return engine.LedgerEntry{}, false, err
	}
	return s.w.lookup(ctx, tx, req.RunID, req.StepID, req.LogicalAttempt)
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

// applicationName is the step's application_name: run, step and engine
// attempt, in printable ASCII (what the server keeps) and at most 63 bytes
// (NAMEDATALEN; the server would cut it).
func applicationName(req engine.StepRequest) string {
	s := "dvtrun"
	if req.RunID != "" {
		s += " " + req.RunID
	}
	s += " " + req.StepID
	if req.EngineAttempt > 0 {
		s += " #" + strconv.Itoa(req.EngineAttempt)
	}
	b := []byte(s)
	for i, c := range b {
		if c < 32 || c > 126 {
			b[i] = '?'
		}
	}
	if len(b) > 63 {
		b = b[:63]
	}
	return string(b)
}

// statementTimeout is what remains of ctx's deadline and a second, in
// milliseconds, or "" without a deadline: the server's timeout is the
// backstop for a runner that is gone; a live one cancels at its deadline
// first, so the step ends as timed out (STEP_TIMEOUT), not failed.
func statementTimeout(ctx context.Context) string {
	d, ok := ctx.Deadline()
	if !ok {
		return ""
	}
	return strconv.FormatInt(max(1, time.Until(d).Milliseconds())+1000, 10)
}

// relation is a step's relation: its schema and name as Postgres stores
// them, and the qualified, quoted form statements use.
type relation struct {
	schema, name string
	quoted       string
}

// identRE is the identifier rule of engine plans, for each part.
var identRE = regexp.MustCompile(`^[A-Za-z_\p{L}][A-Za-z0-9_$\p{L}\p{N}]*$`)

// simpleIdent is a name Postgres folds to lower case when unquoted.
var simpleIdent = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]*$`)

// relation parses the step's Relation: name or schema.name.
func (s *step) relation() (relation, error) {
	raw := s.req.Relation
	if raw == "" {
		return relation{}, engine.Errorf(engine.CodeInvalidArgument, "step %s: no relation name", s.req.StepID)
	}
	parts := strings.Split(raw, ".")
	if len(parts) > 2 {
		return relation{}, engine.Errorf(engine.CodePlanInvalid, "step %s: relation name %q has more than two parts (schema.name); the database is the warehouse DSN's", s.req.StepID, raw)
	}
	for i, p := range parts {
		if !identRE.MatchString(p) || len(p) > 63 {
			return relation{}, engine.Errorf(engine.CodePlanInvalid, "step %s: relation name %q is not a valid identifier (at most 63 bytes a part)", s.req.StepID, raw)
		}
		parts[i] = stored(p)
	}
	r := relation{schema: s.schema, name: parts[len(parts)-1]}
	if len(parts) == 2 {
		r.schema = parts[0]
	}
	if strings.HasPrefix(r.name, tmpPrefix) {
		return relation{}, engine.Errorf(engine.CodePlanInvalid, "step %s: relation name %q uses a reserved prefix", s.req.StepID, raw)
	}
	if r.schema == "" {
		return relation{}, engine.Errorf(engine.CodeStepFailed, "step %s: the session has no current schema to build %s in (check search_path, or qualify the name)", s.req.StepID, raw)
	}
	r.quoted = quoteIdent(r.schema) + "." + quoteIdent(r.name)
	return r, nil
}

// stored is the name Postgres stores for an identifier an unquoted
// reference resolves to: simple names lower-cased (select * from Orders
// reads orders), others as written.
func stored(name string) string {
	if simpleIdent.MatchString(name) {
		return strings.ToLower(name)
	}
	return name
}

// tmpName is the name a relation is built under before it takes its place
// (63 bytes at most, as the server would cut it).
func tmpName(name string) string {
	if len(tmpPrefix)+len(name) <= 63 {
		return tmpPrefix + name
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	return fmt.Sprintf("%s%016x", tmpPrefix, h.Sum64())
}

// quoteIdent quotes an identifier, doubling embedded quotes.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// classify: a done context wins (the caller gets ctx.Err(); the server was
// sent a cancel request); a lock wait past the budget is STORE_UNAVAILABLE,
// not transient (the run stops, resumable); deadlocks, serialisation
// failures and lost, refused or timed-out connections are transient
// STORE_UNAVAILABLE; refused credentials STORE_UNAVAILABLE; a missing
// database CONFIG_INVALID; anything else the step's SQL did is STEP_FAILED with
// the server's message.
func (w *Warehouse) classify(ctx context.Context, stepID string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	what := "the " + w.name
	if stepID != "" {
		what = "step " + stepID + " on the " + w.name
	}
	var pe *pgconn.PgError
	if connectFailed(err) && !errors.As(err, &pe) {
		return engine.MarkTransient(&engine.Error{Code: engine.CodeStoreUnavailable, Msg: fmt.Sprintf("%s: cannot reach the warehouse: %v", what, err), Err: err})
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var ee *engine.Error
	if errors.As(err, &ee) {
		return err
	}
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "3D000":
			return missingDatabase(w.name, pe)
		case pe.Code == "55P03": // lock_not_available: lock_timeout ran out
			resource := "a table or row in the " + w.name
			if stepID != "" {
				resource = "what step " + stepID + " needs in the " + w.name
			}
			ex := engine.LockWait{Resource: resource, Budget: w.opts.LockWait}.Exceeded()
			var e *engine.Error
			if errors.As(ex, &e) {
				e.Err = err
			}
			return ex
		case pe.Code == "40001" || pe.Code == "40P01" || pe.Code == "57P01" || pe.Code == "57P03" || pe.Code == "53300" || strings.HasPrefix(pe.Code, "08"):
			return engine.MarkTransient(&engine.Error{Code: engine.CodeStoreUnavailable, Msg: fmt.Sprintf("%s: the warehouse is unavailable for now: %s (SQLSTATE %s)", what, pe.Message, pe.Code), Err: err})
		case strings.HasPrefix(pe.Code, "28"):
			return &engine.Error{Code: engine.CodeStoreUnavailable, Msg: fmt.Sprintf("cannot use the %s: %s (SQLSTATE %s)", w.name, pe.Message, pe.Code), Err: err}
		case pe.Code == "57014": // query_canceled with a live context: statement_timeout
			return &engine.Error{Code: engine.CodeStepFailed, Msg: fmt.Sprintf("%s: %s (the step's timeout)", what, pe.Message), Err: err}
		}
		msg := pe.Message
		if pe.Detail != "" {
			msg += " (" + pe.Detail + ")"
		}
		if stepID == "" {
			return &engine.Error{Code: engine.CodeStoreUnavailable, Msg: fmt.Sprintf("%s: %s (SQLSTATE %s)", what, msg, pe.Code), Err: err}
		}
		return &engine.Error{Code: engine.CodeStepFailed, Msg: fmt.Sprintf("%s: %s (SQLSTATE %s)", what, msg, pe.Code), Err: err}
	}
	if lostConn(err) || errors.As(err, new(*pgconn.ConnectError)) {
		return engine.MarkTransient(&engine.Error{Code: engine.CodeStoreUnavailable, Msg: fmt.Sprintf("%s: cannot reach the warehouse: %v", what, err), Err: err})
	}
	if stepID == "" {
		return &engine.Error{Code: engine.CodeStoreUnavailable, Msg: fmt.Sprintf("%s: %v", what, err), Err: err}
	}
	return &engine.Error{Code: engine.CodeStepFailed, Msg: fmt.Sprintf("%s: %v", what, err), Err: err}
}

var (
	_ engine.Warehouse = (*Warehouse)(nil)
	_ engine.Ledger    = (*Warehouse)(nil)
)
