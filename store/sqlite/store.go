// Package sqlite is dvtrun's embedded backend on modernc.org/sqlite (pure
// Go): the state store (the event log and its append authority) and a
// warehouse that runs plans locally.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/audit"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store"
)

// Options configures a Store.
type Options struct {
	// Now is the append authority's clock (persistedAt, created_at);
	// default time.Now.
	Now func() time.Time
	// DisableTransitionChecks turns off Layer 2 (append-time transition
	// validation). Step and run state is maintained either way.
	DisableTransitionChecks bool
	// MustExist opens an existing state store only: read commands never
	// create a database file.
	MustExist bool
	// LockWait is the most a write waits for the write lock another
	// process holds (default engine.DefaultLockWait); then the write fails
	// with STORE_UNAVAILABLE (transient: the store was busy, not broken).
	LockWait time.Duration
	// OnWait receives a progress report every few seconds of such a wait.
	OnWait engine.WaitFunc
}

// Store is the SQLite state store. It is safe for concurrent use; several
// processes may open the same file.
type Store struct {
	db    *sqlx.DB
	path  string
	opts  Options
	q     map[string]string
	stmts map[string]*sql.Stmt // the statements without an IN list, prepared once

	// QueueSQL is the run queue and the schedule cursors.
	*store.QueueSQL
	// BundleSQL keeps the plan bundles of runs and requests.
	store.BundleSQL
	// AuditSQL reads the hash chains and keeps the global log.
	*store.AuditSQL
	// ProjectionSQL is the SQL projection and its Go reference.
	store.ProjectionSQL

	// writeMu serialises this process's write transactions: SQLite allows one
	// writer at a time, and waiting on a mutex is cheaper and fairer than
	// SQLite's busy-retry loop. Other processes are held off by BEGIN
	// IMMEDIATE and lock.
	writeMu sync.Mutex
	lock    *lockWaiter

	// unchained appends without the hash chain: only the benchmark that
	// measures the chain's cost sets it (export_test.go).
	unchained bool
}

// Open opens (creating unless opts.MustExist) the state store at path and
// applies pending migrations.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if path == "" {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "state store path is empty")
	}
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		return nil, engine.Errorf(engine.CodeStoreUnavailable, "state store %s is a directory", path)
	case err == nil:
	case !errors.Is(err, fs.ErrNotExist):
		return nil, engine.Errorf(engine.CodeStoreUnavailable, "cannot use the state store %s: %v", path, pathErr(err))
	case opts.MustExist:
		// Nothing there: the path given is wrong (input, exit 2), not a
		// store that is down (exit 4).
		return nil, engine.Errorf(engine.CodeInvalidArgument, "no state store at %s (run a plan first, or pass --store)", path)
	default:
		// Made whole beside its place, then linked into it: no process
		// ever opens a store that is half made.
		if err := create(ctx, path, opts.Now); err != nil {
			return nil, err
		}
	}
	q, err := sqlfiles.Queries(sqlfiles.SQLite, "store.sql")
	if err != nil {
		return nil, err
	}
	if err := addDeliveryQueries(q); err != nil {
		return nil, err
	}
	lock := newLockWaiter("state store "+path, opts.LockWait, opts.OnWait, nil) // real time, not the store clock opts.Now
	db, err := sqlx.Open("sqlite", dsn(path, "rw", lock.slice()))
	if err != nil {
		return nil, classify(path, err)
	}
	s := &Store{db: db, path: path, opts: opts, q: q, stmts: map[string]*sql.Stmt{}, lock: lock}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	if s.BundleSQL, err = s.newBundles(); err != nil {
		db.Close()
		return nil, err
	}
	if s.QueueSQL, err = s.newQueue(); err != nil {
		db.Close()
		return nil, err
	}
	if s.AuditSQL, err = s.newAudit(); err != nil {
		db.Close()
		return nil, err
	}
	if s.ProjectionSQL, err = s.newProjection(); err != nil {
		db.Close()
		return nil, err
	}
	for name, text := range q {
		if strings.Contains(text, "/*") {
			continue
		}
		st, err := db.PrepareContext(ctx, text)
		if err != nil {
			db.Close()
			return nil, classify(path, fmt.Errorf("prepare %s: %w", name, err))
		}
		s.stmts[name] = st
	}
	return s, nil
}

// dsn builds the modernc connection string: WAL, synchronous=NORMAL (durable
// at checkpoints, never corrupt), a busy timeout, and BEGIN IMMEDIATE so a
// write transaction takes the write lock up front instead of failing to
// upgrade from a read lock halfway through.
func dsn(path, mode string, busy time.Duration) string {
	return "file:" + path + "?mode=" + mode +
		"&_pragma=busy_timeout(" + fmt.Sprint(busy.Milliseconds()) + ")" +
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)" +
		"&_txlock=immediate"
}

func pathErr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Path is the database file.
func (s *Store) Path() string { return s.path }

// DB gives read access for projections and audit queries.
func (s *Store) DB() *sqlx.DB { return s.db }

// Close closes the database.
func (s *Store) Close() error {
	for _, st := range s.stmts {
		st.Close()
	}
	return s.db.Close()
}

// beginWrite begins a write transaction (BEGIN IMMEDIATE), waiting for
// another process's write lock within the lock-wait budget.
func (s *Store) beginWrite(ctx context.Context) (*sqlx.Tx, error) {
	var tx *sqlx.Tx
	err := s.lock.wait(ctx, func() (err error) {
		tx, err = s.db.BeginTxx(ctx, nil)
		return err
	})
	return tx, s.lockErr(err)
}

// execWrite runs one statement that writes outside a transaction, waiting
// for another process's write lock within the lock-wait budget.
func (s *Store) execWrite(ctx context.Context, exec func() (sql.Result, error)) (sql.Result, error) {
	var res sql.Result
	err := s.lock.wait(ctx, func() (err error) {
		res, err = exec()
		return err
	})
	return res, s.lockErr(err)
}

// lockErr keeps a busy store transient, as classify does, when its wait
// ran out: the store is busy, not broken.
func (s *Store) lockErr(err error) error {
	if engine.CodeOf(err) == engine.CodeStoreUnavailable {
		return engine.MarkTransient(err)
	}
	return err
}

// exec runs a prepared statement inside tx.
func (s *Store) exec(ctx context.Context, tx *sqlx.Tx, name string, args ...any) (sql.Result, error) {
	res, err := tx.StmtContext(ctx, s.stmts[name]).ExecContext(ctx, args...)
	return res, classify(s.path, err)
}

func (s *Store) now() string { return s.opts.Now().UTC().Format(engine.TimeFormat) }

// migrate applies the pending migrations. Most opens find none: they are
// read without the write lock, so that opening a store another process is
// writing (or a stopped one holds) does not wait for it.
func (s *Store) migrate(ctx context.Context) error {
	migs, err := sqlfiles.Migrations(sqlfiles.SQLite)
	if err != nil {
		return err
	}
	if applied, err := s.applied(ctx, s.db); err != nil || !pending(migs, applied) {
		return err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, err := s.beginWrite(ctx) // BEGIN IMMEDIATE: concurrent migrators queue here
	if err != nil {
		return classify(s.path, err)
	}
	defer tx.Rollback()
	applied, err := s.applied(ctx, tx)
	if err != nil {
		return err
	}
	if applied == nil {
		if _, err := tx.ExecContext(ctx, s.q["create_schema_version"]); err != nil {
			return classify(s.path, err)
		}
	}
	for _, m := range migs {
		if applied[m.Version] {
			continue
		}
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("sqlite: migration %s: %w", m.Name, classify(s.path, err))
		}
		if _, err := tx.ExecContext(ctx, s.q["insert_schema_version"], m.Version, m.Name, s.now()); err != nil {
			return classify(s.path, err)
		}
	}
	return classify(s.path, tx.Commit())
}

// applied returns the versions of the migrations the store has; nil (no
// error) for a database without any table: a store whose creation never
// finished (the migrations are one transaction, so nothing is half
// applied), which every command completes alike. A database with tables
// but no schema version is someone else's: every command refuses it.
func (s *Store) applied(ctx context.Context, q sqlx.QueryerContext) (map[int]bool, error) {
	var tables, versioned int
	err := sqlx.GetContext(ctx, q, &tables, s.q["schema_tables"])
	if err == nil {
		err = sqlx.GetContext(ctx, q, &versioned, s.q["schema_versioned"])
	}
	switch {
	case err != nil:
		return nil, classify(s.path, err)
	case tables == 0:
		return nil, nil
	case versioned == 0:
		return nil, engine.Errorf(engine.CodeStoreCorrupt, "%s is an SQLite database but not a dvtrun state store", s.path)
	}
	var versions []int
	if err := sqlx.SelectContext(ctx, q, &versions, s.q["schema_versions"]); err != nil {
		return nil, classify(s.path, err)
	}
	applied := make(map[int]bool, len(versions))
	for _, v := range versions {
		applied[v] = true
	}
	return applied, nil
}

func pending(migs []sqlfiles.Migration, applied map[int]bool) bool {
	for _, m := range migs {
		if !applied[m.Version] {
			return true
		}
	}
	return false
}

// classify maps SQLite failures onto contract codes: a busy database is a
// transient STORE_UNAVAILABLE, a file that is not a database STORE_CORRUPT.
func classify(path string, err error) error {
	if err == nil {
		return nil
	}
	var ee *engine.Error
	if errors.As(err, &ee) {
		return err
	}
	var se *msqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return engine.MarkTransient(&engine.Error{Code: engine.CodeStoreUnavailable, Msg: fmt.Sprintf("state store %s is busy: %v", path, err), Err: err})
		case sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT:
			return &engine.Error{Code: engine.CodeStoreCorrupt, Msg: fmt.Sprintf("%s is not a usable SQLite database (%v)", path, se), Err: err}
		case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_PERM:
			return &engine.Error{Code: engine.CodeStoreUnavailable, Msg: fmt.Sprintf("cannot write the state store %s (%v)", path, se), Err: err}
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("sqlite state store %s: %w", path, err)
}

// placeholders returns n comma-separated ? for an IN (...) or VALUES list:
// the only SQL text built in Go, and it holds no values.
func placeholders(n int) string { return strings.TrimSuffix(strings.Repeat("?,", n), ",") }

// runRow is what the append path reads of a run, under its lock.
type runRow struct {
	nextSeq              int64
	status               engine.RunStatus
	tenant, project, env string
	planID, planVersion  string
	lastHash             string // the hash chain's head (audit.Genesis before the first event)
}

// metadata is the part of the run's dvt_runs row its events must match.
func (r runRow) metadata(runID string) engine.RunMetadata {
	return engine.RunMetadata{RunID: runID, TenantID: r.tenant, ProjectID: r.project, EnvironmentID: r.env, PlanID: r.planID, PlanVersion: r.planVersion}
}

// BootstrapRun implements store.Store.
func (s *Store) BootstrapRun(ctx context.Context, meta engine.RunMetadata, first []engine.RunEventWrite) (engine.AppendResult, error) {
	if err := engine.ValidateMetadata(meta); err != nil {
		return engine.AppendResult{}, err
	}
	row := runRow{nextSeq: 1, status: engine.StatusNone, tenant: meta.TenantID, project: meta.ProjectID, env: meta.EnvironmentID, planID: meta.PlanID, planVersion: meta.PlanVersion, lastHash: audit.Genesis}
	for _, e := range first {
		if err := engine.Validate(e); err != nil {
			return engine.AppendResult{}, err
		}
	}
	batch, err := store.FoldBatch(meta, first)
	if err != nil {
		return engine.AppendResult{}, err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return engine.AppendResult{}, classify(s.path, err)
	}
	defer tx.Rollback()
	var one int
	switch err := tx.GetContext(ctx, &one, s.q["run_exists"], meta.RunID); {
	case err == nil:
		return engine.AppendResult{}, engine.Errorf(engine.CodeRunAlreadyExists, "run %s already exists; nothing was written", meta.RunID)
	case !errors.Is(err, sql.ErrNoRows):
		return engine.AppendResult{}, classify(s.path, err)
	}
	// The events are bound in the EventIdRegistry in this transaction: a
	// persisted event is its key's binding (ReserveEventIDs answers it
	// first), and a key reserved before keeps its reserved eventId.
	reserved := tx.StmtContext(ctx, s.stmts["reserved_event_id"])
	for i, e := range batch.Events {
		var id string
		switch err := reserved.QueryRowContext(ctx, meta.RunID, e.IdempotencyKey).Scan(&id); {
		case err == nil:
			batch.Events[i].EventID = id
		case !errors.Is(err, sql.ErrNoRows):
			return engine.AppendResult{}, classify(s.path, err)
		}
	}
	now := s.now()
	if _, err := s.exec(ctx, tx, "insert_run", meta.RunID, meta.TenantID, meta.ProjectID, meta.EnvironmentID,
		meta.PlanID, meta.PlanVersion, meta.PlanSHA256, meta.TargetAdapter, nullable(meta.ProviderRunRef), nullable(meta.RunRequestID), now); err != nil {
		return engine.AppendResult{}, classify(s.path, err)
	}
	if _, err := s.exec(ctx, tx, "insert_seq", meta.RunID); err != nil {
		return engine.AppendResult{}, classify(s.path, err)
	}
	res, err := s.appendTx(ctx, tx, meta.RunID, row, batch, now)
	if err != nil {
		return engine.AppendResult{}, err
	}
	if err := tx.Commit(); err != nil {
		return engine.AppendResult{}, classify(s.path, err)
	}
	return res, nil
}

// AppendAndEnqueue implements store.Store.
func (s *Store) AppendAndEnqueue(ctx context.Context, runID string, events []engine.RunEventWrite) (engine.AppendResult, error) {
	return s.append(ctx, runID, nil, events)
}

// AppendFenced implements store.Store.
func (s *Store) AppendFenced(ctx context.Context, lease engine.Lease, events []engine.RunEventWrite) (engine.AppendResult, error) {
	return s.append(ctx, lease.RunID, &lease, events)
}

func (s *Store) append(ctx context.Context, runID string, lease *engine.Lease, events []engine.RunEventWrite) (engine.AppendResult, error) {
	if len(events) == 0 {
		return engine.AppendResult{}, nil
	}
	// Envelope checks first, outside the lock: nothing is written for an
	// invalid batch. The checks against the run's row run under the lock.
	for _, e := range events {
		if err := engine.Validate(e); err != nil {
			return engine.AppendResult{}, err
		}
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return engine.AppendResult{}, classify(s.path, err)
	}
	defer tx.Rollback()
	var row runRow
	err = tx.StmtContext(ctx, s.stmts["lock_seq"]).QueryRowContext(ctx, runID).Scan(&row.nextSeq, &row.status, &row.tenant, &row.project, &row.env, &row.planID, &row.planVersion, &row.lastHash)
	if errors.Is(err, sql.ErrNoRows) {
		return engine.AppendResult{}, engine.Errorf(engine.CodeRunNotFound, "run %s does not exist (bootstrap it first); nothing was written", runID)
	}
	if err != nil {
		return engine.AppendResult{}, classify(s.path, err)
	}
	if lease != nil {
		if err := s.checkFence(ctx, tx, *lease); err != nil {
			return engine.AppendResult{}, err
		}
	}
	batch, err := store.FoldBatch(row.metadata(runID), events)
	if err != nil {
		return engine.AppendResult{}, err
	}
	res, err := s.appendTx(ctx, tx, runID, row, batch, s.now())
	if err != nil {
		return engine.AppendResult{}, err
	}
	if len(res.Appended) == 0 {
		return res, nil // all duplicates: nothing to commit
	}
	if err := tx.Commit(); err != nil {
		return engine.AppendResult{}, classify(s.path, err)
	}
	return res, nil
}

// appendTx does the append inside tx, which holds the database write lock.
// Each event is inserted with the next runSeq unless its idempotency key is
// stored already (the unique index decides, so no separate lookup of the
// batch's keys is needed); the transition check then runs over the events
// that were new, and a rejection rolls the whole transaction back.
func (s *Store) appendTx(ctx context.Context, tx *sqlx.Tx, runID string, row runRow, b store.Batch, now string) (engine.AppendResult, error) {
	persisted, err := time.Parse(time.RFC3339Nano, now)
	if err != nil {
		return engine.AppendResult{}, err
	}
	var res engine.AppendResult
	var fresh []engine.RunEventWrite
	stored := map[string]engine.RunEventRecord{}
	insert := tx.StmtContext(ctx, s.stmts["insert_event"])
	outbox := tx.StmtContext(ctx, s.stmts["insert_outbox"])
	seq, head := row.nextSeq, row.lastHash
	for _, e := range b.Events {
		// The chain link is computed before the insert: a duplicate key
		// inserts nothing and leaves seq and the chain's head as they were.
		// The hash covers the columns as stored (audit.EventBytesV2).
		rec := engine.RunEventRecord{RunEventWrite: e, RunSeq: seq, PersistedAt: persisted}
		link := audit.Chained{Hash: head}
		var prevCol, hashCol, digestCol any
		if !s.unchained {
			link = audit.Chain(head, []engine.RunEventRecord{rec})[0]
			prevCol, hashCol = link.PrevHash, link.Hash
			if link.PayloadSHA256 != "" {
				digestCol = link.PayloadSHA256
			}
		}
		r, err := insert.ExecContext(ctx, runID, seq, e.TenantID, e.ProjectID, e.EnvironmentID, e.EventID,
			string(e.EventType), nullable(e.StepID), e.PlanID, e.PlanVersion, e.LogicalAttemptID, e.EngineAttemptID,
			e.IdempotencyKey, e.EmittedAt.UTC().Format(engine.TimeFormat), now, nullableJSON(e.Payload),
			prevCol, hashCol, digestCol)
		if err != nil {
			return engine.AppendResult{}, classify(s.path, err)
		}
		if n, _ := r.RowsAffected(); n == 0 {
			recs, err := s.queryEvents(ctx, tx.StmtContext(ctx, s.stmts["existing_event"]), "", runID, e.IdempotencyKey)
			if err != nil {
				return engine.AppendResult{}, err
			}
			if len(recs) != 1 {
				return engine.AppendResult{}, engine.Errorf(engine.CodeStoreCorrupt, "run %s: idempotency key %s conflicts but is not stored", runID, e.IdempotencyKey)
			}
			stored[e.IdempotencyKey] = recs[0]
			res.Deduped = append(res.Deduped, recs[0])
			continue
		}
		if _, err := outbox.ExecContext(ctx, runID, seq); err != nil {
			return engine.AppendResult{}, classify(s.path, err)
		}
		stored[e.IdempotencyKey] = rec
		res.Appended = append(res.Appended, rec)
		fresh = append(fresh, e)
		seq, head = seq+1, link.Hash
	}
	if len(fresh) > 0 {
		steps, err := s.stepStates(ctx, tx, runID, fresh)
		if err != nil {
			return engine.AppendResult{}, err
		}
		status, after, err := engine.CheckTransitions(row.status, steps, fresh)
		if err != nil {
			if !s.opts.DisableTransitionChecks {
				return engine.AppendResult{}, err
			}
			status, after = engine.SkipInvalidTransitions(row.status, steps, fresh)
		}
		if _, err := s.exec(ctx, tx, "update_seq", seq, string(status), head, runID); err != nil {
			return engine.AppendResult{}, err
		}
		for id, st := range after {
			if prev, ok := steps[id]; ok && prev == st {
				continue
			}
			if _, err := s.exec(ctx, tx, "upsert_step_state", runID, id, string(st.Status), st.LogicalAttemptID); err != nil {
				return engine.AppendResult{}, err
			}
		}
		if status.Terminal() {
			// Reservations matter while events can still be retried; a
			// finished run's are dropped here, once, rather than per append.
			if _, err := s.exec(ctx, tx, "forget_run_reservations", runID); err != nil {
				return engine.AppendResult{}, err
			}
		}
	}
	// Repeats inside the batch come back as the record of their first
	// occurrence.
	for _, j := range b.Repeats() {
		res.Deduped = append(res.Deduped, stored[b.Events[j].IdempotencyKey])
	}
	return res, nil
}

func (s *Store) stepStates(ctx context.Context, tx *sqlx.Tx, runID string, events []engine.RunEventWrite) (map[string]engine.StepState, error) {
	args := []any{runID}
	seen := map[string]bool{}
	for _, e := range events {
		if _, changes := engine.TargetOf(e.EventType); changes && e.EventType.StepLevel() && !seen[e.StepID] {
			seen[e.StepID] = true
			args = append(args, e.StepID)
		}
	}
	out := make(map[string]engine.StepState, len(seen))
	if len(seen) == 0 {
		return out, nil
	}
	var rows *sql.Rows
	var err error
	if len(seen) == 1 {
		rows, err = tx.StmtContext(ctx, s.stmts["step_state"]).QueryContext(ctx, args...)
	} else {
		rows, err = tx.QueryContext(ctx, strings.Replace(s.q["step_states"], "/*steps*/", placeholders(len(seen)), 1), args...)
	}
	if err != nil {
		return nil, classify(s.path, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, status string
		var attempt int
		if err := rows.Scan(&id, &status, &attempt); err != nil {
			return nil, classify(s.path, err)
		}
		out[id] = engine.StepState{Status: engine.StepStatus(status), LogicalAttemptID: attempt}
	}
	return out, classify(s.path, rows.Err())
}

type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// preparedQueryer runs a prepared statement; its query text is ignored.
type preparedQueryer interface {
	QueryContext(ctx context.Context, args ...any) (*sql.Rows, error)
}

func (s *Store) queryEvents(ctx context.Context, q any, query string, args ...any) ([]engine.RunEventRecord, error) {
	var rows *sql.Rows
	var err error
	switch q := q.(type) {
	case preparedQueryer:
		rows, err = q.QueryContext(ctx, args...)
	case queryer:
		rows, err = q.QueryContext(ctx, query, args...)
	}
	if err != nil {
		return nil, classify(s.path, err)
	}
	defer rows.Close()
	var out []engine.RunEventRecord
	for r, err := range s.scanEvents(rows) {
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// scanEvents yields the events of rows (the columns of list_events) and
// then rows.Err, if any.
func (s *Store) scanEvents(rows store.Rows) iter.Seq2[engine.RunEventRecord, error] {
	return store.ScanTextEvents(rows, func(err error) error { return classify(s.path, err) })
}

// ListEvents implements store.Store.
func (s *Store) ListEvents(ctx context.Context, runID string, afterSeq int64, limit int) ([]engine.RunEventRecord, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	return s.queryEvents(ctx, s.stmts["list_events"], "", runID, afterSeq, limit)
}

// ListStepEvents implements store.Store.
func (s *Store) ListStepEvents(ctx context.Context, runID, stepID string) ([]engine.RunEventRecord, error) {
	return s.queryEvents(ctx, s.stmts["list_step_events"], "", runID, stepID)
}

type metaRow struct {
	engine.RunMetadata
	Created string `db:"created_at"`
}

func (m metaRow) metadata() (engine.RunMetadata, error) {
	out := m.RunMetadata
	t, err := time.Parse(time.RFC3339Nano, m.Created)
	if err != nil {
		return out, engine.Errorf(engine.CodeStoreCorrupt, "run %s: created_at %q: %v", out.RunID, m.Created, err)
	}
	out.CreatedAt = t
	return out, nil
}

// GetRun implements store.Store.
func (s *Store) GetRun(ctx context.Context, runID string) (engine.RunMetadata, error) {
	rows, err := s.db.QueryxContext(ctx, s.q["get_run"], runID)
	if err != nil {
		return engine.RunMetadata{}, classify(s.path, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return engine.RunMetadata{}, classify(s.path, err)
		}
		return engine.RunMetadata{}, engine.Errorf(engine.CodeRunNotFound, "run %s not found in %s", runID, s.path)
	}
	var m metaRow
	if err := scanMeta(rows, &m); err != nil {
		return engine.RunMetadata{}, err
	}
	return m.metadata()
}

func scanMeta(rows *sqlx.Rows, m *metaRow) error {
	return rows.Scan(&m.RunID, &m.TenantID, &m.ProjectID, &m.EnvironmentID, &m.PlanID, &m.PlanVersion, &m.PlanSHA256,
		&m.TargetAdapter, &m.ProviderRunRef, &m.RunRequestID, &m.Created)
}

// ListRuns implements store.Store.
func (s *Store) ListRuns(ctx context.Context, f store.RunFilter) ([]store.RunSummary, error) {
	args := f.HistoryArgs(func(t time.Time) any { return t.UTC().Format(engine.TimeFormat) })
	rows, err := s.db.QueryContext(ctx, s.q["list_runs"], args...)
	if err != nil {
		return nil, classify(s.path, err)
	}
	defer rows.Close()
	var out []store.RunSummary
	for rows.Next() {
		r, err := store.ScanRunSummary(rows, func() any { return new(string) }, textTime)
		if err != nil {
			return nil, classify(s.path, err)
		}
		out = append(out, r)
	}
	return out, classify(s.path, rows.Err())
}

// textTime reads a timestamp column stored as text ("" for none).
func textTime(dest any) (time.Time, error) {
	v := *dest.(*string)
	if v == "" {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339Nano, v)
}

// SetProviderRunRef implements store.Store.
func (s *Store) SetProviderRunRef(ctx context.Context, runID, ref string) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	res, err := s.execWrite(ctx, func() (sql.Result, error) { return s.db.ExecContext(ctx, s.q["set_provider_ref"], ref, runID) })
	if err != nil {
		return classify(s.path, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return engine.Errorf(engine.CodeRunNotFound, "run %s not found in %s", runID, s.path)
	}
	return nil
}

// ReserveEventIDs implements store.Store.
func (s *Store) ReserveEventIDs(ctx context.Context, runID string, candidates map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(candidates))
	if len(candidates) == 0 {
		return out, nil
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return nil, classify(s.path, err)
	}
	defer tx.Rollback()
	now := s.now()
	// A run reserves every step's first-attempt keys in one call, thousands
	// for a large plan: the statements are prepared once per transaction.
	persisted := tx.StmtContext(ctx, s.stmts["persisted_event_id"])
	reserve := tx.StmtContext(ctx, s.stmts["reserve_event_id"])
	reserved := tx.StmtContext(ctx, s.stmts["reserved_event_id"])
	for key, candidate := range candidates {
		var id string
		err := persisted.QueryRowContext(ctx, runID, key).Scan(&id)
		if err == nil {
			out[key] = id
			continue
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, classify(s.path, err)
		}
		if _, err := reserve.ExecContext(ctx, runID, key, candidate, now); err != nil {
			return nil, classify(s.path, err)
		}
		if err := reserved.QueryRowContext(ctx, runID, key).Scan(&id); err != nil {
			return nil, classify(s.path, err)
		}
		out[key] = id
	}
	return out, classify(s.path, tx.Commit())
}

// RecordAlert implements store.Store.
func (s *Store) RecordAlert(ctx context.Context, a engine.Alert) (bool, error) {
	if a.Key == "" || a.Code == "" {
		return false, engine.Errorf(engine.CodeInvalidArgument, "an alert needs a key and a code")
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	res, err := s.execWrite(ctx, func() (sql.Result, error) {
		return s.db.ExecContext(ctx, s.q["insert_alert"], a.Key, string(a.Code), a.Severity, nullable(a.RunID), nullable(a.TenantID),
			nullable(a.ProjectID), nullable(a.EnvironmentID), a.Message, nullableJSON(a.Payload), s.now())
	})
	if err != nil {
		return false, classify(s.path, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// ListAlerts implements store.Store.
func (s *Store) ListAlerts(ctx context.Context, runID string) ([]engine.Alert, error) {
	rows, err := s.db.QueryContext(ctx, s.q["list_alerts"], runID, runID)
	if err != nil {
		return nil, classify(s.path, err)
	}
	defer rows.Close()
	var out []engine.Alert
	for rows.Next() {
		var a engine.Alert
		var code, created string
		var payload sql.NullString
		if err := rows.Scan(&a.Key, &code, &a.Severity, &a.RunID, &a.TenantID, &a.ProjectID, &a.EnvironmentID, &a.Message, &payload, &created); err != nil {
			return nil, classify(s.path, err)
		}
		a.Code = engine.Code(code)
		if payload.Valid {
			a.Payload = json.RawMessage(payload.String)
		}
		a.CreatedAt, _ = time.Parse(time.RFC3339Nano, created)
		out = append(out, a)
	}
	return out, classify(s.path, rows.Err())
}

// SendSignal implements store.Store.
func (s *Store) SendSignal(ctx context.Context, sig engine.Signal) (engine.Signal, error) {
	if !sig.Type.Valid() {
		return engine.Signal{}, engine.Errorf(engine.CodeInvalidArgument, "unknown signal type %q (want PAUSE, RESUME, CANCEL or RETRY_STEP)", sig.Type)
	}
	if sig.SignalID == "" || sig.RunID == "" {
		return engine.Signal{}, engine.Errorf(engine.CodeInvalidArgument, "a signal needs a signalId and a runId")
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return engine.Signal{}, classify(s.path, err)
	}
	defer tx.Rollback()
	if got, err := store.ScanTextSignals(tx.QueryContext(ctx, s.q["signal_by_id"], sig.SignalID)); err != nil {
		return engine.Signal{}, classify(s.path, err)
	} else if len(got) == 1 {
		return got[0], nil
	}
	var one int
	if err := tx.GetContext(ctx, &one, s.q["run_exists"], sig.RunID); errors.Is(err, sql.ErrNoRows) {
		return engine.Signal{}, engine.Errorf(engine.CodeRunNotFound, "run %s not found in %s", sig.RunID, s.path)
	} else if err != nil {
		return engine.Signal{}, classify(s.path, err)
	}
	if err := tx.GetContext(ctx, &sig.Seq, s.q["next_signal_seq"], sig.RunID); err != nil {
		return engine.Signal{}, classify(s.path, err)
	}
	now := s.now()
	if _, err := s.exec(ctx, tx, "insert_signal", sig.RunID, sig.Seq, sig.SignalID, string(sig.Type),
		nullable(sig.StepID), nullable(sig.Reason), nullable(sig.RequestedBy), now); err != nil {
		return engine.Signal{}, classify(s.path, err)
	}
	if err := tx.Commit(); err != nil {
		return engine.Signal{}, classify(s.path, err)
	}
	sig.CreatedAt, _ = time.Parse(time.RFC3339Nano, now)
	return sig, nil
}

// ListSignals implements store.Store.
func (s *Store) ListSignals(ctx context.Context, runID string, afterSeq int64) ([]engine.Signal, error) {
	out, err := store.ScanTextSignals(s.db.QueryContext(ctx, s.q["list_signals"], runID, afterSeq))
	return out, classify(s.path, err)
}

// AcquireLease implements store.Store.
func (s *Store) AcquireLease(ctx context.Context, runID, owner string, ttl time.Duration) error {
	_, err := s.AcquireFencedLease(ctx, runID, owner, ttl)
	return err
}

// AcquireFencedLease implements store.Store: the lease is decided against
// the store's clock under the database write lock, which every append also
// holds, so a takeover and a stale runner's append never interleave.
func (s *Store) AcquireFencedLease(ctx context.Context, runID, owner string, ttl time.Duration) (engine.Lease, error) {
	if owner == "" {
		return engine.Lease{}, engine.Errorf(engine.CodeInvalidArgument, "a lease needs an owner")
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return engine.Lease{}, classify(s.path, err)
	}
	defer tx.Rollback()
	now := s.opts.Now().UTC()
	var holder, expires string
	var fence int64
	err = tx.QueryRowContext(ctx, s.q["get_fenced_lease"], runID).Scan(&holder, &expires, &fence)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return engine.Lease{}, classify(s.path, err)
	}
	l, err := store.NextLease(runID, owner, ttl, now, err == nil, holder, expires, fence)
	if err != nil {
		return engine.Lease{}, err
	}
	if _, err := s.exec(ctx, tx, "put_lease", runID, owner, now.Format(engine.TimeFormat), l.ExpiresAt.Format(engine.TimeFormat), l.Fence); err != nil {
		return engine.Lease{}, classify(s.path, err)
	}
	if err := tx.Commit(); err != nil {
		return engine.Lease{}, classify(s.path, err)
	}
	return l, nil
}

// checkFence refuses an append under tx unless lease is still the run's
// lease (same owner, same fence). An expired lease that nobody took over
// still passes: its fence is the newest.
func (s *Store) checkFence(ctx context.Context, tx *sqlx.Tx, lease engine.Lease) error {
	var holder string
	var fence int64
	err := tx.StmtContext(ctx, s.stmts["lease_fence"]).QueryRowContext(ctx, lease.RunID).Scan(&holder, &fence)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return classify(s.path, err)
	}
	return store.CheckFence(lease, holder, fence)
}

// Pulse implements store.Store in one write transaction: a statement per
// run costs microseconds here, so the per-run prepared statements stay.
func (s *Store) Pulse(ctx context.Context, owner string, ttl time.Duration, runs []engine.PulseRun) (engine.PulseResult, error) {
	out := engine.PulseResult{Leases: map[string]engine.Lease{}}
	runs, err := store.PulseRuns(owner, runs)
	if err != nil || len(runs) == 0 {
		return out, err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return engine.PulseResult{}, classify(s.path, err)
	}
	defer tx.Rollback()
	expires := s.opts.Now().UTC().Add(ttl).Format(engine.TimeFormat)
	for _, r := range runs {
		if _, err := s.exec(ctx, tx, "renew_lease", expires, r.RunID, owner, r.Fence); err != nil {
			return engine.PulseResult{}, err
		}
		var holder, exp string
		var fence int64
		err := tx.StmtContext(ctx, s.stmts["get_fenced_lease"]).QueryRowContext(ctx, r.RunID).Scan(&holder, &exp, &fence)
		switch {
		case err == nil:
			l := engine.Lease{RunID: r.RunID, Owner: holder, Fence: fence}
			l.ExpiresAt, _ = time.Parse(time.RFC3339Nano, exp)
			out.Leases[r.RunID] = l
		case !errors.Is(err, sql.ErrNoRows):
			return engine.PulseResult{}, classify(s.path, err)
		}
		sigs, err := store.ScanTextSignals(tx.StmtContext(ctx, s.stmts["list_signals"]).QueryContext(ctx, r.RunID, r.AfterSignal))
		if err != nil {
			return engine.PulseResult{}, classify(s.path, err)
		}
		out.Signals = append(out.Signals, sigs...)
	}
	if err := tx.Commit(); err != nil {
		return engine.PulseResult{}, classify(s.path, err)
	}
	return out, nil
}

// ReleaseLease implements store.Store.
func (s *Store) ReleaseLease(ctx context.Context, runID, owner string) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	_, err := s.execWrite(ctx, func() (sql.Result, error) { return s.db.ExecContext(ctx, s.q["release_lease"], runID, owner) })
	return classify(s.path, err)
}

// CountOutbox returns the number of outbox rows of a run (conformance).
func (s *Store) CountOutbox(ctx context.Context, runID string) (int, error) {
	var n int
	err := s.db.GetContext(ctx, &n, s.q["count_outbox"], runID)
	return n, classify(s.path, err)
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullableJSON(p json.RawMessage) any {
	if len(p) == 0 || string(p) == "null" {
		return nil
	}
	return string(p)
}

var _ store.Store = (*Store)(nil)
