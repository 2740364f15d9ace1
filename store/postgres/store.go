// Package postgres is dvtrun's Postgres state store on
// github.com/jackc/pgx/v5, through database/sql's stdlib driver and sqlx
// as the other backends: the shared store.QueueSQL and store.Tx code runs
// on it unchanged.
//
// The append authority is the run's dvt_run_seq row, locked with SELECT
// ... FOR UPDATE for the length of the append: writers of one run queue
// there, writers of different runs never wait for each other. A batch's
// new events and their outbox rows are one INSERT of arrays (unnest), and
// an append is two pipelined round trips whatever its size (append.go).
package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/audit"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
	"github.com/dvtrun/dvtrun/store"
)

// Options configures a Store.
type Options struct {
	// Now is the append authority's clock (persistedAt, created_at, lease
	// expiry); default time.Now. Claims of the run queue and of outbox
	// deliveries use the database's clock.
	Now func() time.Time
	// DisableTransitionChecks turns off Layer 2 (append-time transition
	// validation). Step and run state is maintained either way.
	DisableTransitionChecks bool
	// MustExist opens an existing state store only: read commands never
	// create its tables.
	MustExist bool
	// LockWait is the most a statement waits for a row lock another
	// session holds (the session's lock_timeout; default
	// engine.DefaultLockWait); then it fails with STORE_UNAVAILABLE,
	// transient.
	LockWait time.Duration
	// OnWait receives a progress report every few seconds of such a wait.
	OnWait engine.WaitFunc
	// IdleInTransaction ends a session of this store that sits idle inside
	// a transaction this long (its process stopped), releasing its locks;
	// default DefaultIdleInTransaction.
	IdleInTransaction time.Duration
	// PollOnly opens no LISTEN connection: Wakeups is nil and services
	// only poll. For connection poolers in transaction mode (PgBouncer's
	// pool_mode=transaction), which do not keep a session's LISTEN; the
	// DSN parameter dvtrun_wakeups=poll sets it too.
	PollOnly bool
	// Log receives the wake-up connection's losses and recoveries
	// (default: discarded).
	Log *slog.Logger
}

// wakeupsParam is the DSN parameter that selects the wake-ups:
// dvtrun_wakeups=notify (LISTEN/NOTIFY, the default) or poll.
const wakeupsParam = "dvtrun_wakeups"

// pollOnlyDSN reports whether dsn asks for poll-only wake-ups; an unknown
// value is an error rather than a silent default.
func pollOnlyDSN(cfg *pgconn.Config) (bool, error) {
	switch v := cfg.RuntimeParams[wakeupsParam]; v {
	case "", "notify":
		return false, nil
	case "poll":
		return true, nil
	default:
		return false, engine.Errorf(engine.CodeInvalidArgument, "the Postgres DSN parameter %s is %q; it takes notify or poll", wakeupsParam, v)
	}
}

// DefaultIdleInTransaction is Options.IdleInTransaction's default: far
// beyond any pause of a live process between two statements of a store
// transaction, well within the lock-wait budget others wait with.
const DefaultIdleInTransaction = 15 * time.Second

// Store is the Postgres state store. It is safe for concurrent use, by any
// number of processes.
type Store struct {
	db   *sqlx.DB
	name string // the database as printed: never the password
	opts Options
	q    map[string]string

	// QueueSQL is the run queue and the schedule cursors.
	*store.QueueSQL
	// BundleSQL keeps the plan bundles of runs and requests.
	store.BundleSQL
	// AuditSQL reads the hash chains and keeps the global log.
	*store.AuditSQL
	// ProjectionSQL is the SQL projection and its Go reference.
	store.ProjectionSQL

	wake *listener // nil in poll-only mode

	// unchained appends without the hash chain: only the benchmark that
	// measures the chain's cost sets it (export_test.go).
	unchained bool
}

// Open connects to the database of dsn (a libpq URL or key=value DSN) and
// applies pending migrations.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.LockWait <= 0 {
		opts.LockWait = engine.DefaultLockWait
	}
	if opts.IdleInTransaction <= 0 {
		opts.IdleInTransaction = DefaultIdleInTransaction
	}
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		// pgconn's parse errors quote the DSN, password included.
		return nil, engine.Errorf(engine.CodeInvalidArgument, "the Postgres DSN %s does not parse", Redact(dsn))
	}
	name := describe(cfg)
	pollOnly, err := pollOnlyDSN(cfg)
	if err != nil {
		return nil, err
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	connCfg, err := pgxConfig(dsn, opts.LockWait, opts.IdleInTransaction)
	if err != nil {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "the Postgres DSN %s does not parse", Redact(dsn))
	}
	db := sqlx.NewDb(stdlib.OpenDB(*connCfg), "pgx")
	s := &Store{db: db, name: name, opts: opts}
	if !opts.PollOnly && !pollOnly {
		s.wake = newListener(connCfg, opts.Log)
	}
	if s.q, err = sqlfiles.Queries(sqlfiles.Postgres, "store.sql"); err != nil {
		db.Close()
		return nil, err
	}
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
	return s, nil
}

// describe names the database without its credentials.
func describe(cfg *pgconn.Config) string {
	return fmt.Sprintf("Postgres database %q as %s on %s", cfg.Database, cfg.User, cfg.Host)
}

// DSNSecrets lists the credential values a DSN carries (the password, raw
// and URL-escaped, also of a DSN that does not parse): what the CLI must
// never print.
func DSNSecrets(dsn string) []string {
	var out []string
	add := func(p string) {
		if p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	if cfg, err := pgconn.ParseConfig(dsn); err == nil {
		add(cfg.Password)
	}
	if m := urlPassword.FindStringSubmatch(dsn); m != nil {
		add(m[1])
	}
	for _, m := range kvPassword.FindAllStringSubmatch(dsn, -1) {
		add(strings.Trim(m[1], "'"))
	}
	for _, p := range slices.Clone(out) {
		if u, err := url.PathUnescape(p); err == nil {
			add(u)
		}
		add(url.QueryEscape(p))
		add(url.PathEscape(p))
	}
	// Longest first, so that no replacement leaves part of another.
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

var (
	urlPassword = regexp.MustCompile(`^postgres(?:ql)?://[^:/@?]*:([^@/?]*)@`)
	kvPassword  = regexp.MustCompile(`(?:^|[\s?&])password=('(?:[^'\\]|\\.)*'|[^\s&]*)`)
)

// Redact is dsn fit to print: its password replaced with ***.
func Redact(dsn string) string {
	out := dsn
	for _, s := range DSNSecrets(dsn) {
		out = strings.ReplaceAll(out, s, "***")
	}
	return out
}

// Name is the database as printed (no credentials).
func (s *Store) Name() string { return s.name }

// DB gives read access for projections and audit queries.
func (s *Store) DB() *sqlx.DB { return s.db }

// Close closes the wake-up connection and the connection pool.
func (s *Store) Close() error {
	if s.wake != nil {
		s.wake.close()
	}
	return s.db.Close()
}

func (s *Store) now() string { return s.opts.Now().UTC().Format(engine.TimeFormat) }

// tx runs fn in one transaction (READ COMMITTED: the locks each statement
// takes, not the isolation level, serialise writers) and classifies its
// errors.
//
// A wait for another session's lock in it is reported through
// Options.OnWait, naming the holder.
func (s *Store) tx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	return s.classify(s.reconnect(ctx, func() (bool, error) {
		conn, err := s.db.Connx(ctx)
		if err != nil {
			return true, err
		}
		defer conn.Close()
		var pid uint32
		_ = conn.Raw(func(dc any) error {
			pid = dc.(*stdlib.Conn).Conn().PgConn().PID()
			return nil
		})
		tx, err := conn.BeginTxx(ctx, nil)
		if err != nil {
			return true, err
		}
		defer tx.Rollback()
		err = s.watchLocks(ctx, "a row or lock of the "+s.name, "", func() uint32 { return pid }, func() error { return fn(tx) })
		if err != nil {
			return true, err // not committed: a lost connection rolled it back
		}
		// A COMMIT whose answer is lost may have committed: not again.
		return false, tx.Commit()
	}))
}

// read runs a read (or an idempotent write) again on a new connection
// while its connection is lost, within the lock-wait budget.
func (s *Store) read(ctx context.Context, fn func() error) error {
	return s.classify(s.reconnect(ctx, func() (bool, error) { return true, fn() }))
}

// query is QueryContext on the pool, sent again while the connection it
// got is found lost (an idle session the server ended).
func (s *Store) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	var rows *sql.Rows
	err := s.read(ctx, func() (err error) {
		rows, err = s.db.QueryContext(ctx, query, args...)
		return err
	})
	return rows, err
}

// exec is ExecContext of a statement that may run twice (idempotent),
// sent again while its connection is found lost.
func (s *Store) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	var res sql.Result
	err := s.read(ctx, func() (err error) {
		res, err = s.db.ExecContext(ctx, query, args...)
		return err
	})
	return res, err
}

// migrate applies the pending migrations in one transaction (Postgres DDL
// is transactional: a failed migration leaves nothing behind), concurrent
// migrators queueing on a transaction lock.
func (s *Store) migrate(ctx context.Context) error {
	migs, err := sqlfiles.Migrations(sqlfiles.Postgres)
	if err != nil {
		return err
	}
	var applied map[int]bool
	if err := s.read(ctx, func() (err error) { applied, err = s.applied(ctx, s.db); return err }); err != nil || (applied != nil && !pending(migs, applied)) {
		return err
	} else if applied == nil && s.opts.MustExist {
		return engine.Errorf(engine.CodeInvalidArgument, "no state store in the %s (run a plan first, or pass --store)", s.name)
	}
	if err := s.read(ctx, func() error { return createSearchPathSchema(ctx, s.db.DB) }); err != nil {
		return err
	}
	return s.tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, s.q["migration_lock"]); err != nil {
			return err
		}
		applied, err := s.applied(ctx, tx)
		if err != nil {
			return err
		}
		if applied == nil {
			if _, err := tx.ExecContext(ctx, s.q["create_schema_version"]); err != nil {
				return err
			}
		}
		for _, m := range migs {
			if applied[m.Version] {
				continue
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("postgres: migration %s: %w", m.Name, err)
			}
			if _, err := tx.ExecContext(ctx, s.q["insert_schema_version"], m.Version, m.Name, s.now()); err != nil {
				return err
			}
		}
		return nil
	})
}

// applied returns the versions of the migrations the schema has; nil (no
// error) for a schema without any table. A schema with tables but no
// schema version is someone else's: every command refuses it.
func (s *Store) applied(ctx context.Context, q sqlx.QueryerContext) (map[int]bool, error) {
	var tables, versioned int
	err := sqlx.GetContext(ctx, q, &tables, s.q["schema_tables"])
	if err == nil {
		err = sqlx.GetContext(ctx, q, &versioned, s.q["schema_versioned"])
	}
	switch {
	case err != nil:
		return nil, s.classify(err)
	case tables == 0:
		return nil, nil
	case versioned == 0:
		return nil, engine.Errorf(engine.CodeStoreCorrupt, "the %s has tables but is not a dvtrun state store", s.name)
	}
	var versions []int
	if err := sqlx.SelectContext(ctx, q, &versions, s.q["schema_versions"]); err != nil {
		return nil, s.classify(err)
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

// runRow is what the append path reads of a run, under its lock.
type runRow struct {
	nextSeq              int64
	status               engine.RunStatus
	tenant, project, env string
	planID, planVersion  string
	lastHash             string // the hash chain's head (audit.Genesis before the first event)
}

func (r runRow) metadata(runID string) engine.RunMetadata {
	return engine.RunMetadata{RunID: runID, TenantID: r.tenant, ProjectID: r.project, EnvironmentID: r.env, PlanID: r.planID, PlanVersion: r.planVersion}
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
	batch, err := store.FoldBatch(meta, first)
	if err != nil {
		return engine.AppendResult{}, err
	}
	row := runRow{nextSeq: 1, status: engine.StatusNone, tenant: meta.TenantID, project: meta.ProjectID, env: meta.EnvironmentID, planID: meta.PlanID, planVersion: meta.PlanVersion, lastHash: audit.Genesis}
	var res engine.AppendResult
	err = s.tx(ctx, func(tx *sqlx.Tx) error {
		now := s.now()
		r, err := tx.ExecContext(ctx, s.q["insert_run"], meta.RunID, meta.TenantID, meta.ProjectID, meta.EnvironmentID,
			meta.PlanID, meta.PlanVersion, meta.PlanSHA256, meta.TargetAdapter, nullable(meta.ProviderRunRef), nullable(meta.RunRequestID), now)
		if err != nil {
			return err
		}
		if n, _ := r.RowsAffected(); n == 0 {
			return engine.Errorf(engine.CodeRunAlreadyExists, "run %s already exists; nothing was written", meta.RunID)
		}
		// The events are bound in the EventIdRegistry in this transaction:
		// a key reserved before keeps its reserved eventId.
		if len(batch.Events) > 0 {
			keys := make([]string, len(batch.Events))
			for i, e := range batch.Events {
				keys[i] = e.IdempotencyKey
			}
			reserved, err := s.keyIDs(tx.QueryContext(ctx, s.q["reserved_event_ids"], meta.RunID, keys))
			if err != nil {
				return err
			}
			for i, e := range batch.Events {
				if id, ok := reserved[e.IdempotencyKey]; ok {
					batch.Events[i].EventID = id
				}
			}
		}
		// A new run has no stored keys and no step state to read.
		res, err = s.appendTx(meta.RunID, row, batch, now, nil, nil, func(q string, args ...any) error {
			_, err := tx.ExecContext(ctx, q, args...)
			return err
		})
		return err
	})
	if err != nil {
		return engine.AppendResult{}, err
	}
	return res, nil
}

// keyIDs reads (idempotency key, event id) rows.
func (s *Store) keyIDs(rows *sql.Rows, err error) (map[string]string, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, id string
		if err := rows.Scan(&k, &id); err != nil {
			return nil, err
		}
		out[k] = id
	}
	return out, rows.Err()
}

// AppendAndEnqueue implements store.Store.
func (s *Store) AppendAndEnqueue(ctx context.Context, runID string, events []engine.RunEventWrite) (engine.AppendResult, error) {
	return s.append(ctx, runID, nil, events)
}

// AppendFenced implements store.Store.
func (s *Store) AppendFenced(ctx context.Context, lease engine.Lease, events []engine.RunEventWrite) (engine.AppendResult, error) {
	return s.append(ctx, lease.RunID, &lease, events)
}

// appendTx decides an append inside a transaction that holds the run's
// dvt_run_seq row lock (or created the row): no other transaction appends
// to the run until it ends, so stored (the batch's keys already in the
// log) is all there is, and the new events get consecutive runSeqs from
// row.nextSeq. steps is the stored state of the batch's steps. The
// transition check runs over the new events; a rejection writes nothing.
// The writes go through exec, in order.
func (s *Store) appendTx(runID string, row runRow, b store.Batch, now string, stored map[string]engine.RunEventRecord,
	steps map[string]engine.StepState, exec func(query string, args ...any) error) (engine.AppendResult, error) {
	persisted, err := time.Parse(time.RFC3339Nano, now)
	if err != nil {
		return engine.AppendResult{}, err
	}
	if stored == nil {
		stored = map[string]engine.RunEventRecord{}
	}
	if steps == nil {
		steps = map[string]engine.StepState{}
	}
	var res engine.AppendResult
	var fresh []engine.RunEventWrite
	cols := eventColumns{}
	seq, head := row.nextSeq, row.lastHash
	for _, e := range b.Events {
		if r, ok := stored[e.IdempotencyKey]; ok {
			res.Deduped = append(res.Deduped, r)
			continue
		}
		rec := engine.RunEventRecord{RunEventWrite: e, RunSeq: seq, PersistedAt: persisted}
		link := audit.Chained{}
		if !s.unchained {
			link = audit.Chain(head, []engine.RunEventRecord{rec})[0]
			head = link.Hash
		}
		cols.add(seq, e, link)
		stored[e.IdempotencyKey] = rec
		res.Appended = append(res.Appended, rec)
		fresh = append(fresh, e)
		seq++
	}
	if len(fresh) > 0 {
		status, after, err := engine.CheckTransitions(row.status, steps, fresh)
		if err != nil {
			if !s.opts.DisableTransitionChecks {
				return engine.AppendResult{}, err
			}
			status, after = engine.SkipInvalidTransitions(row.status, steps, fresh)
		}
		first := fresh[0]
		if err := exec(s.q["insert_events"], runID, first.TenantID, first.ProjectID, first.EnvironmentID,
			first.PlanID, first.PlanVersion, now, cols.seq, cols.eventID, cols.eventType, cols.stepID, cols.logical,
			cols.engine, cols.key, cols.emitted, cols.payload, cols.prevHash, cols.hash, cols.digest); err != nil {
			return engine.AppendResult{}, err
		}
		if err := exec(s.q["insert_outbox"], runID, cols.seq); err != nil {
			return engine.AppendResult{}, err
		}
		if err := exec(s.q["update_seq"], seq, string(status), head, runID); err != nil {
			return engine.AppendResult{}, err
		}
		var ids, statuses []string
		var attempts []int64
		for id, st := range after {
			if prev, ok := steps[id]; ok && prev == st {
				continue
			}
			ids, statuses, attempts = append(ids, id), append(statuses, string(st.Status)), append(attempts, int64(st.LogicalAttemptID))
		}
		if len(ids) > 0 {
			if err := exec(s.q["upsert_step_states"], runID, ids, statuses, attempts); err != nil {
				return engine.AppendResult{}, err
			}
		}
		if status.Terminal() {
			// Reservations matter while events can still be retried; a
			// finished run's are dropped here, once.
			if err := exec(s.q["forget_run_reservations"], runID); err != nil {
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

// eventColumns are a batch's new events as column arrays, bound to
// insert_events' unnest. A NULL step or payload is a NULL array element.
type eventColumns struct {
	seq, logical, engine             []int64
	eventID, eventType, key, emitted []string
	stepID, payload                  []*string
	prevHash, hash, digest           []*string
}

// nullText is NULL for "" (an unchained benchmark's hash columns).
func nullText(v string) *string {
	if v == "" {
		return nil
	}
	return &v
}

func (c *eventColumns) add(seq int64, e engine.RunEventWrite, link audit.Chained) {
	c.prevHash = append(c.prevHash, nullText(link.PrevHash))
	c.hash = append(c.hash, nullText(link.Hash))
	c.digest = append(c.digest, nullText(link.PayloadSHA256))
	c.seq = append(c.seq, seq)
	c.logical = append(c.logical, int64(e.LogicalAttemptID))
	c.engine = append(c.engine, int64(e.EngineAttemptID))
	c.eventID = append(c.eventID, e.EventID)
	c.eventType = append(c.eventType, string(e.EventType))
	c.key = append(c.key, e.IdempotencyKey)
	c.emitted = append(c.emitted, e.EmittedAt.UTC().Format(engine.TimeFormat))
	var step, payload *string
	if e.StepID != "" {
		step = &e.StepID
	}
	if p := nullableJSON(e.Payload); p != nil {
		s := p.(string)
		payload = &s
	}
	c.stepID = append(c.stepID, step)
	c.payload = append(c.payload, payload)
}

// scanEvents yields the events of rows (the columns of list_events).
func (s *Store) scanEvents(rows store.Rows) iter.Seq2[engine.RunEventRecord, error] {
	return store.ScanTextEvents(rows, s.classify)
}

// ListEvents implements store.Store.
func (s *Store) ListEvents(ctx context.Context, runID string, afterSeq int64, limit int) ([]engine.RunEventRecord, error) {
	var lim any = limit
	if limit <= 0 {
		lim = nil // LIMIT NULL: no limit
	}
	return s.queryEvents(ctx, s.q["list_events"], runID, afterSeq, lim)
}

// ListStepEvents implements store.Store.
func (s *Store) ListStepEvents(ctx context.Context, runID, stepID string) ([]engine.RunEventRecord, error) {
	return s.queryEvents(ctx, s.q["list_step_events"], runID, stepID)
}

// queryEvents runs a query returning list_events' columns and collects
// the events.
func (s *Store) queryEvents(ctx context.Context, query string, args ...any) ([]engine.RunEventRecord, error) {
	rows, err := s.query(ctx, query, args...)
	return s.collectEvents(rows, err)
}

// collectEvents collects the events of rows (list_events' columns), or
// classifies the query's err.
func (s *Store) collectEvents(rows *sql.Rows, err error) ([]engine.RunEventRecord, error) {
	if err != nil {
		return nil, s.classify(err)
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

type metaRow struct {
	engine.RunMetadata
	Created string
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

func scanMeta(rows *sql.Rows, m *metaRow) error {
	return rows.Scan(&m.RunID, &m.TenantID, &m.ProjectID, &m.EnvironmentID, &m.PlanID, &m.PlanVersion, &m.PlanSHA256,
		&m.TargetAdapter, &m.ProviderRunRef, &m.RunRequestID, &m.Created)
}

// GetRun implements store.Store.
func (s *Store) GetRun(ctx context.Context, runID string) (engine.RunMetadata, error) {
	runs, err := s.runs(s.query(ctx, s.q["get_run"], runID))
	if err != nil {
		return engine.RunMetadata{}, err
	}
	if len(runs) == 0 {
		return engine.RunMetadata{}, engine.Errorf(engine.CodeRunNotFound, "run %s not found in the %s", runID, s.name)
	}
	return runs[0], nil
}

// ListRuns implements store.Store: the run history, one statement with
// every filter bound (list_runs).
func (s *Store) ListRuns(ctx context.Context, f store.RunFilter) ([]store.RunSummary, error) {
	rows, err := s.query(ctx, s.q["list_runs"], f.HistoryArgs(timeText)...)
	if err != nil {
		return nil, s.classify(err)
	}
	defer rows.Close()
	var out []store.RunSummary
	for rows.Next() {
		r, err := store.ScanRunSummary(rows, func() any { return new(string) }, func(dest any) (time.Time, error) {
			if v := *dest.(*string); v != "" {
				return time.Parse(time.RFC3339Nano, v)
			}
			return time.Time{}, nil
		})
		if err != nil {
			return nil, s.classify(err)
		}
		out = append(out, r)
	}
	return out, s.classify(rows.Err())
}

func (s *Store) runs(rows *sql.Rows, err error) ([]engine.RunMetadata, error) {
	if err != nil {
		return nil, s.classify(err)
	}
	defer rows.Close()
	var out []engine.RunMetadata
	for rows.Next() {
		var m metaRow
		if err := scanMeta(rows, &m); err != nil {
			return nil, s.classify(err)
		}
		md, err := m.metadata()
		if err != nil {
			return nil, err
		}
		out = append(out, md)
	}
	return out, s.classify(rows.Err())
}

// SetProviderRunRef implements store.Store.
func (s *Store) SetProviderRunRef(ctx context.Context, runID, ref string) error {
	res, err := s.exec(ctx, s.q["set_provider_ref"], ref, runID)
	if err != nil {
		return s.classify(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return engine.Errorf(engine.CodeRunNotFound, "run %s not found in the %s", runID, s.name)
	}
	return nil
}

// ReserveEventIDs implements store.Store in one statement for all the
// keys; a key that a concurrent reservation bound meanwhile is read back.
func (s *Store) ReserveEventIDs(ctx context.Context, runID string, candidates map[string]string) (map[string]string, error) {
	if len(candidates) == 0 {
		return map[string]string{}, nil
	}
	keys := make([]string, 0, len(candidates))
	ids := make([]string, 0, len(candidates))
	for k, id := range candidates {
		keys, ids = append(keys, k), append(ids, id)
	}
	var out map[string]string
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		var err error
		if out, err = s.keyIDs(tx.QueryContext(ctx, s.q["reserve_event_ids"], runID, keys, ids, s.now())); err != nil {
			return err
		}
		var missing []string
		for _, k := range keys {
			if _, ok := out[k]; !ok {
				missing = append(missing, k)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		raced, err := s.keyIDs(tx.QueryContext(ctx, s.q["reserved_event_ids"], runID, missing))
		for k, id := range raced {
			out[k] = id
		}
		return err
	})
	return out, err
}

// RecordAlert implements store.Store.
func (s *Store) RecordAlert(ctx context.Context, a engine.Alert) (bool, error) {
	if a.Key == "" || a.Code == "" {
		return false, engine.Errorf(engine.CodeInvalidArgument, "an alert needs a key and a code")
	}
	res, err := s.exec(ctx, s.q["insert_alert"], a.Key, string(a.Code), a.Severity, nullable(a.RunID), nullable(a.TenantID),
		nullable(a.ProjectID), nullable(a.EnvironmentID), a.Message, nullableJSON(a.Payload), s.now())
	if err != nil {
		return false, s.classify(err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// ListAlerts implements store.Store.
func (s *Store) ListAlerts(ctx context.Context, runID string) ([]engine.Alert, error) {
	rows, err := s.query(ctx, s.q["list_alerts"], runID)
	if err != nil {
		return nil, s.classify(err)
	}
	defer rows.Close()
	var out []engine.Alert
	for rows.Next() {
		var a engine.Alert
		var code, created string
		var payload sql.NullString
		if err := rows.Scan(&a.Key, &code, &a.Severity, &a.RunID, &a.TenantID, &a.ProjectID, &a.EnvironmentID, &a.Message, &payload, &created); err != nil {
			return nil, s.classify(err)
		}
		a.Code = engine.Code(code)
		if payload.Valid {
			a.Payload = json.RawMessage(payload.String)
		}
		a.CreatedAt, _ = time.Parse(time.RFC3339Nano, created)
		out = append(out, a)
	}
	return out, s.classify(rows.Err())
}

// SendSignal implements store.Store.
func (s *Store) SendSignal(ctx context.Context, sig engine.Signal) (engine.Signal, error) {
	if !sig.Type.Valid() {
		return engine.Signal{}, engine.Errorf(engine.CodeInvalidArgument, "unknown signal type %q (want PAUSE, RESUME, CANCEL or RETRY_STEP)", sig.Type)
	}
	if sig.SignalID == "" || sig.RunID == "" {
		return engine.Signal{}, engine.Errorf(engine.CodeInvalidArgument, "a signal needs a signalId and a runId")
	}
	out := sig
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		var one int
		if err := tx.QueryRowContext(ctx, s.q["lock_signals"], sig.RunID).Scan(&one); errors.Is(err, sql.ErrNoRows) {
			return engine.Errorf(engine.CodeRunNotFound, "run %s not found in the %s", sig.RunID, s.name)
		} else if err != nil {
			return err
		}
		if got, err := store.ScanTextSignals(tx.QueryContext(ctx, s.q["signal_by_id"], sig.SignalID)); err != nil {
			return err
		} else if len(got) == 1 {
			out = got[0]
			return nil
		}
		if err := tx.QueryRowContext(ctx, s.q["next_signal_seq"], sig.RunID).Scan(&out.Seq); err != nil {
			return err
		}
		now := s.now()
		if _, err := tx.ExecContext(ctx, s.q["insert_signal"], sig.RunID, out.Seq, sig.SignalID, string(sig.Type),
			nullable(sig.StepID), nullable(sig.Reason), nullable(sig.RequestedBy), now); err != nil {
			return err
		}
		out.CreatedAt, _ = time.Parse(time.RFC3339Nano, now)
		return nil
	})
	if err != nil {
		return engine.Signal{}, err
	}
	return out, nil
}

// ListSignals implements store.Store.
func (s *Store) ListSignals(ctx context.Context, runID string, afterSeq int64) ([]engine.Signal, error) {
	out, err := store.ScanTextSignals(s.query(ctx, s.q["list_signals"], runID, afterSeq))
	return out, s.classify(err)
}

// AcquireLease implements store.Store.
func (s *Store) AcquireLease(ctx context.Context, runID, owner string, ttl time.Duration) error {
	_, err := s.AcquireFencedLease(ctx, runID, owner, ttl)
	return err
}

// AcquireFencedLease implements store.Store: the lease is decided against
// the store's clock under the run's dvt_run_seq row lock, which every
// append also holds, so a takeover and a stale runner's append never
// interleave.
func (s *Store) AcquireFencedLease(ctx context.Context, runID, owner string, ttl time.Duration) (engine.Lease, error) {
	if owner == "" {
		return engine.Lease{}, engine.Errorf(engine.CodeInvalidArgument, "a lease needs an owner")
	}
	var l engine.Lease
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, s.q["lock_lease"], runID); err != nil {
			return err
		}
		now := s.opts.Now().UTC()
		var holder, expires string
		var fence int64
		err := tx.QueryRowContext(ctx, s.q["get_fenced_lease"], runID).Scan(&holder, &expires, &fence)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		found := err == nil
		if l, err = store.NextLease(runID, owner, ttl, now, found, holder, expires, fence); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, s.q["put_lease"], runID, owner, now.Format(engine.TimeFormat), l.ExpiresAt.Format(engine.TimeFormat), l.Fence)
		return err
	})
	if err != nil {
		return engine.Lease{}, err
	}
	return l, nil
}

// Pulse implements store.Store in two statements whatever the number of
// runs: the renewals with the leases as they stand after, then the
// signals.
func (s *Store) Pulse(ctx context.Context, owner string, ttl time.Duration, runs []engine.PulseRun) (engine.PulseResult, error) {
	out := engine.PulseResult{Leases: map[string]engine.Lease{}}
	runs, err := store.PulseRuns(owner, runs)
	if err != nil || len(runs) == 0 {
		return out, err
	}
	ids := make([]string, len(runs))
	fences, after := make([]int64, len(runs)), make([]int64, len(runs))
	for i, r := range runs {
		ids[i], fences[i], after[i] = r.RunID, r.Fence, r.AfterSignal
	}
	expires := s.opts.Now().UTC().Add(ttl).Format(engine.TimeFormat)
	err = s.tx(ctx, func(tx *sqlx.Tx) error {
		rows, err := tx.QueryContext(ctx, s.q["renew_leases"], expires, owner, ids, fences)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var l engine.Lease
			var exp string
			if err := rows.Scan(&l.RunID, &l.Owner, &exp, &l.Fence); err != nil {
				return err
			}
			l.ExpiresAt, _ = time.Parse(time.RFC3339Nano, exp)
			out.Leases[l.RunID] = l
		}
		if err := rows.Err(); err != nil {
			return err
		}
		out.Signals, err = store.ScanTextSignals(tx.QueryContext(ctx, s.q["pulse_signals"], ids, after))
		return err
	})
	if err != nil {
		return engine.PulseResult{}, err
	}
	return out, nil
}

// ReleaseLease implements store.Store.
func (s *Store) ReleaseLease(ctx context.Context, runID, owner string) error {
	_, err := s.exec(ctx, s.q["release_lease"], runID, owner)
	return s.classify(err)
}

// GetLease implements store.LeaseReader; Live is judged by the store's
// clock, as AcquireLease judges expiry.
func (s *Store) GetLease(ctx context.Context, runID string) (store.Lease, bool, error) {
	var owner, expires string
	err := s.read(ctx, func() error { return s.db.QueryRowContext(ctx, s.q["get_lease"], runID).Scan(&owner, &expires) })
	if errors.Is(err, sql.ErrNoRows) {
		return store.Lease{}, false, nil
	}
	if err != nil {
		return store.Lease{}, false, s.classify(err)
	}
	exp, err := time.Parse(time.RFC3339Nano, expires)
	if err != nil {
		return store.Lease{}, false, engine.Errorf(engine.CodeStoreCorrupt, "lease of run %s expires at %q, not a time", runID, expires)
	}
	return store.Lease{Owner: owner, ExpiresAt: exp, Live: exp.After(s.opts.Now())}, true, nil
}

// CountOutbox returns the number of outbox rows of a run (conformance).
func (s *Store) CountOutbox(ctx context.Context, runID string) (int, error) {
	var n int
	err := s.read(ctx, func() error { return s.db.GetContext(ctx, &n, s.q["count_outbox"], runID) })
	return n, s.classify(err)
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
