package snowflake

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/snowflakedb/gosnowflake"

	"github.com/dvtrun/dvtrun/engine"
)

func writeKey(t *testing.T, key any) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "key.p8")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestConfigFromDSN(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsaPath, ecPath := writeKey(t, rsaKey), writeKey(t, ecKey)
	garbage := filepath.Join(t.TempDir(), "garbage.p8")
	os.WriteFile(garbage, []byte("not a key"), 0o600)

	cases := []struct {
		name     string
		dsn      string
		wantCode engine.Code
		check    func(t *testing.T, c *gosnowflake.Config)
	}{
		{name: "password", dsn: "alice:pw1234@myacct/db/sch?warehouse=wh", check: func(t *testing.T, c *gosnowflake.Config) {
			if c.User != "alice" || c.Password != "pw1234" || c.Database != "db" || c.Schema != "sch" || c.Warehouse != "wh" || c.PrivateKey != nil {
				t.Fatalf("config %+v", c)
			}
		}},
		{name: "key pair", dsn: "alice@myacct/db/sch?warehouse=wh&privateKeyFile=" + rsaPath, check: func(t *testing.T, c *gosnowflake.Config) {
			if c.Authenticator != gosnowflake.AuthTypeJwt || c.PrivateKey == nil || !c.PrivateKey.Equal(rsaKey) || c.Warehouse != "wh" {
				t.Fatalf("authenticator %v, key set %v, warehouse %q", c.Authenticator, c.PrivateKey != nil, c.Warehouse)
			}
			if _, ok := c.Params["privateKeyFile"]; ok {
				t.Fatal("privateKeyFile was passed on as a session parameter")
			}
		}},
		{name: "key pair, explicit authenticator", dsn: "alice@myacct/db/sch?authenticator=SNOWFLAKE_JWT&privateKeyFile=" + rsaPath, check: func(t *testing.T, c *gosnowflake.Config) {
			if c.Authenticator != gosnowflake.AuthTypeJwt || c.PrivateKey == nil {
				t.Fatalf("authenticator %v", c.Authenticator)
			}
		}},
		{name: "key file with another authenticator", dsn: "alice@myacct/db/sch?authenticator=snowflake&privateKeyFile=" + rsaPath, wantCode: engine.CodeInvalidArgument},
		{name: "missing key file", dsn: "alice@myacct/db/sch?privateKeyFile=/nonexistent/key.p8", wantCode: engine.CodeInvalidArgument},
		{name: "not a PEM key", dsn: "alice@myacct/db/sch?privateKeyFile=" + garbage, wantCode: engine.CodeInvalidArgument},
		{name: "not RSA", dsn: "alice@myacct/db/sch?privateKeyFile=" + ecPath, wantCode: engine.CodeInvalidArgument},
		{name: "empty", dsn: " ", wantCode: engine.CodeInvalidArgument},
		// The driver's default login timeout is 300 s of sleeps alone.
		{name: "login timeout by default", dsn: "alice:pw1234@myacct/db/sch", check: func(t *testing.T, c *gosnowflake.Config) {
			if got := *loginTimeout(c); got != DefaultLoginTimeout || DefaultLoginTimeout > 30*time.Second {
				t.Fatalf("login timeout %s, want %s (at most 30s)", got, DefaultLoginTimeout)
			}
		}},
		{name: "login timeout from the DSN", dsn: "alice:pw1234@myacct/db/sch?loginTimeout=90", check: func(t *testing.T, c *gosnowflake.Config) {
			if got := *loginTimeout(c); got != 90*time.Second {
				t.Fatalf("login timeout %s, want the DSN's 90s", got)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := ConfigFromDSN(c.dsn)
			if c.wantCode != "" {
				if engine.CodeOf(err) != c.wantCode {
					t.Fatalf("error %v, want code %s", err, c.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, cfg)
		})
	}
}

func TestRedactDSN(t *testing.T) {
	cases := []struct{ in, want string }{
		{"alice:s3cr3t-pw@acct/db/sch?warehouse=wh", "alice:***@acct/db/sch?warehouse=wh"},
		{"alice@acct/db?token=tok123&role=r&passcode=999999", "alice@acct/db?token=***&role=r&passcode=***"},
		{"alice:p%40ss@host:443/db/sch?account=a&password=other", "alice:***@host:443/db/sch?account=a&password=***"},
		{"acct/db/sch", "acct/db/sch"},
	}
	for _, c := range cases {
		if got := RedactDSN(c.in); got != c.want {
			t.Errorf("RedactDSN(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestErrorsNeverCarryThePassword: a DSN the driver refuses, and a key
// file that cannot be read, give errors without the password.
func TestErrorsNeverCarryThePassword(t *testing.T) {
	const pw = "Sup3r-S3cret-PW"
	for _, dsn := range []string{
		"alice:" + pw + "@acct/db/sch?privateKeyFile=/nonexistent",
		"alice:" + pw + "@acct/db/sch?loginTimeout=notanumber",
		"alice:" + pw + "@acct/db/sch?%zz",
	} {
		_, err := ConfigFromDSN(dsn)
		if err == nil {
			t.Fatalf("%s: no error", RedactDSN(dsn))
		}
		if strings.Contains(err.Error(), pw) {
			t.Fatalf("error carries the password: %v", err)
		}
	}
	err := scrub(&gosnowflake.SnowflakeError{Number: 390100, Message: "login for alice with " + pw + " failed"}, []string{pw})
	if strings.Contains(err.Error(), pw) || !strings.Contains(err.Error(), "***") {
		t.Fatalf("scrubbed error %q", err)
	}
}

// TestSessionParams: the store's sessions log in with LOCK_TIMEOUT,
// STATEMENT_TIMEOUT_IN_SECONDS and ABORT_DETACHED_QUERY set (never
// Snowflake's 12-hour lock wait), unless the DSN sets them (in any case);
// a DSN's positive statement timeout is the one in force.
func TestSessionParams(t *testing.T) {
	opts := Options{LockTimeout: 5 * time.Second, StatementTimeout: 20 * time.Second}
	cases := []struct {
		dsn     string
		want    map[string]string // upper-cased keys
		timeout time.Duration
	}{
		{"u:p@acct/db/sc", map[string]string{"LOCK_TIMEOUT": "5", "STATEMENT_TIMEOUT_IN_SECONDS": "20", "ABORT_DETACHED_QUERY": "TRUE"}, 20 * time.Second},
		{"u:p@acct/db/sc?lock_timeout=30", map[string]string{"LOCK_TIMEOUT": "30", "STATEMENT_TIMEOUT_IN_SECONDS": "20", "ABORT_DETACHED_QUERY": "TRUE"}, 20 * time.Second},
		{"u:p@acct/db/sc?STATEMENT_TIMEOUT_IN_SECONDS=600", map[string]string{"LOCK_TIMEOUT": "5", "STATEMENT_TIMEOUT_IN_SECONDS": "600", "ABORT_DETACHED_QUERY": "TRUE"}, 600 * time.Second},
		{"u:p@acct/db/sc?STATEMENT_TIMEOUT_IN_SECONDS=0&ABORT_DETACHED_QUERY=FALSE", map[string]string{"LOCK_TIMEOUT": "5", "STATEMENT_TIMEOUT_IN_SECONDS": "0", "ABORT_DETACHED_QUERY": "FALSE"}, 20 * time.Second},
	}
	for _, c := range cases {
		cfg, err := ConfigFromDSN(c.dsn)
		if err != nil {
			t.Fatalf("%s: %v", c.dsn, err)
		}
		timeout := setSessionParams(cfg, opts)
		got := map[string]string{}
		for k, v := range cfg.Params {
			if _, ours := c.want[strings.ToUpper(k)]; ours {
				if _, dup := got[strings.ToUpper(k)]; dup {
					t.Errorf("%s: %s set twice", c.dsn, k)
				}
				got[strings.ToUpper(k)] = *v
			}
		}
		if !reflect.DeepEqual(got, c.want) || timeout != c.timeout {
			t.Errorf("%s: params %v, timeout %v; want %v, %v", c.dsn, got, timeout, c.want, c.timeout)
		}
	}
}
