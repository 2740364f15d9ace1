package postgres

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dvtrun/dvtrun/engine"
)

// pgxConfig is the connection configuration of dsn. The session's
// lock_timeout is the lock-wait budget, so a statement that waits on a row
// lock another session holds fails with lock_not_available after it
// instead of waiting forever. Its idle_in_transaction_session_timeout ends
// a session that sits in a transaction, holding a run's row, while its
// process is stopped (SIGSTOP, a paused VM, a debugger): no store
// transaction waits on its client for more than the Go decision between
// two round trips, so idleInTx of doing nothing is a client gone.
func pgxConfig(dsn string, lockWait, idleInTx time.Duration) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if !connectTimeoutSet(dsn) {
		// libpq waits forever for a server that accepts and never answers.
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	// dvtrun's own parameter, not the server's (wakeupsParam).
	delete(cfg.RuntimeParams, wakeupsParam)
	cfg.RuntimeParams["lock_timeout"] = strconv.FormatInt(lockWait.Milliseconds(), 10)
	cfg.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(idleInTx.Milliseconds(), 10)
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "dvtrun"
	}
	return cfg, nil
}

// DefaultConnectTimeout bounds opening a connection (TCP, TLS and the
// start-up exchange, per host) when neither the DSN's connect_timeout nor
// PGCONNECT_TIMEOUT sets it; connect_timeout=0 still waits forever, as in
// libpq.
const DefaultConnectTimeout = 10 * time.Second

// connectTimeoutKey finds connect_timeout in a URL's query or a key=value DSN.
var connectTimeoutKey = regexp.MustCompile(`(?:^|[?&\s])connect_timeout\s*=`)

// connectTimeoutSet reports whether dsn or the environment sets the
// connect timeout (pgconn reads 0 for both "absent" and "forever").
func connectTimeoutSet(dsn string) bool {
	return connectTimeoutKey.MatchString(dsn) || os.Getenv("PGCONNECT_TIMEOUT") != ""
}

// connectFailed reports whether err is a connection that could not be
// opened (refused, unresolved, or past the connect timeout), not the
// caller's own cancellation.
func connectFailed(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) && !errors.Is(err, context.Canceled)
}

// missingDatabase is the configuration error of a DSN naming a database the
// server does not have (SQLSTATE 3D000): no wait mends it.
func missingDatabase(name string, pe *pgconn.PgError) error {
	return &engine.Error{Code: engine.CodeConfigInvalid, Msg: fmt.Sprintf("the %s does not exist: %s (SQLSTATE %s; create it, e.g. createdb, or fix the DSN)", name, pe.Message, pe.Code), Err: pe}
}

// classify maps Postgres failures onto contract codes: a lock wait that ran
// out, a serialisation failure, a deadlock or a lost connection are a
// transient STORE_UNAVAILABLE (the runner retries; a run stays
// resumable), and so is a server that cannot be reached, refused or past
// the connect timeout; refused credentials STORE_UNAVAILABLE for good; a
// database that does not exist CONFIG_INVALID (the DSN is wrong).
func (s *Store) classify(err error) error {
	if err == nil {
		return nil
	}
	var ee *engine.Error
	if errors.As(err, &ee) {
		return err
	}
	var pe *pgconn.PgError
	if connectFailed(err) && !errors.As(err, &pe) {
		return engine.MarkTransient(&engine.Error{Code: engine.CodeStoreUnavailable, Msg: fmt.Sprintf("cannot reach the %s: %v", s.name, err), Err: err})
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "3D000":
			return missingDatabase(s.name, pe)
		case pe.Code == "55P03": // lock_not_available: lock_timeout ran out
			ex := engine.LockWait{Resource: "a row of the " + s.name, Budget: s.opts.LockWait}.Exceeded()
			var e *engine.Error
			if errors.As(ex, &e) {
				e.Err = err // the server's error, for errors.As
			}
			return engine.MarkTransient(ex)
		case pe.Code == "40001" || pe.Code == "40P01" || pe.Code == "57P01" || pe.Code == "57P03" || pe.Code == "53300" || strings.HasPrefix(pe.Code, "08"):
			return engine.MarkTransient(&engine.Error{Code: engine.CodeStoreUnavailable, Msg: fmt.Sprintf("the %s is unavailable for now: %s (SQLSTATE %s)", s.name, pe.Message, pe.Code), Err: err})
		case strings.HasPrefix(pe.Code, "28") || pe.Code == "42501":
			return &engine.Error{Code: engine.CodeStoreUnavailable, Msg: fmt.Sprintf("cannot use the %s: %s (SQLSTATE %s)", s.name, pe.Message, pe.Code), Err: err}
		}
		return fmt.Errorf("postgres state store (%s): %w", s.name, err)
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	if errors.As(err, &ce) || errors.As(err, &ne) || pgconn.SafeToRetry(err) {
		return engine.MarkTransient(&engine.Error{Code: engine.CodeStoreUnavailable, Msg: fmt.Sprintf("cannot reach the %s: %v", s.name, err), Err: err})
	}
	return fmt.Errorf("postgres state store (%s): %w", s.name, err)
}

// lostConn reports whether err is the loss of a live connection (the
// server ended the session: a restart, a failover, an administrator, a
// network cut), not a failure of the statement, nor a server that cannot
// be reached at all (a connect error).
func lostConn(err error) bool {
	var ce *pgconn.ConnectError
	if err == nil || errors.As(err, &ce) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" || strings.HasPrefix(pe.Code, "08")
	}
	var ne net.Error
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.As(err, &ne) || pgconn.SafeToRetry(err)
}

// reconnect runs try again, on a new connection, while it fails because its
// connection was lost where a new attempt cannot repeat a committed effect
// (try says so: again), for at most the lock-wait budget: a server that
// restarts or fails over is the store busy, not broken, so once a live
// connection was lost, refused connections are waited out too. A server
// that refuses the first attempt fails at once. Then the last error
// stands (a transient STORE_UNAVAILABLE once classified).
func (s *Store) reconnect(ctx context.Context, try func() (again bool, err error)) error {
	start := time.Now() // real time: this waits for a server, not the store's clock
	pause := 20 * time.Millisecond
	lost := false
	for {
		again, err := try()
		var ce *pgconn.ConnectError
		switch {
		case err == nil || !again:
			return err
		case lostConn(err):
			lost = true
		case !lost || !errors.As(err, &ce):
			return err
		}
		if time.Since(start)+pause > s.opts.LockWait {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}
