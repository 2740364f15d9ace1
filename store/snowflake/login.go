package snowflake

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"strconv"
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
}

// loginTimeout is cfg's login timeout, to read or set.
func loginTimeout(cfg *gosnowflake.Config) *time.Duration {
	//lint:ignore SA1019 the driver's only login timeout (the DSN's loginTimeout sets it) until it reorganises its timeouts
	return &cfg.LoginTimeout
}

// newConnector is the connector of every Store and Warehouse; where is
// the redacted DSN.
func newConnector(cfg *gosnowflake.Config, where string) driver.Connector {
	return &loginConnector{
		Connector: gosnowflake.NewConnector(gosnowflake.SnowflakeDriver{}, *cfg),
		timeout:   *loginTimeout(cfg),
		host:      net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)) + " (" + where + ")",
		secrets:   secretsOfConfig(cfg),
	}
}

// Connect logs in within the timeout. A failure is STORE_UNAVAILABLE and
// not transient: the driver has already retried for the whole budget, and
// a caller retrying again would multiply it. The caller's own cancellation
// passes through as it is.
func (c *loginConnector) Connect(ctx context.Context) (driver.Conn, error) {
	lctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	conn, err := c.Connector.Connect(lctx)
	switch {
	case err == nil:
		return conn, nil
	case ctx.Err() != nil:
		return nil, err
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
