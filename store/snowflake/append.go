package snowflake

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"maps"
	"slices"
	"time"

	"github.com/snowflakedb/gosnowflake"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store"
)

// The append path costs three requests on one session:
//
//  1. BEGIN; UPDATE the run's dvt_run_seq row   (takes the lock)
//  2. SELECT the run's row, the stored events with the batch's keys and the
//     states of the steps it touches           (decided under the lock)
//  3. MERGE events; INSERT outbox; UPDATE seq; MERGE step states; COMMIT
//     — or ROLLBACK when nothing is new or Layer 2 refuses the batch.
//
// Requests 1 and 3 are multi-statement requests, so their values are hex
// literals (script.go); request 2 binds its values.

// lockedTx runs one transaction on a pinned session: lock (a statement run
// right after BEGIN in the same request), then body, which reads under the
// lock and returns the statements to commit, or none to roll back. The whole
// transaction is retried when contention aborts it. If a network failure hid
// a COMMIT that did happen, the retry finds the events stored and reports
// them as Deduped: the append stays exactly-once either way.
func (s *Store) lockedTx(ctx context.Context, lock string, body func(c *sql.Conn) (script, error)) error {
	return s.withRetry(ctx, func() error {
		c, err := s.db.Conn(ctx)
		if err != nil {
			return s.classify("connect", err)
		}
		defer c.Close()
		committed := false
		defer func() {
			if !committed {
				s.rollback(ctx, c)
			}
		}()
		if err := s.execScript(ctx, c, script{s.q["begin"], lock}); err != nil {
			return s.classify("lock", err)
		}
		sc, err := body(c)
		if err != nil || len(sc) == 0 {
			return err
		}
		if err := s.execScript(ctx, c, append(sc, s.q["commit"])); err != nil {
			return s.classify("write", err)
		}
		committed = true
		return nil
	})
}

// rollback ends the session's transaction even when ctx is cancelled. A
// session whose rollback fails is discarded rather than handed to the next
// caller with a transaction open (Snowflake ignores a nested BEGIN).
func (s *Store) rollback(ctx context.Context, c *sql.Conn) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := c.ExecContext(rctx, s.q["rollback"]); err != nil {
		c.Raw(func(any) error { return driver.ErrBadConn })
	}
}

// execScript sends statements as one request.
func (s *Store) execScript(ctx context.Context, c *sql.Conn, sc script) error {
	if len(sc) == 1 {
		_, err := c.ExecContext(ctx, sc[0])
		return err
	}
	mctx, err := gosnowflake.WithMultiStatement(ctx, len(sc))
	if err != nil {
		return err
	}
	_, err = c.ExecContext(mctx, sc.text())
	return err
}

// runRow is what the append path reads of a run, under its lock.
type runRow struct {
	nextSeq              int64
	status               engine.RunStatus
	tenant, project, env string
	planID, planVersion  string
	lastPersisted        time.Time
}

// metadata is the part of the run's dvt_runs row its events must match.
func (r runRow) metadata(runID string) engine.RunMetadata {
	return engine.RunMetadata{RunID: runID, TenantID: r.tenant, ProjectID: r.project, EnvironmentID: r.env, PlanID: r.planID, PlanVersion: r.planVersion}
}

// appendState is everything request 2 reads.
type appendState struct {
	found  bool
	row    runRow
	stored map[string]engine.RunEventRecord // by idempotency key
	steps  map[string]engine.StepState
}

// BootstrapRun implements store.Store.
func (s *Store) BootstrapRun(ctx context.Context, meta engine.RunMetadata, first []engine.RunEventWrite) (engine.AppendResult, error) {
	if err := engine.ValidateMetadata(meta); err != nil {
		return engine.AppendResult{}, err
	}
	for _, e := range first {
		if err := engine.Validate(e); err != nil {
			return engine.AppendResult{}, err
		}
	}
	row := runRow{nextSeq: 1, status: engine.StatusNone, tenant: meta.TenantID, project: meta.ProjectID, env: meta.EnvironmentID, planID: meta.PlanID, planVersion: meta.PlanVersion}
	b, err := store.FoldBatch(meta, first)
	if err != nil {
		return engine.AppendResult{}, err
	}
	lock, err := render(s.q["lock_bootstrap"], nil, nil)
	if err != nil {
		return engine.AppendResult{}, err
	}
	var res engine.AppendResult
	err = s.lockedTx(ctx, lock, func(c *sql.Conn) (script, error) {
		var n int
		if err := c.QueryRowContext(ctx, s.q["run_exists"], meta.RunID).Scan(&n); err != nil {
			return nil, s.classify("read run", err)
		}
		if n > 0 {
			return nil, engine.Errorf(engine.CodeRunAlreadyExists, "run %s already exists; nothing was written", meta.RunID)
		}
		st := appendState{found: true, row: row, stored: map[string]engine.RunEventRecord{}, steps: map[string]engine.StepState{}}
		var sc script
		res, sc, err = s.planAppend(meta.RunID, st, b, &meta)
		return sc, err
	})
	if err != nil {
		return engine.AppendResult{}, err
	}
	return res, nil
}

// AppendAndEnqueue implements store.Store.
func (s *Store) AppendAndEnqueue(ctx context.Context, runID string, events []engine.RunEventWrite) (engine.AppendResult, error) {
	if len(events) == 0 {
		return engine.AppendResult{}, nil
	}
	// Envelope checks first, before any request: nothing is written for an
	// invalid batch. The checks against the run's row run under the lock.
	for _, e := range events {
		if err := engine.Validate(e); err != nil {
			return engine.AppendResult{}, err
		}
	}
	lock, err := render(s.q["lock_run"], map[string]string{"run_id": hexLit(runID)}, nil)
	if err != nil {
		return engine.AppendResult{}, err
	}
	var keys, steps []string
	seenKey, seenStep := map[string]bool{}, map[string]bool{}
	for _, e := range events {
		if !seenKey[e.IdempotencyKey] {
			seenKey[e.IdempotencyKey] = true
			keys = append(keys, e.IdempotencyKey)
		}
		if _, changes := engine.TargetOf(e.EventType); changes && e.EventType.StepLevel() && !seenStep[e.StepID] {
			seenStep[e.StepID] = true
			steps = append(steps, e.StepID)
		}
	}
	read := inList(inList(s.q["append_state"], "/*keys*/", len(keys)), "/*steps*/", len(steps))
	args := []any{runID, runID}
	for _, k := range keys {
		args = append(args, k)
	}
	args = append(args, runID)
	for _, st := range steps {
		args = append(args, st)
	}
	var res engine.AppendResult
	err = s.lockedTx(ctx, lock, func(c *sql.Conn) (script, error) {
		st, err := s.readAppendState(ctx, c, runID, read, args)
		if err != nil {
			return nil, err
		}
		if !st.found {
			return nil, engine.Errorf(engine.CodeRunNotFound, "run %s does not exist (bootstrap it first); nothing was written", runID)
		}
		b, err := store.FoldBatch(st.row.metadata(runID), events)
		if err != nil {
			return nil, err
		}
		var sc script
		res, sc, err = s.planAppend(runID, st, b, nil)
		return sc, err
	})
	if err != nil {
		return engine.AppendResult{}, err
	}
	return res, nil
}

func (s *Store) readAppendState(ctx context.Context, c *sql.Conn, runID, q string, args []any) (appendState, error) {
	st := appendState{stored: map[string]engine.RunEventRecord{}, steps: map[string]engine.StepState{}}
	rows, err := c.QueryContext(ctx, q, args...)
	if err != nil {
		return st, s.classify("read run state", err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind string
		var seq, logical, engineAttempt sql.NullInt64
		var tenant, project, env, eventID, typ, step, planID, planVersion, key, payload sql.NullString
		var emitted, persisted sql.NullTime
		if err := rows.Scan(&kind, &seq, &tenant, &project, &env, &eventID, &typ, &step, &planID, &planVersion,
			&logical, &engineAttempt, &key, &emitted, &persisted, &payload); err != nil {
			return st, s.classify("read run state", err)
		}
		switch kind {
		case "R":
			st.found = true
			st.row = runRow{nextSeq: seq.Int64, status: engine.RunStatus(typ.String), tenant: tenant.String, project: project.String,
				env: env.String, planID: planID.String, planVersion: planVersion.String}
			if persisted.Valid {
				st.row.lastPersisted = persisted.Time.UTC()
			}
		case "E":
			r := engine.RunEventRecord{RunSeq: seq.Int64, PersistedAt: persisted.Time.UTC()}
			r.RunID = runID
			r.TenantID, r.ProjectID, r.EnvironmentID = tenant.String, project.String, env.String
			r.EventID, r.EventType, r.StepID = eventID.String, engine.EventType(typ.String), step.String
			r.PlanID, r.PlanVersion = planID.String, planVersion.String
			r.LogicalAttemptID, r.EngineAttemptID = int(logical.Int64), int(engineAttempt.Int64)
			r.IdempotencyKey, r.EmittedAt, r.Payload = key.String, emitted.Time.UTC(), compactJSON(payload)
			st.stored[r.IdempotencyKey] = r
		case "S":
			st.steps[step.String] = engine.StepState{Status: engine.StepStatus(typ.String), LogicalAttemptID: int(logical.Int64)}
		}
	}
	if err := rows.Err(); err != nil {
		return st, s.classify("read run state", err)
	}
	return st, nil
}

// planAppend decides the append under the lock — which events are new,
// their runSeq, Layer 2 — and returns the result and the statements that
// write it (none: roll back). meta is set for a bootstrap.
func (s *Store) planAppend(runID string, st appendState, b store.Batch, meta *engine.RunMetadata) (engine.AppendResult, script, error) {
	persisted := s.now()
	if persisted.Before(st.row.lastPersisted) {
		// Another writer's clock ran ahead: persistedAt stays monotonic in
		// runSeq order.
		persisted = st.row.lastPersisted
	}
	var res engine.AppendResult
	var fresh []engine.RunEventWrite
	stored := maps.Clone(st.stored)
	seq := st.row.nextSeq
	for _, e := range b.Events {
		if rec, ok := stored[e.IdempotencyKey]; ok {
			res.Deduped = append(res.Deduped, rec)
			continue
		}
		rec := engine.RunEventRecord{RunEventWrite: e, RunSeq: seq, PersistedAt: persisted}
		stored[e.IdempotencyKey] = rec
		res.Appended = append(res.Appended, rec)
		fresh = append(fresh, e)
		seq++
	}
	for _, j := range b.Repeats() {
		res.Deduped = append(res.Deduped, stored[b.Events[j].IdempotencyKey])
	}
	if len(fresh) == 0 && meta == nil {
		return res, nil, nil // all duplicates: nothing to commit
	}
	status, after, err := engine.CheckTransitions(st.row.status, st.steps, fresh)
	if err != nil {
		if !s.opts.DisableTransitionChecks {
			return engine.AppendResult{}, nil, err
		}
		status, after = engine.SkipInvalidTransitions(st.row.status, st.steps, fresh)
	}
	var sc script
	seqVals := map[string]string{"run_id": hexLit(runID), "next_seq": intLit(seq), "status": hexLit(string(status)), "persisted_at": hexLit(tsText(persisted))}
	if meta != nil {
		ins, err := render(s.q["insert_run"], map[string]string{
			"run_id": hexLit(meta.RunID), "tenant_id": hexLit(meta.TenantID), "project_id": hexLit(meta.ProjectID),
			"environment_id": hexLit(meta.EnvironmentID), "plan_id": hexLit(meta.PlanID), "plan_version": hexLit(meta.PlanVersion),
			"plan_sha256": hexLit(meta.PlanSHA256), "target_adapter": hexLit(meta.TargetAdapter),
			"provider_run_ref": hexOrNull(meta.ProviderRunRef), "run_request_id": hexOrNull(meta.RunRequestID),
			"created_at": hexLit(tsText(persisted)),
		}, nil)
		if err != nil {
			return engine.AppendResult{}, nil, err
		}
		seqRow, err := render(s.q["insert_seq"], seqVals, nil)
		if err != nil {
			return engine.AppendResult{}, nil, err
		}
		sc = append(sc, ins, seqRow)
	} else {
		upd, err := render(s.q["update_seq"], seqVals, nil)
		if err != nil {
			return engine.AppendResult{}, nil, err
		}
		sc = append(sc, upd)
	}
	if len(fresh) > 0 {
		rows := make([][]string, len(res.Appended))
		for i, r := range res.Appended {
			var payload string
			if p, ok := nullableJSON(r.Payload).(string); ok {
				payload = p
			}
			rows[i] = []string{hexLit(runID), intLit(r.RunSeq), hexLit(r.TenantID), hexLit(r.ProjectID), hexLit(r.EnvironmentID),
				hexLit(r.EventID), hexLit(string(r.EventType)), hexOrNull(r.StepID), hexLit(r.PlanID), hexLit(r.PlanVersion),
				intLit(int64(r.LogicalAttemptID)), intLit(int64(r.EngineAttemptID)), hexLit(r.IdempotencyKey),
				hexLit(tsText(r.EmittedAt)), hexLit(tsText(r.PersistedAt)), hexOrNull(payload)}
		}
		merge, err := render(s.q["merge_events"], nil, rows)
		if err != nil {
			return engine.AppendResult{}, nil, err
		}
		outbox, err := render(s.q["insert_outbox"], map[string]string{"run_id": hexLit(runID), "first_seq": intLit(res.Appended[0].RunSeq), "next_seq": intLit(seq)}, nil)
		if err != nil {
			return engine.AppendResult{}, nil, err
		}
		sc = append(sc, merge, outbox)
	}
	var stepRows [][]string
	for _, id := range slices.Sorted(maps.Keys(after)) {
		if prev, ok := st.steps[id]; ok && prev == after[id] {
			continue
		}
		stepRows = append(stepRows, []string{hexLit(runID), hexLit(id), hexLit(string(after[id].Status)), intLit(int64(after[id].LogicalAttemptID))})
	}
	if len(stepRows) > 0 {
		m, err := render(s.q["merge_steps"], nil, stepRows)
		if err != nil {
			return engine.AppendResult{}, nil, err
		}
		sc = append(sc, m)
	}
	if status.Terminal() {
		// Reservations matter while events can still be retried; a finished
		// run's are dropped once, here.
		f, err := render(s.q["forget_run_reservations"], map[string]string{"run_id": hexLit(runID)}, nil)
		if err != nil {
			return engine.AppendResult{}, nil, err
		}
		sc = append(sc, f)
	}
	return res, sc, nil
}

// SendSignal implements store.Store: under the run's lock it returns a
// signal already sent with this id, or stores the signal with the next seq.
func (s *Store) SendSignal(ctx context.Context, sig engine.Signal) (engine.Signal, error) {
	if !sig.Type.Valid() {
		return engine.Signal{}, engine.Errorf(engine.CodeInvalidArgument, "unknown signal type %q (want PAUSE, RESUME, CANCEL or RETRY_STEP)", sig.Type)
	}
	if sig.SignalID == "" || sig.RunID == "" {
		return engine.Signal{}, engine.Errorf(engine.CodeInvalidArgument, "a signal needs a signalId and a runId")
	}
	lock, err := render(s.q["lock_run"], map[string]string{"run_id": hexLit(sig.RunID)}, nil)
	if err != nil {
		return engine.Signal{}, err
	}
	var out engine.Signal
	err = s.lockedTx(ctx, lock, func(c *sql.Conn) (script, error) {
		rows, err := c.QueryContext(ctx, s.q["signal_state"], sig.SignalID, sig.RunID, sig.RunID)
		if err != nil {
			return nil, s.classify("read signals", err)
		}
		defer rows.Close()
		var existing *engine.Signal
		var next int64
		runFound := false
		for rows.Next() {
			var kind, runID string
			var seq sql.NullInt64
			var typ, step, reason, by sql.NullString
			var created sql.NullTime
			if err := rows.Scan(&kind, &runID, &seq, &typ, &step, &reason, &by, &created); err != nil {
				return nil, s.classify("read signals", err)
			}
			if kind == "S" {
				existing = &engine.Signal{SignalID: sig.SignalID, RunID: runID, Seq: seq.Int64, Type: engine.SignalType(typ.String),
					StepID: step.String, Reason: reason.String, RequestedBy: by.String, CreatedAt: created.Time.UTC()}
			} else {
				runFound, next = true, seq.Int64
			}
		}
		if err := rows.Err(); err != nil {
			return nil, s.classify("read signals", err)
		}
		if existing != nil {
			out = *existing
			return nil, nil
		}
		if !runFound {
			return nil, engine.Errorf(engine.CodeRunNotFound, "run %s not found in %s", sig.RunID, s.where)
		}
		out = sig
		out.Seq = next
		out.CreatedAt = s.now()
		ins, err := render(s.q["insert_signal"], map[string]string{
			"run_id": hexLit(sig.RunID), "signal_seq": intLit(next), "signal_id": hexLit(sig.SignalID),
			"signal_type": hexLit(string(sig.Type)), "step_id": hexOrNull(sig.StepID), "reason": hexOrNull(sig.Reason),
			"requested_by": hexOrNull(sig.RequestedBy), "created_at": hexLit(tsText(out.CreatedAt)),
		}, nil)
		if err != nil {
			return nil, err
		}
		return script{ins}, nil
	})
	if err != nil {
		return engine.Signal{}, err
	}
	return out, nil
}
