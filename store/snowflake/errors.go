package snowflake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/snowflakedb/gosnowflake"

	"github.com/dvtrun/dvtrun/engine"
)

// Snowflake error numbers the store reacts to.
const (
	// errLockWaiters: more than 20 statements waited for one table lock and
	// Snowflake aborted this one (000625).
	errLockWaiters = 625
	// errSessionExpired / errSessionGone: the session's token is no longer
	// valid; a new connection logs in again.
	errSessionExpired = 390112
	errSessionGone    = 390111
	// errObjectMissing: the statement names a table that does not exist
	// (or that the role may not see), 002003.
	errObjectMissing = 2003
)

// objectMissing reports whether err is Snowflake's "object does not exist".
func objectMissing(err error) bool {
	var se *gosnowflake.SnowflakeError
	return errors.As(err, &se) && se.Number == errObjectMissing
}

// retryable reports whether err is worth running the whole transaction
// again: lock contention, transaction conflicts, expired sessions and
// network failures. Statement errors (syntax, constraint, bad data) are not.
func retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var se *gosnowflake.SnowflakeError
	if errors.As(err, &se) {
		switch se.Number {
		case errLockWaiters, errSessionExpired, errSessionGone, gosnowflake.ErrCodeServiceUnavailable:
			return true
		}
		if se.SQLState == "40001" { // serialization failure / write conflict
			return true
		}
		if se.SQLState == "25P02" && strings.HasPrefix(strings.ToLower(se.Message), "transaction") {
			// The transaction was ended from outside (SYSTEM$ABORT_TRANSACTION
			// by a waiter that took it for a dead client's, or the idle
			// abort): all of it was rolled back, so it can run again.
			return true
		}
		msg := strings.ToLower(se.Message)
		return strings.Contains(msg, "conflict") || strings.Contains(msg, "deadlock")
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// classify maps driver failures onto contract codes: contention and
// network trouble are a transient STORE_UNAVAILABLE, anything else a plain
// STORE_UNAVAILABLE with the statement's error; engine errors and context
// errors pass through. Messages are scrubbed of credentials.
func (s *Store) classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var ee *engine.Error
	if errors.As(err, &ee) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	err = scrub(err, s.secrets)
	e := &engine.Error{Code: engine.CodeStoreUnavailable, Msg: fmt.Sprintf("Snowflake state store %s: %s: %v", s.where, op, err), Err: err}
	if retryable(err) {
		return engine.MarkTransient(e)
	}
	return e
}

// withRetry runs fn until it succeeds, fails with an error that is not
// transient, or the attempts are used up. The wait doubles from RetryBase
// up to 2 s, with full jitter so that writers aborted together do not come
// back together. An attempt that timed out waiting for a lock is not
// counted: those are bounded by Options.LockWait (waitForLock).
func (s *Store) withRetry(ctx context.Context, fn func() error) error {
	return s.withRetryWait(ctx, nil, fn)
}

// withRetryWait is withRetry whose lock waits count against lw's budget,
// shared with the caller's own waiting (nil: a budget of its own).
func (s *Store) withRetryWait(ctx context.Context, lw *lockWaitState, fn func() error) error {
	var err error
	for attempt := 0; ; {
		tried := time.Now()
		err = fn()
		if lockTimedOut(err) {
			if lw == nil { // the wait began with this attempt
				lw = &lockWaitState{start: tried}
			}
			if werr := s.waitForLock(ctx, lw, err); werr != nil {
				return werr
			}
			continue
		}
		attempt++
		if err == nil || !engine.IsTransient(err) || attempt >= s.opts.MaxAttempts {
			return err
		}
		wait := min(s.opts.RetryBase<<min(attempt, 10), 2*time.Second)
		wait = time.Duration(rand.Int64N(int64(wait)) + 1)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}
