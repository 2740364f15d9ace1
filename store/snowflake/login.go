package snowflake

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"time"

	"github.com/snowflakedb/gosnowflake"

	"github.com/dvtrun/dvtrun/engine"
)

// DefaultLoginTimeout bounds a login to Snowflake unless the DSN sets
// loginTimeout. The driver's own default (300 s) counts only its sleeps
// between attempts, and each attempt may wait clientTimeout (900 s) for an
// answer: a host that refuses or never answers held a command silent for
// minutes.
const DefaultLoginTimeout = 30 * time.Second

// loginConnector is gosnowflake's connector with every login (the first
// one and each new session's) bounded by the configured login timeout as a
// whole, attempts, waits and round trips together.
type loginConnector struct {
	driver.Connector
	timeout time.Duration
	host    string // host:port and the redacted DSN, for the error: never the credentials
	secrets []string
	// probe is the host:port a login that has not answered after
	// probeAfter dials directly to tell a refused or unresolved host (fail
	// now) from a slow one (wait); empty when requests go through a proxy.
	probe string
}

// probeAfter: a login that answers within it costs no probe.
const probeAfter = time.Second

// errUnreachable is the cause a probe gives the login it cuts short.
type errUnreachable struct{ err error }

func (e errUnreachable) Error() string { return e.err.Error() }

// loginTimeout is cfg's login timeout, to read or set.
func loginTimeout(cfg *gosnowflake.Config) *time.Duration {
	//lint:ignore SA1019 the driver's only login timeout (the DSN's loginTimeout sets it) until it reorganises its timeouts
	return &cfg.LoginTimeout
}

// newConnector is the connector of every Store and Warehouse; where is
// the redacted DSN.
func newConnector(cfg *gosnowflake.Config, where string) driver.Connector {
	hostPort := net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))
	lc := &loginConnector{
		Connector: gosnowflake.NewConnector(gosnowflake.SnowflakeDriver{}, *cfg),
		timeout:   *loginTimeout(cfg),
		host:      hostPort + " (" + where + ")",
		secrets:   secretsOfConfig(cfg),
	}
	if !viaProxy(cfg, hostPort) {
		lc.probe = hostPort
	}
	return lc
}

// viaProxy reports whether the driver reaches hostPort through a proxy (the
// DSN's or the environment's): a direct dial then proves nothing.
func viaProxy(cfg *gosnowflake.Config, hostPort string) bool {
	if cfg.ProxyHost != "" {
		return true
	}
	proto := cfg.Protocol
	if proto == "" {
		proto = "https"
	}
	p, err := http.ProxyFromEnvironment(&http.Request{URL: &url.URL{Scheme: proto, Host: hostPort}})
	return err != nil || p != nil
}

// refusedOrUnknown reports whether a dial error means the host will not
// answer however long the driver retries: nothing listens on the port, or
// the name does not resolve.
func refusedOrUnknown(err error) bool {
	var dns *net.DNSError
	return errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &dns) && dns.IsNotFound)
}

// watch cuts a login short (cancel with errUnreachable) when, after
// probeAfter without an answer, a direct dial finds the host refusing or
// unknown: the driver would retry that for its whole budget (24–28 s with
// its backoff). Stop it by closing done.
func (c *loginConnector) watch(ctx context.Context, cancel context.CancelCauseFunc, done <-chan struct{}) {
	t := time.NewTimer(probeAfter)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-ctx.Done():
		return
	case <-t.C:
	}
	d := net.Dialer{Timeout: 3 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", c.probe)
	if err == nil {
		conn.Close()
		return
	}
	if refusedOrUnknown(err) {
		var op *net.OpError
		if errors.As(err, &op) {
			err = op
		}
		cancel(errUnreachable{err})
	}
}

// Connect logs in within the timeout. A failure is STORE_UNAVAILABLE and
// not transient: the driver has already retried for the whole budget, and
// a caller retrying again would multiply it. The caller's own cancellation
// passes through as it is.
func (c *loginConnector) Connect(ctx context.Context) (driver.Conn, error) {
	tctx, cancelTimeout := context.WithTimeout(ctx, c.timeout)
	defer cancelTimeout()
	lctx, cancel := context.WithCancelCause(tctx)
	defer cancel(nil)
	if c.probe != "" {
		done := make(chan struct{})
		defer close(done)
		go c.watch(lctx, cancel, done)
	}
	conn, err := c.Connector.Connect(lctx)
	var unreachable errUnreachable
	switch {
	case err == nil:
		return conn, nil
	case ctx.Err() != nil:
		return nil, err
	case errors.As(context.Cause(lctx), &unreachable):
		return nil, &engine.Error{Code: engine.CodeStoreUnavailable,
			Msg: fmt.Sprintf("cannot reach Snowflake at %s: %s", c.host, scrubText(unreachable.Error(), c.secrets)), Err: unreachable.err}
	case lctx.Err() != nil:
		// Not wrapped: a login that ran out of time is not the caller's
		// deadline (a step's timeout, say).
		return nil, engine.Errorf(engine.CodeStoreUnavailable, "cannot log in to Snowflake at %s within %s (loginTimeout in the DSN sets it)", c.host, c.timeout)
	}
	// A network error says what matters without the request's URL.
	reason := err
	var op *net.OpError
	if errors.As(err, &op) {
		reason = op
	}
	return nil, &engine.Error{Code: engine.CodeStoreUnavailable,
		Msg: fmt.Sprintf("cannot log in to Snowflake at %s: %s", c.host, scrubText(reason.Error(), c.secrets)),
		Err: scrub(err, c.secrets)}
}
