// Package snowflake is dvtrun's Snowflake backend on the gosnowflake driver:
// the state store (the event log and its append authority) and a warehouse
// that runs plan steps.
//
// Snowflake enforces neither PRIMARY KEY nor UNIQUE, and each round trip
// costs 100–400 ms, so the append path deduplicates in Go under the run's
// dvt_run_seq row lock and sends its writes as one multi-statement request
// whose values are hex literals (see script.go).
package snowflake

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store"
)

// Options configures a Store.
type Options struct {
	// Now is the append authority's clock (persistedAt, created_at, lease
	// times); default time.Now. When it is not set, lease expiry is decided
	// by the database's clock (CURRENT_TIMESTAMP), the one clock that every
	// runner of a run shares.
	Now func() time.Time
	// DisableTransitionChecks turns off Layer 2 (append-time transition
	// validation). Step and run state is maintained either way.
	DisableTransitionChecks bool
	// MaxAttempts bounds how often a transaction aborted by contention
	// (lock waiters, conflicts, expired session, network) is run (default 12).
	MaxAttempts int
	// RetryBase is the first backoff wait (default 25 ms).
	RetryBase time.Duration
	// LockWait bounds each operation's wait for a lock another process
	// holds (default engine.DefaultLockWait, the CLI's --lock-wait); then
	// the operation fails with STORE_UNAVAILABLE. Attempts do not multiply
	// it.
	LockWait time.Duration
	// OnWait receives a progress line about every LockTimeout while a lock
	// is waited for: the table (or the migration lease), its holder and
	// since when.
	OnWait engine.WaitFunc
	// LockTimeout is the sessions' LOCK_TIMEOUT: how long one attempt waits
	// for a table lock before the holder is looked at (default 5 s; whole
	// seconds, at least 1).
	LockTimeout time.Duration
	// StatementTimeout is the sessions' STATEMENT_TIMEOUT_IN_SECONDS
	// (default 20 s, whole seconds): state store statements are index
	// probes and small writes; one running longer is a fault, not work.
	StatementTimeout time.Duration
	// StaleLockAge is how long a transaction may hold one of the store's
	// table locks before a waiter ends it with SYSTEM$ABORT_TRANSACTION as a
	// dead client's (default 15 s). A store transaction never runs step
	// SQL: it holds its lock for one statement (a Scripting block, a single
	// UPDATE) or for a lock request, a few index reads and a commit request
	// (pinnedTx) — a few round trips of 100–400 ms — so 15 s is a margin no
	// live one reaches in practice, and short enough that a worker killed
	// inside a queue transaction is recovered within 30 s of its lease.
	// Should a slow live one be ended all the same, its COMMIT fails and it
	// is retried: the abort rolls all of it back, so nothing is written
	// twice; the cost is a retry, never a duplicate.
	StaleLockAge time.Duration
	// MigrateLeaseTTL is the migration lease: renewed every third of it
	// while migrating, taken over by another process once it has expired
	// by the database's clock (default 30 s).
	MigrateLeaseTTL time.Duration
	// Transporter replaces the driver's HTTP transport (tests, proxies).
	// nil keeps gosnowflake's own, which checks certificate revocation.
	Transporter http.RoundTripper
}

// maxIdleSessions is how many open sessions a Store keeps between uses.
const maxIdleSessions = 8

// Store is the Snowflake state store. It is safe for concurrent use; any
// number of processes may open the same database.
type Store struct {
	db      *sql.DB
	opts    Options
	q       map[string]string
	where   string   // the redacted DSN, for messages
	secrets []string // credential values scrubbed from error messages
	dbClock bool     // leases expire by the database's clock (no Options.Now)

	tables           map[string]bool // the store's own tables, upper case (locks.go)
	database, schema string          // the DSN's, upper case; "" when unset

	cacheMu sync.Mutex
	cache   map[string]cachedRun // runs this Store appended to, by run id (append.go)
	// metas holds the metadata of the unfinished runs this Store
	// bootstrapped, as stored: a run's runner reads it right after the
	// bootstrap, and saves that round trip.
	metas map[string]engine.RunMetadata

	// QueueSQL is the run queue and the schedule cursors.
	*store.QueueSQL
	// BundleSQL keeps the plan bundles of runs and requests.
	store.BundleSQL
	// AuditSQL reads the hash chains and keeps the global log.
	*store.AuditSQL
	// ProjectionSQL is the SQL projection and its Go reference.
	store.ProjectionSQL
	aq map[string]string // audit.sql, for audit doctor
}

// Open connects to the database and schema a gosnowflake DSN names and
// applies pending migrations (once, even when several processes open the
// store at the same moment).
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	dbClock := opts.Now == nil
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 12
	}
	if opts.RetryBase <= 0 {
		opts.RetryBase = 25 * time.Millisecond
	}
	if opts.LockWait <= 0 {
		opts.LockWait = engine.DefaultLockWait
	}
	if opts.LockTimeout < time.Second {
		opts.LockTimeout = 5 * time.Second
	}
	if opts.StatementTimeout < time.Second {
		opts.StatementTimeout = 20 * time.Second
	}
	if opts.MigrateLeaseTTL <= 0 {
		opts.MigrateLeaseTTL = 30 * time.Second
	}
	cfg, err := ConfigFromDSN(dsn)
	if err != nil {
		return nil, err
	}
	if opts.Transporter != nil {
		cfg.Transporter = opts.Transporter
	}
	opts.StatementTimeout = setSessionParams(cfg, opts)
	if opts.StaleLockAge <= 0 {
		opts.StaleLockAge = 15 * time.Second
	}
	q, err := sqlfiles.Queries(sqlfiles.Snowflake, "store.sql")
	if err != nil {
		return nil, err
	}
	tables, err := storeTables(q)
	if err != nil {
		return nil, err
	}
	s := &Store{
		tables:   tables,
		database: strings.ToUpper(cfg.Database),
		schema:   strings.ToUpper(cfg.Schema),
		db:       sql.OpenDB(newConnector(cfg, RedactDSN(dsn))),
		opts:     opts,
		dbClock:  dbClock,
		q:        q,
		where:    RedactDSN(dsn),
		secrets:  append(secretsOfDSN(dsn), secretsOfConfig(cfg)...),
	}
	// A connection is a Snowflake session: a login to open, a request to
	// close. Keep the sessions a process's runs, pulse and services use
	// at once instead of letting database/sql close all but two of them
	// after each burst and log in again at the next.
	s.db.SetMaxIdleConns(maxIdleSessions)
	if err := s.migrate(ctx); err != nil {
		s.db.Close()
		return nil, err
	}
	if s.BundleSQL, err = s.newBundles(); err != nil {
		s.db.Close()
		return nil, err
	}
	if s.QueueSQL, err = s.newQueue(); err != nil {
		s.db.Close()
		return nil, err
	}
	if s.AuditSQL, err = s.newAudit(); err != nil {
		s.db.Close()
		return nil, err
	}
	if s.ProjectionSQL, err = s.newProjection(); err != nil {
		s.db.Close()
		return nil, err
	}
	return s, nil
}

// DB gives read access for projections and audit queries.
func (s *Store) DB() *sql.DB { return s.db }

// Close closes the connections (and their Snowflake sessions).
func (s *Store) Close() error { return s.db.Close() }

func (s *Store) now() time.Time { return s.opts.Now().UTC() }

// migrate applies the pending migrations under the 'migrate' lock row. DDL
// commits on its own in Snowflake, so the lock cannot be a transaction
// holding a row lock across the migrations: it is a lease on the row, taken
// by an UPDATE that only one process's can win (UPDATEs of one table wait
// for each other), renewed while migrating and taken over once expired by
// the database's clock, so that a migrator that died holds everyone up for
// at most Options.MigrateLeaseTTL. The taker applies again the migration the
// dead one was in: each is idempotent statement by statement (IF NOT
// EXISTS, OR REPLACE, inserts guarded by NOT EXISTS, a table emptied before
// it is filled).
func (s *Store) migrate(ctx context.Context) error {
	migs, err := sqlfiles.Migrations(sqlfiles.Snowflake)
	if err != nil {
		return err
	}
	pending := func() ([]sqlfiles.Migration, error) {
		rows, err := s.db.QueryContext(ctx, s.q["schema_versions"])
		if err != nil {
			return nil, s.classify("read schema versions", err)
		}
		defer rows.Close()
		applied := map[int]bool{}
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				return nil, s.classify("read schema versions", err)
			}
			applied[v] = true
		}
		if err := rows.Err(); err != nil {
			return nil, s.classify("read schema versions", err)
		}
		var out []sqlfiles.Migration
		for _, m := range migs {
			if !applied[m.Version] {
				out = append(out, m)
			}
		}
		return out, nil
	}
	// A current schema costs one request: the versions are read first, and
	// only a missing version table or a missing version takes the path below.
	var todo []sqlfiles.Migration
	err = s.withRetry(ctx, func() error {
		todo, err = pending()
		return err
	})
	switch {
	case err == nil && len(todo) == 0:
		return nil
	case err != nil && !objectMissing(err):
		return err
	}
	// Creating the lock table and the version table is idempotent; two
	// processes doing it at once may conflict, and simply try again.
	err = s.withRetry(ctx, func() error {
		for _, name := range []string{"create_locks", "create_schema_version"} {
			if _, err := s.db.ExecContext(ctx, s.q[name]); err != nil {
				return s.classify("prepare migrations", err)
			}
		}
		todo, err = pending()
		return err
	})
	if err != nil || len(todo) == 0 {
		return err
	}
	owner := uuid.NewString()
	if err := s.acquireMigrateLock(ctx, owner); err != nil {
		return err
	}
	mctx, stop := context.WithCancelCause(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		s.renewMigrateLock(mctx, owner, stop)
	}()
	defer func() {
		stop(nil)
		<-renewed
		// Released with a fresh context: a cancelled Open must not leave the
		// lease to its expiry.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		s.db.ExecContext(rctx, s.q["release_migrate_lock"], owner)
	}()
	lost := func(err error) error {
		if cause := context.Cause(mctx); mctx.Err() != nil && ctx.Err() == nil && cause != nil {
			return cause
		}
		return err
	}
	// Another process may have migrated while this one waited.
	err = s.withRetry(mctx, func() error {
		todo, err = pending()
		return err
	})
	if err != nil {
		return lost(err)
	}
	for _, m := range todo {
		for _, st := range splitStatements(m.SQL) {
			if _, err := s.db.ExecContext(mctx, st); err != nil {
				return lost(fmt.Errorf("snowflake: migration %s: %w", m.Name, s.classify("migrate", err)))
			}
		}
		if _, err := s.db.ExecContext(mctx, s.q["insert_schema_version"], m.Version, m.Name, tsText(s.now())); err != nil {
			return lost(s.classify("record migration "+m.Name, err))
		}
	}
	return nil
}

// acquireMigrateLock takes the migration lease, waiting while another
// process holds it unexpired, with a progress line, at most
// Options.LockWait.
func (s *Store) acquireMigrateLock(ctx context.Context, owner string) error {
	start := time.Now()
	// Waits for DVT_LOCKS' table lock and for the lease share one budget.
	tableWait := &lockWaitState{start: start}
	wait := 50 * time.Millisecond
	var reported time.Time
	for {
		var won bool
		err := s.withRetryWait(ctx, tableWait, func() error {
			res, err := s.db.ExecContext(ctx, s.q["acquire_migrate_lock"], owner, s.opts.MigrateLeaseTTL.Milliseconds())
			if err != nil {
				return s.classify("take the migration lease", err)
			}
			n, _ := res.RowsAffected()
			won = n > 0
			return nil
		})
		if err != nil || won {
			return err
		}
		w := engine.LockWait{Resource: "the schema migration lease", Waited: time.Since(start), Budget: s.opts.LockWait}
		var holder string
		var until sql.NullTime
		if s.db.QueryRowContext(ctx, s.q["migrate_lock_holder"]).Scan(&holder, &until) == nil && holder != "" {
			w.Holder = "process " + holder
			if until.Valid {
				w.Holder += " (lease until " + until.Time.UTC().Format(time.RFC3339) + ")"
			}
		}
		if w.Waited >= s.opts.LockWait {
			return w.Exceeded()
		}
		if time.Since(reported) >= s.opts.LockTimeout {
			s.opts.OnWait.Report(w)
			reported = time.Now()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(wait*2, time.Second)
	}
}

// renewMigrateLock extends the lease every third of its TTL until ctx
// ends; it cancels the migration (stop) when the lease was taken over or
// could not be renewed before it expired.
func (s *Store) renewMigrateLock(ctx context.Context, owner string, stop context.CancelCauseFunc) {
	ttl := s.opts.MigrateLeaseTTL
	lastRenewed := time.Now()
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		res, err := s.db.ExecContext(ctx, s.q["renew_migrate_lock"], ttl.Milliseconds(), owner)
		if err == nil {
			if n, _ := res.RowsAffected(); n == 0 {
				stop(engine.MarkTransient(engine.Errorf(engine.CodeStoreUnavailable,
					"Snowflake state store %s: another process took over the schema migration lease; retry", s.where)))
				return
			}
			lastRenewed = time.Now()
			continue
		}
		if ctx.Err() == nil && time.Since(lastRenewed) >= ttl {
			stop(engine.MarkTransient(engine.Errorf(engine.CodeStoreUnavailable,
				"Snowflake state store %s: the schema migration lease could not be renewed within %s: %v", s.where, ttl, s.classify("renew the migration lease", err))))
			return
		}
	}
}

// inList puts n placeholders into every marker of a statement.
func inList(q, marker string, n int) string {
	return strings.ReplaceAll(q, marker, placeholders(n))
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

// compactJSON returns a stored VARIANT as compact JSON: Snowflake returns
// it pretty-printed.
func compactJSON(s sql.NullString) json.RawMessage {
	if !s.Valid || s.String == "" {
		return nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s.String)); err != nil {
		return json.RawMessage(s.String)
	}
	return json.RawMessage(b.Bytes())
}

// ListEvents implements store.Store.
func (s *Store) ListEvents(ctx context.Context, runID string, afterSeq int64, limit int) ([]engine.RunEventRecord, error) {
	if limit > 0 {
		return s.queryEvents(ctx, "list events", s.q["list_events_limit"], runID, afterSeq, limit)
	}
	return s.queryEvents(ctx, "list events", s.q["list_events"], runID, afterSeq)
}

// ListStepEvents implements store.Store.
func (s *Store) ListStepEvents(ctx context.Context, runID, stepID string) ([]engine.RunEventRecord, error) {
	return s.queryEvents(ctx, "list step events", s.q["list_step_events"], runID, stepID)
}

// queryEvents runs a query returning list_events' columns and collects
// the events; what names the operation in errors.
func (s *Store) queryEvents(ctx context.Context, what, query string, args ...any) ([]engine.RunEventRecord, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, s.classify(what, err)
	}
	defer rows.Close()
	var out []engine.RunEventRecord
	for rows.Next() {
		r, err := scanEvent(rows)
		if err != nil {
			return nil, s.classify(what, err)
		}
		out = append(out, r)
	}
	return out, s.classify(what, rows.Err())
}

type scanner interface{ Scan(dest ...any) error }

func scanEvent(rows scanner) (engine.RunEventRecord, error) {
	var r engine.RunEventRecord
	var step, payload sql.NullString
	var typ string
	if err := rows.Scan(&r.RunID, &r.RunSeq, &r.TenantID, &r.ProjectID, &r.EnvironmentID, &r.EventID, &typ, &step,
		&r.PlanID, &r.PlanVersion, &r.LogicalAttemptID, &r.EngineAttemptID, &r.IdempotencyKey, &r.EmittedAt, &r.PersistedAt, &payload); err != nil {
		return r, err
	}
	r.EventType = engine.EventType(typ)
	r.StepID = step.String
	r.Payload = compactJSON(payload)
	r.EmittedAt = r.EmittedAt.UTC()
	r.PersistedAt = r.PersistedAt.UTC()
	return r, nil
}

// GetRun implements store.Store.
func (s *Store) GetRun(ctx context.Context, runID string) (engine.RunMetadata, error) {
	s.cacheMu.Lock()
	m, ok := s.metas[runID]
	s.cacheMu.Unlock()
	if ok {
		return m, nil
	}
	runs, err := s.queryRuns(ctx, s.q["get_run"], runID)
	if err != nil {
		return engine.RunMetadata{}, err
	}
	if len(runs) == 0 {
		return engine.RunMetadata{}, engine.Errorf(engine.CodeRunNotFound, "run %s not found in %s", runID, s.where)
	}
	return runs[0], nil
}

// ListRuns implements store.Store.
func (s *Store) ListRuns(ctx context.Context, f store.RunFilter) ([]store.RunSummary, error) {
	rows, err := s.db.QueryContext(ctx, s.q["list_runs"], f.HistoryArgs(func(t time.Time) any { return tsText(t) })...)
	if err != nil {
		return nil, s.classify("read run history", err)
	}
	defer rows.Close()
	var out []store.RunSummary
	for rows.Next() {
		r, err := store.ScanRunSummary(rows, func() any { return new(sql.NullTime) }, func(dest any) (time.Time, error) {
			if t := dest.(*sql.NullTime); t.Valid {
				return t.Time.UTC(), nil
			}
			return time.Time{}, nil
		})
		if err != nil {
			return nil, s.classify("read run history", err)
		}
		out = append(out, r)
	}
	return out, s.classify("read run history", rows.Err())
}

func (s *Store) queryRuns(ctx context.Context, q string, args ...any) ([]engine.RunMetadata, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, s.classify("read runs", err)
	}
	defer rows.Close()
	var out []engine.RunMetadata
	for rows.Next() {
		var m engine.RunMetadata
		if err := rows.Scan(&m.RunID, &m.TenantID, &m.ProjectID, &m.EnvironmentID, &m.PlanID, &m.PlanVersion, &m.PlanSHA256,
			&m.TargetAdapter, &m.ProviderRunRef, &m.RunRequestID, &m.CreatedAt); err != nil {
			return nil, s.classify("read runs", err)
		}
		m.CreatedAt = m.CreatedAt.UTC()
		out = append(out, m)
	}
	return out, s.classify("read runs", rows.Err())
}

// SetProviderRunRef implements store.Store.
func (s *Store) SetProviderRunRef(ctx context.Context, runID, ref string) error {
	return s.withRetry(ctx, func() error {
		res, err := s.db.ExecContext(ctx, s.q["set_provider_ref"], ref, runID)
		if err != nil {
			return s.classify("set provider run ref", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return engine.Errorf(engine.CodeRunNotFound, "run %s not found in %s", runID, s.where)
		}
		s.cacheMu.Lock()
		if m, ok := s.metas[runID]; ok {
			m.ProviderRunRef = ref
			s.metas[runID] = m
		}
		s.cacheMu.Unlock()
		return nil
	})
}

// ReserveEventIDs implements store.Store in one request (the
// reserve_event_ids block): a MERGE binds the candidates whose keys are
// free, then the block answers what each key is bound to, a persisted event
// first.
func (s *Store) ReserveEventIDs(ctx context.Context, runID string, candidates map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(candidates))
	if len(candidates) == 0 {
		return out, nil
	}
	keys := slices.Sorted(maps.Keys(candidates))
	now := hexLit(tsText(s.now()))
	rows := make([][]string, len(keys))
	for i, k := range keys {
		rows[i] = []string{hexLit(runID), hexLit(k), hexLit(candidates[k]), now}
	}
	block, err := render(s.q["reserve_event_ids"], map[string]string{"run_id": hexLit(runID), "keys": hexRows(keys)}, rows)
	if err != nil {
		return nil, err
	}
	err = s.withRetry(ctx, func() error {
		rs, err := s.db.QueryContext(ctx, block)
		if err != nil {
			return s.classify("reserve event ids", err)
		}
		defer rs.Close()
		for rs.Next() {
			var k, id string
			var pref int
			if err := rs.Scan(&k, &id, &pref); err != nil {
				return s.classify("read event ids", err)
			}
			if _, seen := out[k]; !seen {
				out[k] = id
			}
		}
		return s.classify("read event ids", rs.Err())
	})
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		if _, ok := out[k]; !ok {
			return nil, engine.Errorf(engine.CodeStoreCorrupt, "run %s: idempotency key %s was reserved but reads back unbound", runID, k)
		}
	}
	return out, nil
}

// RecordAlert implements store.Store.
func (s *Store) RecordAlert(ctx context.Context, a engine.Alert) (bool, error) {
	if a.Key == "" || a.Code == "" {
		return false, engine.Errorf(engine.CodeInvalidArgument, "an alert needs a key and a code")
	}
	var inserted bool
	err := s.withRetry(ctx, func() error {
		res, err := s.db.ExecContext(ctx, s.q["insert_alert"], a.Key, string(a.Code), a.Severity, nullable(a.RunID), nullable(a.TenantID),
			nullable(a.ProjectID), nullable(a.EnvironmentID), a.Message, nullableJSON(a.Payload), tsText(s.now()))
		if err != nil {
			return s.classify("record alert", err)
		}
		n, _ := res.RowsAffected()
		inserted = n > 0
		return nil
	})
	return inserted, err
}

// ListAlerts implements store.Store.
func (s *Store) ListAlerts(ctx context.Context, runID string) ([]engine.Alert, error) {
	rows, err := s.db.QueryContext(ctx, s.q["list_alerts"], runID, runID)
	if err != nil {
		return nil, s.classify("list alerts", err)
	}
	defer rows.Close()
	var out []engine.Alert
	for rows.Next() {
		var a engine.Alert
		var code string
		var payload sql.NullString
		if err := rows.Scan(&a.Key, &code, &a.Severity, &a.RunID, &a.TenantID, &a.ProjectID, &a.EnvironmentID, &a.Message, &payload, &a.CreatedAt); err != nil {
			return nil, s.classify("list alerts", err)
		}
		a.Code = engine.Code(code)
		a.Payload = compactJSON(payload)
		a.CreatedAt = a.CreatedAt.UTC()
		out = append(out, a)
	}
	return out, s.classify("list alerts", rows.Err())
}

// ListSignals implements store.Store.
func (s *Store) ListSignals(ctx context.Context, runID string, afterSeq int64) ([]engine.Signal, error) {
	rows, err := s.db.QueryContext(ctx, s.q["list_signals"], runID, afterSeq)
	if err != nil {
		return nil, s.classify("list signals", err)
	}
	defer rows.Close()
	var out []engine.Signal
	for rows.Next() {
		var sig engine.Signal
		var typ string
		if err := rows.Scan(&sig.RunID, &sig.Seq, &sig.SignalID, &typ, &sig.StepID, &sig.Reason, &sig.RequestedBy, &sig.CreatedAt); err != nil {
			return nil, s.classify("list signals", err)
		}
		sig.Type = engine.SignalType(typ)
		sig.CreatedAt = sig.CreatedAt.UTC()
		out = append(out, sig)
	}
	return out, s.classify("list signals", rows.Err())
}

// AcquireLease implements store.Store.
func (s *Store) AcquireLease(ctx context.Context, runID, owner string, ttl time.Duration) error {
	_, err := s.AcquireFencedLease(ctx, runID, owner, ttl)
	return err
}

// AcquireFencedLease implements store.Store in one request: the
// acquire_lease_block (store.sql) reads and writes the lease under the
// run's lock (the lock every append takes first), so a takeover and a stale
// runner's append are serialised: the append either committed before the
// takeover (and the new owner reads it) or sees the new fence and writes
// nothing. Retrying after a lost answer is safe: the owner then renews what
// it took, with the same fence.
func (s *Store) AcquireFencedLease(ctx context.Context, runID, owner string, ttl time.Duration) (engine.Lease, error) {
	if owner == "" {
		return engine.Lease{}, engine.Errorf(engine.CodeInvalidArgument, "a lease needs an owner")
	}
	var out engine.Lease
	err := s.withRetry(ctx, func() error {
		nowAt, expires := "NULL", "NULL" // the database's clock
		if !s.dbClock {
			now := s.now()
			nowAt, expires = hexLit(tsText(now)), hexLit(tsText(now.Add(ttl)))
		}
		block, err := render(s.q["acquire_lease_block"], map[string]string{
			"run_id": hexLit(runID), "owner": hexLit(owner), "now_at": nowAt, "expires_at": expires, "ttl_ms": intLit(ttl.Milliseconds()),
		}, nil)
		if err != nil {
			return err
		}
		var outcome, holder string
		var exp time.Time
		var fence int64
		if err := s.db.QueryRowContext(ctx, block).Scan(&outcome, &holder, &exp, &fence); err != nil {
			return s.classify("acquire lease", err)
		}
		switch outcome {
		case leaseAcquired:
			out = engine.Lease{RunID: runID, Owner: owner, Fence: fence, ExpiresAt: exp.UTC()}
			return nil
		case leaseHeld:
			return engine.Errorf(engine.CodeLeaseHeld, "run %s is owned by %s until %s", runID, holder, exp.UTC().Format(time.RFC3339))
		}
		return engine.Errorf(engine.CodeStoreCorrupt, "run %s: the lease block answered %q", runID, outcome)
	})
	if err != nil {
		return engine.Lease{}, err
	}
	return out, nil
}

// Outcomes of the lease block.
const (
	leaseAcquired = "ACQUIRED"
	leaseHeld     = "LEASE_HELD"
)

// ReleaseLease implements store.Store.
func (s *Store) ReleaseLease(ctx context.Context, runID, owner string) error {
	return s.withRetry(ctx, func() error {
		_, err := s.db.ExecContext(ctx, s.q["release_lease"], runID, owner)
		return s.classify("release lease", err)
	})
}

// CountOutbox returns the number of outbox rows of a run (conformance).
func (s *Store) CountOutbox(ctx context.Context, runID string) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, s.q["count_outbox"], runID).Scan(&n)
	return n, s.classify("count outbox", err)
}

var _ store.Store = (*Store)(nil)
