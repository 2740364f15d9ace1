package snowflake

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
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
			if err := conn.QueryRowContext(ctx, w.q["legacy_fence"], runID).Scan(&legacy); err != nil {
				return nil, err
			}
			if legacy.Valid {
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
