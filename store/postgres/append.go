package postgres

import (
	"context"
	"database/sql/driver"
	"errors"
	"runtime"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store"
)

// append is AppendAndEnqueue (lease nil) and AppendFenced in two round
// trips, pipelined on the pool's pgx connection: the first sends BEGIN, the
// run's row lock, the fence, the batch's stored keys and its steps' state;
// the second the writes and COMMIT (or ROLLBACK: all duplicates, or a
// refused transition). The transaction is open only between the two, for
// the Go decision in between.
func (s *Store) append(ctx context.Context, runID string, lease *engine.Lease, events []engine.RunEventWrite) (engine.AppendResult, error) {
	if len(events) == 0 {
		return engine.AppendResult{}, nil
	}
	// The envelope checks (a JSON Schema per event: most of the append's
	// own CPU) run beside the first round trip, and come first: an invalid
	// batch fails with them, whatever the server answers, and nothing is
	// written for it (the round trip's transaction is rolled back).
	valid := validation(events)
	// An append may run again after its connection was lost, even past
	// its COMMIT: a committed batch comes back the second time as Deduped.
	var res engine.AppendResult
	err := s.reconnect(ctx, func() (bool, error) {
		var err error
		res, err = s.appendOnce(ctx, runID, lease, events, valid)
		if err != nil && valid() != nil {
			return false, nil // an invalid batch is not retried: its error follows
		}
		return true, err
	})
	if verr := valid(); verr != nil {
		return engine.AppendResult{}, verr
	}
	if err != nil {
		return engine.AppendResult{}, s.classify(err)
	}
	return res, nil
}

// validation starts the envelope checks of events and returns what waits
// for their verdict: the error of the first invalid event in the batch's
// order, or nil. A batch of parallelMin events or more is checked on every
// CPU.
func validation(events []engine.RunEventWrite) func() error {
	parts := max(1, min(runtime.GOMAXPROCS(0), len(events)/parallelMin))
	per := (len(events) + parts - 1) / parts
	errs := make([]error, len(events))
	var wg sync.WaitGroup
	for lo := 0; lo < len(events); lo += per {
		wg.Go(func() {
			for i := lo; i < min(lo+per, len(events)); i++ {
				if errs[i] = engine.Validate(events[i]); errs[i] != nil {
					return // the first error of this part is all it can report
				}
			}
		})
	}
	return sync.OnceValue(func() error {
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// parallelMin is the batch size from which validation spreads the checks
// over the CPUs: below it the goroutines cost more than they save.
const parallelMin = 16

// appendOnce is one attempt of an append, on a connection of the pool.
func (s *Store) appendOnce(ctx context.Context, runID string, lease *engine.Lease, events []engine.RunEventWrite, valid func() error) (engine.AppendResult, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return engine.AppendResult{}, err
	}
	defer conn.Close()
	var res engine.AppendResult
	var appendErr error
	err = conn.Raw(func(dc any) error {
		c := dc.(*stdlib.Conn).Conn()
		appendErr = s.watchLocks(ctx, "the run's row in the "+s.name, runID, c.PgConn().PID, func() (err error) {
			res, err = s.appendOn(ctx, c, runID, lease, events, valid)
			return err
		})
		// Whatever failed, the connection goes back to the pool idle, or
		// not at all (driver.ErrBadConn makes database/sql drop it).
		if appendErr != nil && c.PgConn().TxStatus() != 'I' {
			if _, err := c.Exec(ctx, "ROLLBACK"); err != nil {
				return driver.ErrBadConn
			}
		}
		return nil
	})
	if appendErr != nil {
		return engine.AppendResult{}, appendErr
	}
	return res, err
}

func (s *Store) appendOn(ctx context.Context, c *pgx.Conn, runID string, lease *engine.Lease, events []engine.RunEventWrite, valid func() error) (engine.AppendResult, error) {
	var keys, stepIDs []string
	seenKey, seenStep := map[string]bool{}, map[string]bool{}
	for _, e := range events {
		if !seenKey[e.IdempotencyKey] {
			seenKey[e.IdempotencyKey] = true
			keys = append(keys, e.IdempotencyKey)
		}
		if _, changes := engine.TargetOf(e.EventType); changes && e.EventType.StepLevel() && !seenStep[e.StepID] {
			seenStep[e.StepID] = true
			stepIDs = append(stepIDs, e.StepID)
		}
	}

	// Round trip 1: the lock and everything the decision reads.
	var b pgx.Batch
	b.Queue("BEGIN")
	b.Queue("SET LOCAL plan_cache_mode = force_generic_plan")
	b.Queue(s.q["lock_seq"], runID)
	if lease != nil {
		b.Queue(s.q["lease_fence"], runID)
	}
	b.Queue(s.q["existing_events"], runID, keys)
	if len(stepIDs) > 0 {
		b.Queue(s.q["step_states"], runID, stepIDs)
	}
	br := c.SendBatch(ctx, &b)
	if err := valid(); err != nil {
		br.Close()
		return engine.AppendResult{}, err
	}
	row, stored, steps, err := s.readAppendBatch(br, runID, lease, len(stepIDs) > 0)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return engine.AppendResult{}, err
	}
	batch, err := store.FoldBatch(row.metadata(runID), events)
	if err != nil {
		return engine.AppendResult{}, err
	}

	// Round trip 2: the writes and COMMIT.
	var w pgx.Batch
	res, err := s.appendTx(runID, row, batch, s.now(), stored, steps, func(q string, args ...any) error {
		w.Queue(q, args...)
		return nil
	})
	if err != nil {
		return engine.AppendResult{}, err
	}
	if w.Len() == 0 {
		_, err := c.Exec(ctx, "ROLLBACK") // all duplicates: nothing to commit
		return res, err
	}
	w.Queue("COMMIT")
	if err := c.SendBatch(ctx, &w).Close(); err != nil {
		return engine.AppendResult{}, err
	}
	return res, nil
}

// readAppendBatch reads round trip 1's results in the order queued.
func (s *Store) readAppendBatch(br pgx.BatchResults, runID string, lease *engine.Lease, withSteps bool) (runRow, map[string]engine.RunEventRecord, map[string]engine.StepState, error) {
	var row runRow
	for range 2 { // BEGIN, SET LOCAL
		if _, err := br.Exec(); err != nil {
			return row, nil, nil, err
		}
	}
	var status string
	err := br.QueryRow().Scan(&row.nextSeq, &status, &row.tenant, &row.project, &row.env, &row.planID, &row.planVersion, &row.lastHash)
	row.status = engine.RunStatus(status)
	if errors.Is(err, pgx.ErrNoRows) {
		return row, nil, nil, engine.Errorf(engine.CodeRunNotFound, "run %s does not exist (bootstrap it first); nothing was written", runID)
	}
	if err != nil {
		return row, nil, nil, err
	}
	if lease != nil {
		var holder string
		var fence int64
		if err := br.QueryRow().Scan(&holder, &fence); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return row, nil, nil, err
		}
		if err := store.CheckFence(*lease, holder, fence); err != nil {
			return row, nil, nil, err
		}
	}
	stored := map[string]engine.RunEventRecord{}
	rows, err := br.Query()
	if err != nil {
		return row, nil, nil, err
	}
	for r, err := range s.scanEvents(rows) {
		if err != nil {
			rows.Close()
			return row, nil, nil, err
		}
		stored[r.IdempotencyKey] = r
	}
	rows.Close()
	steps := map[string]engine.StepState{}
	if !withSteps {
		return row, stored, steps, nil
	}
	rows, err = br.Query()
	if err != nil {
		return row, nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, status string
		var attempt int
		if err := rows.Scan(&id, &status, &attempt); err != nil {
			return row, nil, nil, err
		}
		steps[id] = engine.StepState{Status: engine.StepStatus(status), LogicalAttemptID: attempt}
	}
	return row, stored, steps, rows.Err()
}
