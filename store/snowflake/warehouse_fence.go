package snowflake

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/snowflakedb/gosnowflake"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// The fence of a run lives in a table of its own (issue 16, see
// sql/snowflake/warehouse.sql): Snowflake locks whole tables for UPDATE, so
// a fence row in a table all runs share made a transaction left open by one
// dead runner block the ledgered steps of every run.

// fenceTable is the unquoted name of runID's fence table: derived through
// sha256, so no byte of the run id reaches the SQL text, and upper case, so
// that it is the same name quoted or not (SHOW LOCKS shows it so).
func fenceTable(runID string) string {
	sum := sha256.Sum256([]byte(runID))
	return "DVT_FENCE_" + strings.ToUpper(hex.EncodeToString(sum[:8]))
}

// FenceTableName is the (unquoted, upper case) name of runID's fence
// table, for operators and tests that look for it.
func FenceTableName(runID string) string { return fenceTable(runID) }

// Warehouse.legacy: whether the shared dvt_run_fences of earlier versions
// exists, asked once.
const (
	legacyUnknown int32 = iota
	legacyAbsent
	legacyPresent
)

// maxCachedFences bounds Warehouse.fences.
const maxCachedFences = 10000

// runFence is what a Warehouse made sure of for one run's fence.
type runFence struct {
	table  string // quoted
	name   string // unquoted, upper case
	legacy bool   // the run has a row in the shared dvt_run_fences of earlier versions
	raised int64  // the fence that row was raised to (under Warehouse.fenceMu)
}

// fenceStmt is a fence statement of warehouse.sql for table (quoted).
func (w *Warehouse) fenceStmt(name, table string) (string, error) {
	return plan.RenderThis(w.q[name], table)
}

// ensureFence creates runID's fence table and row outside any transaction,
// once per run and Warehouse (it costs round trips on every ledgered step
// otherwise), and fences off a runner of an earlier version of the run that
// still claims the shared dvt_run_fences.
func (r *stepRun) ensureFence(conn *sql.Conn, runID string, fence int64) (*runFence, error) {
	w, ctx := r.w, r.ctx
	w.fenceMu.Lock()
	f := w.fences[runID]
	w.fenceMu.Unlock()
	if f == nil {
		name := fenceTable(runID)
		f = &runFence{name: name, table: ident(name)}
		first := int64(0)
		if w.legacy.Load() == legacyUnknown {
			var n int
			if err := conn.QueryRowContext(ctx, w.q["legacy_fences_exist"]).Scan(&n); err != nil {
				return nil, err
			}
			w.legacy.Store(map[bool]int32{false: legacyAbsent, true: legacyPresent}[n > 0])
		}
		if w.legacy.Load() == legacyPresent {
			var legacy sql.NullInt64
			err := conn.QueryRowContext(ctx, w.q["legacy_fence"], runID).Scan(&legacy)
			switch {
			case objectMissing(err):
				// `dvtrun warehouse cleanup` removed it: every run it named
				// had ended, and their fences are closed.
				w.legacy.Store(legacyAbsent)
			case err != nil:
				return nil, err
			case legacy.Valid:
				f.legacy, first = true, legacy.Int64
			}
		}
		for _, st := range []struct {
			name string
			args []any
		}{{"create_run_fence", nil}, {"ensure_fence_row", []any{runID, first, runID}}} {
			text, err := w.fenceStmt(st.name, f.table)
			if err != nil {
				return nil, err
			}
			// Two runners creating the same run's table at once may
			// conflict (000625): the table is there for the second try.
			for try := 1; ; try++ {
				_, err = conn.ExecContext(ctx, text, st.args...)
				if err == nil || !retryable(err) || try == 3 {
					break
				}
			}
			if err != nil {
				return nil, err
			}
		}
		w.fenceMu.Lock()
		if had := w.fences[runID]; had != nil {
			f = had
		} else {
			if len(w.fences) >= maxCachedFences {
				// A long-lived worker forgets old runs; making sure again
				// is idempotent and costs two round trips.
				clear(w.fences)
			}
			w.fences[runID] = f
		}
		w.fenceMu.Unlock()
	}
	w.fenceMu.Lock()
	raise := f.legacy && fence > f.raised
	w.fenceMu.Unlock()
	if raise {
		err := r.lw.do(ctx, "DVT_RUN_FENCES", runID, func() error {
			_, err := conn.ExecContext(ctx, w.q["raise_legacy_fence"], fence, runID, fence)
			return err
		})
		if err != nil {
			return nil, err
		}
		w.fenceMu.Lock()
		f.raised = max(f.raised, fence)
		w.fenceMu.Unlock()
	}
	return f, nil
}

// lockSlice is the LOCK_TIMEOUT of warehouse sessions for a lock-wait
// budget: a statement refused after it is tried again, with a progress
// line in between, until the budget is spent (lockWaiter). Whole seconds,
// as LOCK_TIMEOUT is; 1–5 s, a few lines per budget.
func lockSlice(budget time.Duration) time.Duration {
	return min(max(budget/4, time.Second), 5*time.Second).Truncate(time.Second)
}

// lockWaiter bounds the waits of one RunStep for locks other transactions
// hold. Each statement waits at most LOCK_TIMEOUT (a slice of the budget);
// one refused is reported and tried again until the waits add up to the
// budget, then the step fails with LockWait.Exceeded: STORE_UNAVAILABLE
// and not transient, so the runner stops the run, resumable, instead of
// retrying the step (retries would multiply the budget).
type lockWaiter struct {
	w      *Warehouse
	waited time.Duration
}

// do runs stmt until no other transaction's lock refuses it. table names
// the table when the caller knows it ("" takes it from the error), runID
// the run it belongs to, when known.
func (lw *lockWaiter) do(ctx context.Context, table, runID string, stmt func() error) error {
	budget := lw.w.opts.LockWait
	for {
		start := time.Now()
		err := stmt()
		if !lockTimedOut(err) {
			return err
		}
		// A LOCK_TIMEOUT of 0 (the DSN's choice) refuses at once: no busy loop.
		if d := time.Second - time.Since(start); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
		lw.waited += time.Since(start)
		wait := lw.w.describeWait(ctx, table, runID, err)
		wait.Waited, wait.Budget = lw.waited, budget
		if lw.waited >= budget {
			return wait.Exceeded()
		}
		lw.w.opts.OnWait.Report(wait)
	}
}

// lockHolderTx finds the holding transaction an error names, when it does.
var lockHolderTx = regexp.MustCompile(`(?i)in transaction (\d+)`)

// describeWait is the progress of a wait for table's lock: its holder and
// since when from SHOW LOCKS, on another session (the waiting one may be in
// a transaction a failed statement must not disturb), when it answers.
func (w *Warehouse) describeWait(ctx context.Context, table, runID string, cause error) engine.LockWait {
	named, holder := lockFromError(cause)
	if table == "" {
		table = named
	}
	lw := engine.LockWait{Resource: "table " + table, RunID: runID}
	if holder != "" {
		lw.Holder = "transaction " + holder
	}
	if table == "" {
		lw.Resource = "a table the step writes"
		return lw
	}
	locks, err := showLocks(ctx, w.db)
	if err != nil {
		return lw
	}
	for _, l := range locks {
		if l.holding() && sameTable(l.resource, table) {
			lw.Resource = "table " + l.resource
			lw.Holder = l.holder()
			lw.Since = l.acquiredOn
			break
		}
	}
	return lw
}

// lockFromError is the table a lock error names and the holding
// transaction, when it names them.
func lockFromError(err error) (table, holderTx string) {
	var se *gosnowflake.SnowflakeError
	if !errors.As(err, &se) {
		return "", ""
	}
	table = lockedTable(err)
	if m := lockHolderTx.FindStringSubmatch(se.Message); m != nil {
		holderTx = m[1]
	}
	return table, holderTx
}

// sameTable: SHOW LOCKS names DB.SCHEMA.TABLE; a name from an error may
// lack the database and schema.
func sameTable(resource, table string) bool {
	r, t := strings.ToUpper(resource), strings.ToUpper(table)
	return r == t || strings.HasSuffix(r, "."+t)
}

// qualified is DB.SCHEMA.name in the session's database and schema, as
// SHOW LOCKS names a table (asked once per Warehouse).
func (w *Warehouse) qualified(ctx context.Context, name string) (string, error) {
	w.fenceMu.Lock()
	schema := w.schema
	w.fenceMu.Unlock()
	if schema == "" {
		var db, sc sql.NullString
		if err := w.db.QueryRowContext(ctx, w.q["current_schema"]).Scan(&db, &sc); err != nil {
			return "", err
		}
		if !db.Valid || !sc.Valid {
			return "", engine.Errorf(engine.CodeInvalidArgument, "Snowflake warehouse %s has no current database and schema; name them in the DSN (…/database/schema)", w.where)
		}
		schema = db.String + "." + sc.String
		w.fenceMu.Lock()
		w.schema = schema
		w.fenceMu.Unlock()
	}
	return schema + "." + name, nil
}

// EndStaleTransactions ends every transaction that holds or waits for
// runID's fence table: what a runner that died inside a ledgered step left
// open (its session lives on, detached, and Snowflake would abort it only
// after 5 idle minutes while it blocks). Only the runner that took the
// run's lease calls it, before its first step: any holder then is a runner
// of the run with a lower fence, fenced off anyway. It returns how many
// transactions it ended. The role needs to see and abort the transactions
// of the warehouse's user (SHOW LOCKS, SYSTEM$ABORT_TRANSACTION): it does
// when every runner logs in as the same user.
func (w *Warehouse) EndStaleTransactions(ctx context.Context, runID string) (int, error) {
	// The run was continued here: its fence is closed at its end (CloseRun)
	// even when no ledgered step runs in this process.
	w.fenceMu.Lock()
	if len(w.taken) >= maxCachedFences {
		clear(w.taken)
	}
	w.taken[runID] = true
	w.fenceMu.Unlock()
	table, err := w.qualified(ctx, fenceTable(runID))
	if err != nil {
		return 0, w.classify(ctx, "", err)
	}
	locks, err := showLocks(ctx, w.db)
	if err != nil {
		return 0, w.classify(ctx, "", err)
	}
	// Waiting transactions too: a dead runner's claim that was queued on
	// the lock would take it once the holder is gone.
	seen, ended := map[string]bool{}, 0
	var first error
	for _, l := range locks {
		if !strings.EqualFold(l.resource, table) || l.transaction == "" || seen[l.transaction] {
			continue
		}
		seen[l.transaction] = true
		if err := abortTransaction(ctx, w.db, l.transaction); err != nil {
			if ctx.Err() != nil {
				return ended, ctx.Err()
			}
			// It may have ended meanwhile; try the others.
			if first == nil {
				first = w.classify(ctx, "", fmt.Errorf("ending transaction %s on the fence of run %s: %w", l.transaction, runID, err))
			}
			continue
		}
		ended++
	}
	return ended, first
}

// dvtrunTag is the QUERY_TAG of dvtrun's own warehouse requests (what
// steps send is the step's tag): JSON naming the operation and the run.
func dvtrunTag(op, runID string) string {
	b, _ := json.Marshal(struct {
		Op    string `json:"dvtrun"`
		RunID string `json:"run_id,omitempty"`
	}{op, runID})
	return string(b)
}

// fenceClosed reports whether runID's fence was closed (its end stored).
func (w *Warehouse) fenceClosed(ctx context.Context, q sqlConn, runID string) (bool, error) {
	var n int
	if err := q.QueryRowContext(ctx, w.q["fence_closed"], runID).Scan(&n); err != nil {
		return false, err
	}
	return n > 0, nil
}

// refuseClosed is the LEASE_LOST of a claim on a closed run. A stale
// runner that met no table made the run's table anew before its claim
// was refused (madeAnew): it is dropped again, so that the objects in the
// schema stay those of the runs in flight.
func (r *stepRun) refuseClosed(conn *sql.Conn, req engine.StepRequest, madeAnew bool) error {
	w := r.w
	w.forgetFence(req.RunID)
	if madeAnew {
		text, err := w.fenceStmt("drop_fence", ident(fenceTable(req.RunID)))
		if err == nil {
			_, _ = conn.ExecContext(r.ctx, text) // best effort: `dvtrun warehouse cleanup` removes it otherwise
		}
	}
	return engine.Errorf(engine.CodeLeaseLost, "step %s: run %s has ended and its fence is closed; this runner (fence %d) is stale and nothing was written", req.StepID, req.RunID, req.Fence)
}

// fenceGone answers a claim that found the run's table missing: LEASE_LOST
// when the run's fence was closed, otherwise a transient error (someone
// dropped a live run's table): the step's retry makes it anew.
func (r *stepRun) fenceGone(conn *sql.Conn, req engine.StepRequest, cause error) error {
	closed, err := r.w.fenceClosed(r.ctx, conn, req.RunID)
	if err != nil {
		return err
	}
	if closed {
		return r.refuseClosed(conn, req, false)
	}
	r.w.forgetFence(req.RunID)
	return engine.MarkTransient(&engine.Error{Code: engine.CodeStoreUnavailable,
		Msg: fmt.Sprintf("step %s: the fence table of run %s is gone; it is made again on the step's next attempt", req.StepID, req.RunID), Err: cause})
}

func (w *Warehouse) forgetFence(runID string) {
	w.fenceMu.Lock()
	delete(w.fences, runID)
	delete(w.taken, runID)
	w.fenceMu.Unlock()
}

// CloseRun closes runID's fence once its end is stored (runner.FenceCloser):
// it records the run in dvt_closed_fences and drops the run's fence table,
// in one request, so that fence tables do not pile up with the runs (see
// close_fence in sql/snowflake/warehouse.sql for why no stale runner can
// write after it). It acts only for a run whose fence this Warehouse made
// sure of or whose stale transactions it ended: a run without a ledgered
// step has no table, and costs nothing. fence is the closing runner's.
func (w *Warehouse) CloseRun(ctx context.Context, runID string, fence int64) error {
	w.fenceMu.Lock()
	_, made := w.fences[runID]
	took := w.taken[runID]
	w.fenceMu.Unlock()
	if !made && !took {
		return nil
	}
	if err := w.closeFence(ctx, runID, fence); err != nil {
		return w.classify(ctx, "", err)
	}
	w.forgetFence(runID)
	return nil
}

// closeFence records runID as closed, then drops its table.
func (w *Warehouse) closeFence(ctx context.Context, runID string, fence int64) error {
	text, err := w.fenceStmt("close_fence", ident(fenceTable(runID)))
	if err != nil {
		return err
	}
	if text, err = render(text, map[string]string{"run": hexLit(runID), "fence": intLit(fence)}, nil); err != nil {
		return err
	}
	mctx, err := gosnowflake.WithMultiStatement(gosnowflake.WithQueryTag(ctx, dvtrunTag("close run fence", runID)), 2)
	if err != nil {
		return err
	}
	_, err = w.db.ExecContext(mctx, text)
	return err
}

// FenceTableInfo is a run's fence table found in the warehouse's schema.
type FenceTableInfo struct {
	Name   string // DVT_FENCE_ and 16 hex digits
	RunID  string // "": the table has no row (its creation was interrupted)
	Fence  int64
	Closed bool // the run's fence was closed: the table is a leftover
}

// fenceName is the name of a fence table dvtrun made (fenceTable).
var fenceName = regexp.MustCompile(`^DVT_FENCE_[0-9A-F]{16}$`)

// FenceTables lists the run fence tables in the warehouse's schema, with
// the run each belongs to, for `dvtrun warehouse cleanup`.
func (w *Warehouse) FenceTables(ctx context.Context) ([]FenceTableInfo, error) {
	ctx = gosnowflake.WithQueryTag(ctx, dvtrunTag("warehouse cleanup", ""))
	rows, err := w.db.QueryContext(ctx, w.q["fence_tables"])
	if err != nil {
		return nil, w.classify(ctx, "", err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return nil, w.classify(ctx, "", err)
		}
		// Only the names dvtrun makes (upper case as Snowflake stores an
		// unquoted name; the test server keeps it as written).
		if n = strings.ToUpper(n); fenceName.MatchString(n) {
			names = append(names, n)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, w.classify(ctx, "", err)
	}
	out := make([]FenceTableInfo, 0, len(names))
	for _, n := range names {
		ft := FenceTableInfo{Name: n}
		text, err := w.fenceStmt("fence_rows", ident(n))
		if err != nil {
			return nil, err
		}
		var fence sql.NullInt64
		err = w.db.QueryRowContext(ctx, text).Scan(&ft.RunID, &fence)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case objectMissing(err): // dropped meanwhile (a run ended)
			continue
		case err != nil:
			return nil, w.classify(ctx, "", err)
		}
		ft.Fence = fence.Int64
		if ft.RunID != "" && fenceTable(ft.RunID) != n {
			return nil, engine.Errorf(engine.CodeStoreCorrupt, "fence table %s holds run %s, whose fence table is %s", n, ft.RunID, fenceTable(ft.RunID))
		}
		if ft.RunID != "" {
			if ft.Closed, err = w.fenceClosed(ctx, w.db, ft.RunID); err != nil {
				return nil, w.classify(ctx, "", err)
			}
		}
		out = append(out, ft)
	}
	return out, nil
}

// RemoveFence closes the fence of a run that has ended and drops its
// table, as the run's runner does at its end (CloseRun). Only for a run
// whose end the state store holds: a closed fence refuses every later
// claim of the run.
func (w *Warehouse) RemoveFence(ctx context.Context, ft FenceTableInfo) error {
	if ft.RunID == "" {
		return engine.Errorf(engine.CodeInvalidArgument, "fence table %s names no run", ft.Name)
	}
	if err := w.closeFence(ctx, ft.RunID, ft.Fence); err != nil {
		return w.classify(ctx, "", err)
	}
	w.forgetFence(ft.RunID)
	return nil
}

// LegacyFenceRuns lists the runs in the shared dvt_run_fences that
// versions before issue 16 kept; ok is false when the schema has none.
func (w *Warehouse) LegacyFenceRuns(ctx context.Context) (runs []string, ok bool, err error) {
	ctx = gosnowflake.WithQueryTag(ctx, dvtrunTag("warehouse cleanup", ""))
	var n int
	if err := w.db.QueryRowContext(ctx, w.q["legacy_fences_exist"]).Scan(&n); err != nil {
		return nil, false, w.classify(ctx, "", err)
	}
	if n == 0 {
		return nil, false, nil
	}
	rows, err := w.db.QueryContext(ctx, w.q["legacy_fence_runs"])
	if err != nil {
		return nil, false, w.classify(ctx, "", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, false, w.classify(ctx, "", err)
		}
		runs = append(runs, id)
	}
	if err := rows.Err(); err != nil {
		return nil, false, w.classify(ctx, "", err)
	}
	return runs, true, nil
}

// RemoveLegacyFences closes the fences of the runs in the shared
// dvt_run_fences and drops it. Only once every run it names has ended (the
// caller asks the state store): a closed fence refuses every later claim.
func (w *Warehouse) RemoveLegacyFences(ctx context.Context) error {
	mctx, err := gosnowflake.WithMultiStatement(gosnowflake.WithQueryTag(ctx, dvtrunTag("warehouse cleanup", "")), 2)
	if err == nil {
		_, err = w.db.ExecContext(mctx, w.q["remove_legacy_fences"])
	}
	if err != nil {
		return w.classify(ctx, "", err)
	}
	w.legacy.Store(legacyAbsent)
	return nil
}
