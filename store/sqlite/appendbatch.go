package sqlite

import (
	"context"
	"database/sql"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/audit"
	"github.com/dvtrun/dvtrun/store"
)

// batchRows is the most rows (or keys) one batch statement carries: a
// larger batch is written in chunks, so each batch form is prepared for at
// most batchRows sizes per store.
const batchRows = 128

// eventCols is the number of columns insert_event binds per row.
const eventCols = 19

// parallelMin is the batch size from which validate spreads the schema
// checks over the CPUs: below it the goroutines cost more than they save.
const parallelMin = 16

// validate checks each event's envelope (engine.Validate) and returns the
// error of the first invalid one, in the caller's order. The checks are
// independent and are the append's largest CPU cost, so a large batch is
// checked on every CPU.
func validate(events []engine.RunEventWrite) error {
	workers := min(runtime.GOMAXPROCS(0), len(events)/parallelMin)
	if workers < 2 {
		for _, e := range events {
			if err := engine.Validate(e); err != nil {
				return err
			}
		}
		return nil
	}
	errs := make([]error, len(events))
	per := (len(events) + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := 0; lo < len(events); lo += per {
		hi := min(lo+per, len(events))
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				if errs[i] = engine.Validate(events[i]); errs[i] != nil {
					return // the first error of this part is all that can be reported
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// single is events when it holds one event and nothing otherwise: a batch
// of more than one is written by insertBatch.
func single(events []engine.RunEventWrite) []engine.RunEventWrite {
	if len(events) == 1 {
		return events
	}
	return nil
}

// eventRow is rec's insert_event arguments and its chain link after head.
// The hash covers the columns as stored (audit.EventBytesV2).
func (s *Store) eventRow(rec engine.RunEventRecord, head, now string) (audit.Chained, []any) {
	link := audit.Chained{Hash: head}
	var prevCol, hashCol, digestCol any
	if !s.unchained {
		link = audit.Chain(head, []engine.RunEventRecord{rec})[0]
		prevCol, hashCol = link.PrevHash, link.Hash
		if link.PayloadSHA256 != "" {
			digestCol = link.PayloadSHA256
		}
	}
	e := rec.RunEventWrite
	return link, []any{e.RunID, rec.RunSeq, e.TenantID, e.ProjectID, e.EnvironmentID, e.EventID,
		string(e.EventType), nullable(e.StepID), e.PlanID, e.PlanVersion, e.LogicalAttemptID, e.EngineAttemptID,
		e.IdempotencyKey, e.EmittedAt.UTC().Format(engine.TimeFormat), now, nullableJSON(e.Payload),
		prevCol, hashCol, digestCol}
}

// batchStmt is the batch statement name for n rows of cols values each
// (its /*rows*/ list) or, when cols is 0, for n values (its marker list),
// prepared once per store and bound to tx. The caller holds writeMu.
func (s *Store) batchStmt(ctx context.Context, tx *sqlx.Tx, name, marker string, n, cols int) (*sql.Stmt, error) {
	key := name + "/" + strconv.Itoa(n)
	st, ok := s.batch[key]
	if !ok {
		list := placeholders(n)
		if cols > 0 {
			row := "(" + placeholders(cols) + ")"
			list = strings.TrimSuffix(strings.Repeat(row+",", n), ",")
		}
		var err error
		if st, err = s.db.PrepareContext(ctx, strings.Replace(s.q[name], marker, list, 1)); err != nil {
			return nil, classify(s.path, err)
		}
		s.batch[key] = st
	}
	return tx.StmtContext(ctx, st), nil
}

// insertBatch appends b's events (more than one) with one statement per
// table per batchRows events. The keys already stored are read first (the
// write lock is held: no other writer can add one before the insert) and
// come back as duplicates; the others get the next runSeqs and chain links
// and are inserted, each one counted. It returns the next runSeq and the
// chain's head after them.
func (s *Store) insertBatch(ctx context.Context, tx *sqlx.Tx, runID string, b store.Batch, now string, persisted time.Time,
	seq int64, head string, res *engine.AppendResult, stored map[string]engine.RunEventRecord) (int64, string, error) {
	existing := map[string]engine.RunEventRecord{}
	for lo := 0; lo < len(b.Events); lo += batchRows {
		part := b.Events[lo:min(lo+batchRows, len(b.Events))]
		q, err := s.batchStmt(ctx, tx, "existing_events", "/*keys*/", len(part), 0)
		if err != nil {
			return 0, "", err
		}
		args := make([]any, 0, len(part)+1)
		args = append(args, runID)
		for _, e := range part {
			args = append(args, e.IdempotencyKey)
		}
		recs, err := s.queryEvents(ctx, q, "", args...)
		if err != nil {
			return 0, "", err
		}
		for _, r := range recs {
			existing[r.IdempotencyKey] = r
		}
	}
	var rows []any
	var seqs []any
	for _, e := range b.Events {
		if r, ok := existing[e.IdempotencyKey]; ok {
			stored[e.IdempotencyKey] = r
			res.Deduped = append(res.Deduped, r)
			continue
		}
		rec := engine.RunEventRecord{RunEventWrite: e, RunSeq: seq, PersistedAt: persisted}
		link, args := s.eventRow(rec, head, now)
		rows = append(rows, args...)
		seqs = append(seqs, runID, seq)
		stored[e.IdempotencyKey] = rec
		res.Appended = append(res.Appended, rec)
		seq, head = seq+1, link.Hash
	}
	for lo := 0; lo < len(res.Appended); lo += batchRows {
		n := min(batchRows, len(res.Appended)-lo)
		ins, err := s.batchStmt(ctx, tx, "insert_events", "/*rows*/", n, eventCols)
		if err != nil {
			return 0, "", err
		}
		r, err := ins.ExecContext(ctx, rows[lo*eventCols:(lo+n)*eventCols]...)
		if err != nil {
			return 0, "", classify(s.path, err)
		}
		if got, _ := r.RowsAffected(); got != int64(n) {
			return 0, "", engine.Errorf(engine.CodeStoreCorrupt, "run %s: %d of %d events inserted although their idempotency keys were not stored", runID, got, n)
		}
		out, err := s.batchStmt(ctx, tx, "insert_outboxes", "/*rows*/", n, 2)
		if err != nil {
			return 0, "", err
		}
		if _, err := out.ExecContext(ctx, seqs[lo*2:(lo+n)*2]...); err != nil {
			return 0, "", classify(s.path, err)
		}
	}
	return seq, head, nil
}

// upsertSteps writes the changed step states (four values a step:
// run_id, step_id, status, logical_attempt_id), one statement per
// batchRows steps.
func (s *Store) upsertSteps(ctx context.Context, tx *sqlx.Tx, changed []any) error {
	const cols = 4
	for lo := 0; lo < len(changed); lo += batchRows * cols {
		part := changed[lo:min(lo+batchRows*cols, len(changed))]
		n := len(part) / cols
		if n == 1 {
			if _, err := s.exec(ctx, tx, "upsert_step_state", part...); err != nil {
				return err
			}
			continue
		}
		st, err := s.batchStmt(ctx, tx, "upsert_step_states", "/*rows*/", n, cols)
		if err != nil {
			return err
		}
		if _, err := st.ExecContext(ctx, part...); err != nil {
			return classify(s.path, err)
		}
	}
	return nil
}
