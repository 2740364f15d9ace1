package snowflake

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/snowflakedb/gosnowflake"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/audit"
	"github.com/dvtrun/dvtrun/store"
)

// An append is one request (issue 11): the append_block Scripting block
// (store.sql) checks under the run's lock that the plan the client made from
// its cached run state still holds, writes it and answers with the stored
// records; an all-duplicate batch is answered from the same request. Only
// when the cache is missing or stale (another writer, a new process) does
// the block answer with the run's state instead, and the client plans again
// and sends a second block.
//
// A bootstrap is one request too (bootstrap_block), and so is a signal
// (send_signal_block) and an outbox enqueue or claim (delivery.sql): no
// transaction of theirs spans requests, so none is left holding a lock by a
// client that dies between requests (issue 16). Only the run queue's
// transactions (store.QueueSQL) do, through pinnedTx; a lock one of them
// leaves is ended by the next waiter once it is stale (locks.go).

// pinnedTx runs one transaction on a pinned session: BEGIN and lock (a
// statement run right after BEGIN in the same request), then body, which
// reads under the lock, then body's statements and COMMIT in one request
// when body says commit (a rollback otherwise), the whole retried on
// contention.
func (s *Store) pinnedTx(ctx context.Context, lock string, body func(c *sql.Conn) (sc script, commit bool, err error)) error {
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
		sc, commit, err := body(c)
		if err != nil || !commit {
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
	lastHash             string // the hash chain's head (audit.Genesis before the first event)
}

// metadata is the part of the run's dvt_runs row its events must match.
func (r runRow) metadata(runID string) engine.RunMetadata {
	return engine.RunMetadata{RunID: runID, TenantID: r.tenant, ProjectID: r.project, EnvironmentID: r.env, PlanID: r.planID, PlanVersion: r.planVersion}
}

// appendState is what an append decides on: the run's row, the stored
// events with the batch's keys and the step states (every step of the run
// when it comes from the cache or a STALE answer). outcome is the block's
// answer ('O' row).
type appendState struct {
	found    bool
	row      runRow
	stored   map[string]engine.RunEventRecord // by idempotency key
	steps    map[string]engine.StepState
	reserved map[string]string // eventIds reserved for the batch's keys, by key (bootstrap)
	outcome  string
}

// cachedRun is the state of a run as this Store last wrote or read it under
// the run's lock: every step's state, the next seq, status and tenancy. It
// is a guess the append block verifies (next_seq equal), never trusted alone.
type cachedRun struct {
	row   runRow
	steps map[string]engine.StepState
}

// Outcomes of the append block.
const (
	outcomeApplied   = "APPLIED"
	outcomeDuplicate = "DUPLICATE"
	outcomeStale     = "STALE"
	outcomeNotFound  = "NOT_FOUND"
	outcomeLeaseLost = "LEASE_LOST" // a fenced append whose lease is no longer the run's
	outcomeReserved  = "RESERVED"   // a bootstrap whose keys are reserved with other eventIds
)

// maxStaleRounds bounds how often one append re-plans after STALE answers
// (each one means another writer of the run committed in between).
const maxStaleRounds = 64

func (s *Store) cached(runID string) (cachedRun, bool) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	c, ok := s.cache[runID]
	return c, ok
}

// remember caches a run's state after a write or a read under its lock; a
// finished run is forgotten, as nothing more is appended to it.
func (s *Store) remember(runID string, c cachedRun) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if s.cache == nil {
		s.cache = map[string]cachedRun{}
	}
	if c.row.status.Terminal() {
		delete(s.cache, runID)
		delete(s.metas, runID)
		return
	}
	s.cache[runID] = c
}

func (s *Store) forget(runID string) {
	s.cacheMu.Lock()
	delete(s.cache, runID)
	s.cacheMu.Unlock()
}

// rememberMeta keeps a bootstrapped run's metadata as stored (created_at
// is the bootstrap's persistedAt).
func (s *Store) rememberMeta(meta engine.RunMetadata, createdAt time.Time) {
	meta.CreatedAt = createdAt.UTC()
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if s.metas == nil {
		s.metas = map[string]engine.RunMetadata{}
	}
	s.metas[meta.RunID] = meta
}

// BootstrapRun implements store.Store in one request (bootstrap_block),
// two when a key of the batch was reserved before with another eventId: the
// block then answers the reserved ids (RESERVED) and the events are planned
// again with them.
func (s *Store) BootstrapRun(ctx context.Context, meta engine.RunMetadata, first []engine.RunEventWrite) (engine.AppendResult, error) {
	if err := engine.ValidateMetadata(meta); err != nil {
		return engine.AppendResult{}, err
	}
	for _, e := range first {
		if err := engine.Validate(e); err != nil {
			return engine.AppendResult{}, err
		}
	}
	events := slices.Clone(first)
	var res engine.AppendResult
	var next cachedRun
	err := s.withRetry(ctx, func() error {
		for range maxReservedRounds {
			var ans appendState
			var err error
			res, next, ans, err = s.bootstrapOnce(ctx, meta, events)
			if err != nil {
				return err
			}
			switch ans.outcome {
			case outcomeApplied:
				return checkApplied(meta.RunID, res, ans)
			case outcomeReserved:
				for i, e := range events {
					if id, ok := ans.reserved[e.IdempotencyKey]; ok {
						events[i].EventID = id
					}
				}
			default:
				// Also what a retry finds after a lost answer: bootstrap is
				// not idempotent, resume is how a run continues.
				return engine.Errorf(engine.CodeRunAlreadyExists, "run %s already exists; nothing was written", meta.RunID)
			}
		}
		return engine.Errorf(engine.CodeStoreCorrupt, "run %s: the reserved eventIds of its first events changed under %d bootstraps", meta.RunID, maxReservedRounds)
	})
	if err != nil {
		return engine.AppendResult{}, err
	}
	s.rememberMeta(meta, next.row.lastPersisted)
	s.remember(meta.RunID, next)
	return res, nil
}

// maxReservedRounds bounds a bootstrap's RESERVED answers: reservations are
// never rebound, so the second round normally applies.
const maxReservedRounds = 3

// bootstrapOnce plans the bootstrap of events and sends one block.
func (s *Store) bootstrapOnce(ctx context.Context, meta engine.RunMetadata, events []engine.RunEventWrite) (engine.AppendResult, cachedRun, appendState, error) {
	row := runRow{nextSeq: 1, status: engine.StatusNone, tenant: meta.TenantID, project: meta.ProjectID, env: meta.EnvironmentID, planID: meta.PlanID, planVersion: meta.PlanVersion, lastHash: audit.Genesis}
	b, err := store.FoldBatch(meta, events)
	if err != nil {
		return engine.AppendResult{}, cachedRun{}, appendState{}, err
	}
	st := appendState{found: true, row: row, stored: map[string]engine.RunEventRecord{}, steps: map[string]engine.StepState{}}
	res, sc, next, err := s.planAppend(meta.RunID, st, b, &meta)
	if err != nil {
		return engine.AppendResult{}, cachedRun{}, appendState{}, err
	}
	pairs := [][]string{{"NULL", "NULL"}} // no events: a row that matches nothing
	if len(b.Events) > 0 {
		pairs = make([][]string, len(b.Events))
		for i, e := range b.Events {
			pairs[i] = []string{hexLit(e.IdempotencyKey), hexLit(e.EventID)}
		}
	}
	block, err := render(s.q["bootstrap_block"], map[string]string{"run_id": hexLit(meta.RunID), "key_ids": valuesRows(pairs)}, nil)
	if err != nil {
		return engine.AppendResult{}, cachedRun{}, appendState{}, err
	}
	block = strings.Replace(block, "/*writes*/", sc.text(), 1)
	ans, err := s.readAppendState(ctx, s.db, meta.RunID, block, nil)
	return res, next, ans, err
}

// checkApplied compares the stored metadata an APPLIED block returned with
// the records the client planned.
func checkApplied(runID string, res engine.AppendResult, ans appendState) error {
	for _, r := range res.Appended {
		got, ok := ans.stored[r.IdempotencyKey]
		if !ok || got.RunSeq != r.RunSeq || got.EventID != r.EventID || !got.PersistedAt.Equal(r.PersistedAt) {
			return engine.Errorf(engine.CodeStoreCorrupt,
				"run %s: event %s was appended as runSeq %d but reads back as %+v", runID, r.EventID, r.RunSeq, got)
		}
	}
	return nil
}

// AppendAndEnqueue implements store.Store with one append block per
// request; see append_block in store.sql.
func (s *Store) AppendAndEnqueue(ctx context.Context, runID string, events []engine.RunEventWrite) (engine.AppendResult, error) {
	return s.append(ctx, runID, nil, events)
}

// AppendFenced implements store.Store: AppendAndEnqueue whose append block
// also checks, under the run's lock, that lease is still the run's lease
// (outcome LEASE_LOST otherwise, nothing written).
func (s *Store) AppendFenced(ctx context.Context, lease engine.Lease, events []engine.RunEventWrite) (engine.AppendResult, error) {
	return s.append(ctx, lease.RunID, &lease, events)
}

func (s *Store) append(ctx context.Context, runID string, lease *engine.Lease, events []engine.RunEventWrite) (engine.AppendResult, error) {
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
	var keys []string
	seen := map[string]bool{}
	for _, e := range events {
		if !seen[e.IdempotencyKey] {
			seen[e.IdempotencyKey] = true
			keys = append(keys, e.IdempotencyKey)
		}
	}
	var res engine.AppendResult
	err := s.withRetry(ctx, func() error {
		var err error
		res, err = s.appendOnce(ctx, runID, lease, events, keys)
		if err != nil && engine.IsTransient(err) {
			// The block may have committed before its answer was lost: the
			// next attempt cannot trust the cache, and finds the events
			// stored (DUPLICATE), so the append stays exactly-once.
			s.forget(runID)
		}
		return err
	})
	if err != nil {
		return engine.AppendResult{}, err
	}
	return res, nil
}

// appendOnce sends append blocks until one is APPLIED or answered as
// DUPLICATE: the first is planned from the cached run state (or, with none,
// only probes), each STALE answer brings the state to plan from again.
func (s *Store) appendOnce(ctx context.Context, runID string, lease *engine.Lease, events []engine.RunEventWrite, keys []string) (engine.AppendResult, error) {
	var st appendState
	c, known := s.cached(runID)
	if known {
		st = appendState{found: true, row: c.row, stored: map[string]engine.RunEventRecord{}, steps: c.steps}
	}
	fresh := false // st was read under the lock in this call
	for round := 0; round < maxStaleRounds; round++ {
		var res engine.AppendResult
		var next cachedRun
		var sc script
		expected := int64(-1) // matches no run: the block only answers
		if known {
			b, err := store.FoldBatch(st.row.metadata(runID), events)
			if err != nil {
				return engine.AppendResult{}, err
			}
			res, sc, next, err = s.planAppend(runID, st, b, nil)
			if err != nil {
				if engine.CodeOf(err) == engine.CodeInvalidTransition && !fresh {
					known = false // refused on cached state: confirm on the stored one
					continue
				}
				return engine.AppendResult{}, err
			}
			if len(sc) == 0 {
				return res, nil // every key is stored, as read under the lock
			}
			expected = st.row.nextSeq
		}
		var newKeys []string
		for _, r := range res.Appended {
			newKeys = append(newKeys, r.IdempotencyKey)
		}
		vals := map[string]string{
			"run_id": hexLit(runID), "expected_seq": intLit(expected), "nkeys": intLit(int64(len(keys))),
			"keys": hexRows(keys), "new_keys": hexRows(newKeys),
			"fenced": "0", "lease_owner": hexLit(""), "lease_fence": "0",
		}
		if lease != nil {
			vals["fenced"], vals["lease_owner"], vals["lease_fence"] = "1", hexLit(lease.Owner), intLit(lease.Fence)
		}
		block, err := render(s.q["append_block"], vals, nil)
		if err != nil {
			return engine.AppendResult{}, err
		}
		block = strings.Replace(block, "/*writes*/", sc.text(), 1)
		ans, err := s.readAppendState(ctx, s.db, runID, block, nil)
		if err != nil {
			return engine.AppendResult{}, err
		}
		switch ans.outcome {
		case outcomeNotFound:
			s.forget(runID)
			return engine.AppendResult{}, engine.Errorf(engine.CodeRunNotFound, "run %s does not exist (bootstrap it first); nothing was written", runID)
		case outcomeLeaseLost:
			return engine.AppendResult{}, engine.Errorf(engine.CodeLeaseLost,
				"run %s: %s no longer holds the lease with fence %d (taken over or released); nothing was written", runID, lease.Owner, lease.Fence)
		case outcomeApplied:
			if err := checkApplied(runID, res, ans); err != nil {
				s.forget(runID)
				return engine.AppendResult{}, err
			}
			s.remember(runID, next)
			return res, nil
		case outcomeDuplicate:
			if c, ok := s.cached(runID); ok && c.row.nextSeq != ans.row.nextSeq {
				s.forget(runID)
			}
			ans.steps = nil // not read: only the run's row and the stored events
			b, err := store.FoldBatch(ans.row.metadata(runID), events)
			if err != nil {
				return engine.AppendResult{}, err
			}
			res, _, _, err := s.planAppend(runID, ans, b, nil)
			return res, err
		case outcomeStale:
			st, known, fresh = ans, true, true
			s.remember(runID, cachedRun{row: ans.row, steps: ans.steps})
		default:
			return engine.AppendResult{}, engine.Errorf(engine.CodeStoreCorrupt, "run %s: the append block answered %q", runID, ans.outcome)
		}
	}
	s.forget(runID)
	return engine.AppendResult{}, engine.MarkTransient(engine.Errorf(engine.CodeStoreUnavailable,
		"Snowflake state store %s: run %s: other writers committed before each of %d append attempts; retry", s.where, runID, maxStaleRounds))
}

// querier is a session or the pool: the append block needs no pinned
// session.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func (s *Store) readAppendState(ctx context.Context, c querier, runID, q string, args []any) (appendState, error) {
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
				env: env.String, planID: planID.String, planVersion: planVersion.String, lastHash: cmp.Or(step.String, audit.Genesis)}
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
		case "O":
			st.outcome = typ.String
		case "K": // a key's reserved eventId (bootstrap)
			if st.reserved == nil {
				st.reserved = map[string]string{}
			}
			st.reserved[key.String] = eventID.String
		case "M": // metadata of an event the block appended
			st.stored[key.String] = engine.RunEventRecord{RunEventWrite: engine.RunEventWrite{EventID: eventID.String, IdempotencyKey: key.String},
				RunSeq: seq.Int64, PersistedAt: persisted.Time.UTC()}
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
//
// next is the run's state once the statements are committed (the state
// before when there is nothing to write).
func (s *Store) planAppend(runID string, st appendState, b store.Batch, meta *engine.RunMetadata) (res engine.AppendResult, sc script, next cachedRun, err error) {
	persisted := s.now()
	if persisted.Before(st.row.lastPersisted) {
		// Another writer's clock ran ahead: persistedAt stays monotonic in
		// runSeq order.
		persisted = st.row.lastPersisted
	}
	var fresh []engine.RunEventWrite
	stored := maps.Clone(st.stored)
	next = cachedRun{row: st.row, steps: st.steps}
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
		return res, nil, next, nil // all duplicates: nothing to commit
	}
	status, after, err := engine.CheckTransitions(st.row.status, st.steps, fresh)
	if err != nil {
		if !s.opts.DisableTransitionChecks {
			return engine.AppendResult{}, nil, next, err
		}
		status, after = engine.SkipInvalidTransitions(st.row.status, st.steps, fresh)
	}
	// The chain is planned with the rest: the block applies it only while
	// next_seq is what was planned from, and then the head is too.
	links := audit.Chain(st.row.lastHash, res.Appended)
	head := st.row.lastHash
	if len(links) > 0 {
		head = links[len(links)-1].Hash
	}
	next.row.nextSeq, next.row.status, next.row.lastPersisted, next.row.lastHash = seq, status, persisted, head
	next.steps = after
	seqVals := map[string]string{"run_id": hexLit(runID), "next_seq": intLit(seq), "status": hexLit(string(status)), "persisted_at": hexLit(tsText(persisted)), "last_hash": hexLit(head)}
	if meta != nil {
		ins, err := render(s.q["insert_run"], map[string]string{
			"run_id": hexLit(meta.RunID), "tenant_id": hexLit(meta.TenantID), "project_id": hexLit(meta.ProjectID),
			"environment_id": hexLit(meta.EnvironmentID), "plan_id": hexLit(meta.PlanID), "plan_version": hexLit(meta.PlanVersion),
			"plan_sha256": hexLit(meta.PlanSHA256), "target_adapter": hexLit(meta.TargetAdapter),
			"provider_run_ref": hexOrNull(meta.ProviderRunRef), "run_request_id": hexOrNull(meta.RunRequestID),
			"created_at": hexLit(tsText(persisted)),
		}, nil)
		if err != nil {
			return engine.AppendResult{}, nil, next, err
		}
		seqRow, err := render(s.q["insert_seq"], seqVals, nil)
		if err != nil {
			return engine.AppendResult{}, nil, next, err
		}
		sc = append(sc, ins, seqRow)
	} else {
		upd, err := render(s.q["update_seq"], seqVals, nil)
		if err != nil {
			return engine.AppendResult{}, nil, next, err
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
				hexLit(tsText(r.EmittedAt)), hexLit(tsText(r.PersistedAt)), hexOrNull(payload),
				hexLit(links[i].PrevHash), hexLit(links[i].Hash), hexLit(string(links[i].EventBytes)), hexOrNull(links[i].PayloadSHA256)}
		}
		merge, err := render(s.q["merge_events"], nil, rows)
		if err != nil {
			return engine.AppendResult{}, nil, next, err
		}
		outbox, err := render(s.q["insert_outbox"], map[string]string{"run_id": hexLit(runID), "first_seq": intLit(res.Appended[0].RunSeq), "next_seq": intLit(seq)}, nil)
		if err != nil {
			return engine.AppendResult{}, nil, next, err
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
			return engine.AppendResult{}, nil, next, err
		}
		sc = append(sc, m)
	}
	if status.Terminal() {
		// Reservations matter while events can still be retried; a finished
		// run's are dropped once, here.
		f, err := render(s.q["forget_run_reservations"], map[string]string{"run_id": hexLit(runID)}, nil)
		if err != nil {
			return engine.AppendResult{}, nil, next, err
		}
		sc = append(sc, f)
	}
	return res, sc, next, nil
}

// SendSignal implements store.Store in one request (send_signal_block):
// under the run's lock it keeps a signal already sent with this id, or
// stores the signal with the run's next seq, and answers the stored one.
func (s *Store) SendSignal(ctx context.Context, sig engine.Signal) (engine.Signal, error) {
	if !sig.Type.Valid() {
		return engine.Signal{}, engine.Errorf(engine.CodeInvalidArgument, "unknown signal type %q (want PAUSE, RESUME, CANCEL or RETRY_STEP)", sig.Type)
	}
	if sig.SignalID == "" || sig.RunID == "" {
		return engine.Signal{}, engine.Errorf(engine.CodeInvalidArgument, "a signal needs a signalId and a runId")
	}
	block, err := render(s.q["send_signal_block"], map[string]string{
		"run_id": hexLit(sig.RunID), "signal_id": hexLit(sig.SignalID),
		"signal_type": hexLit(string(sig.Type)), "step_id": hexOrNull(sig.StepID), "reason": hexOrNull(sig.Reason),
		"requested_by": hexOrNull(sig.RequestedBy), "created_at": hexLit(tsText(s.now())),
	}, nil)
	if err != nil {
		return engine.Signal{}, err
	}
	var out *engine.Signal
	err = s.withRetry(ctx, func() error {
		out = nil
		rows, err := s.db.QueryContext(ctx, block)
		if err != nil {
			return s.classify("send signal", err)
		}
		defer rows.Close()
		for rows.Next() {
			var kind, typ string
			var got engine.Signal
			if err := rows.Scan(&kind, &got.RunID, &got.Seq, &typ, &got.StepID, &got.Reason, &got.RequestedBy, &got.CreatedAt); err != nil {
				return s.classify("send signal", err)
			}
			got.SignalID, got.Type, got.CreatedAt = sig.SignalID, engine.SignalType(typ), got.CreatedAt.UTC()
			out = &got
		}
		return s.classify("send signal", rows.Err())
	})
	if err != nil {
		return engine.Signal{}, err
	}
	if out == nil {
		return engine.Signal{}, engine.Errorf(engine.CodeRunNotFound, "run %s not found in %s", sig.RunID, s.where)
	}
	return *out, nil
}
