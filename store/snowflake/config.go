package snowflake

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/snowflakedb/gosnowflake"

	"github.com/dvtrun/dvtrun/engine"
)

// ConfigFromDSN parses a gosnowflake DSN
// (user[:password]@account/database/schema?param=value…). On top of the
// driver's parameters it accepts privateKeyFile=<path to a PEM PKCS#8 RSA
// key> for key-pair (JWT) authentication; authenticator then defaults to
// SNOWFLAKE_JWT. Errors never repeat the DSN's secrets.
func ConfigFromDSN(dsn string) (*gosnowflake.Config, error) {
	if strings.TrimSpace(dsn) == "" {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "the Snowflake DSN is empty (want user[:password]@account/database/schema?warehouse=…)")
	}
	rest, keyFile, err := cutParam(dsn, "privateKeyFile")
	if err != nil {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "Snowflake DSN %s: %v", RedactDSN(dsn), err)
	}
	if keyFile != "" {
		if a, ok := paramValue(dsn, "authenticator"); ok && !strings.EqualFold(a, gosnowflake.AuthTypeJwt.String()) {
			return nil, engine.Errorf(engine.CodeInvalidArgument, "Snowflake DSN %s: privateKeyFile needs authenticator=SNOWFLAKE_JWT, not %s", RedactDSN(dsn), a)
		} else if !ok {
			// Set before parsing: the driver refuses a DSN without a
			// password unless it knows the authentication is by key.
			sep := "?"
			if strings.Contains(rest, "?") {
				sep = "&"
			}
			rest += sep + "authenticator=SNOWFLAKE_JWT"
		}
	}
	cfg, err := gosnowflake.ParseDSN(rest)
	if err != nil {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "Snowflake DSN %s: %s", RedactDSN(dsn), scrubText(err.Error(), secretsOfDSN(dsn)))
	}
	// The driver sends connection telemetry in a request of its own when a
	// session opens, on the critical path of every Open (at 100 ms per round
	// trip); it stays off unless the DSN asks for it (disableTelemetry=false).
	if _, set := paramValue(dsn, "disableTelemetry"); !set {
		//lint:ignore SA1019 the driver's only switch (the DSN's disableTelemetry sets it) until the session parameter meant to replace it exists
		cfg.DisableTelemetry = true
	}
	if _, set := paramValue(dsn, "loginTimeout"); !set {
		*loginTimeout(cfg) = DefaultLoginTimeout
	}
	if keyFile != "" {
		key, err := readPrivateKey(keyFile)
		if err != nil {
			return nil, engine.Errorf(engine.CodeInvalidArgument, "Snowflake DSN %s: privateKeyFile: %v", RedactDSN(dsn), err)
		}
		cfg.PrivateKey = key
	}
	return cfg, nil
}

// cutParam removes a query parameter the driver does not know from the DSN
// and returns its value.
func cutParam(dsn, name string) (string, string, error) {
	i := strings.LastIndexByte(dsn, '?')
	if i < 0 {
		return dsn, "", nil
	}
	q, err := url.ParseQuery(dsn[i+1:])
	if err != nil {
		return "", "", fmt.Errorf("bad query parameters: %w", err)
	}
	v := q.Get(name)
	if v == "" {
		return dsn, "", nil
	}
	q.Del(name)
	if len(q) == 0 {
		return dsn[:i], v, nil
	}
	return dsn[:i] + "?" + q.Encode(), v, nil
}

func paramValue(dsn, name string) (string, bool) {
	i := strings.LastIndexByte(dsn, '?')
	if i < 0 {
		return "", false
	}
	q, err := url.ParseQuery(dsn[i+1:])
	if err != nil || !q.Has(name) {
		return "", false
	}
	return q.Get(name), true
}

func readPrivateKey(path string) (*rsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("cannot read %s: %w", path, pe.Err)
		}
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("%s holds no PEM block", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s is not a PKCS#8 private key (convert it with openssl pkcs8 -topk8 -nocrypt)", path)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s holds a %T key; Snowflake key-pair authentication needs RSA", path, k)
	}
	return rk, nil
}

// secretParams are DSN parameters whose values are credentials.
var secretParams = map[string]bool{
	"password": true, "passcode": true, "token": true, "privatekey": true,
	"oauthclientsecret": true, "proxypassword": true,
}

var userinfo = regexp.MustCompile(`^([^:@/?]*):([^@]*)@`)

// RedactDSN returns the DSN with its password and other credentials
// replaced by ***, for messages.
func RedactDSN(dsn string) string {
	out := userinfo.ReplaceAllString(dsn, "$1:***@")
	i := strings.LastIndexByte(out, '?')
	if i < 0 {
		return out
	}
	parts := strings.Split(out[i+1:], "&")
	for j, p := range parts {
		k, _, ok := strings.Cut(p, "=")
		if ok && secretParams[strings.ToLower(k)] {
			parts[j] = k + "=***"
		}
	}
	return out[:i+1] + strings.Join(parts, "&")
}

// DSNSecrets lists the credential values a DSN carries (password, token,
// passcode…), raw and URL-decoded: what the CLI must never print.
func DSNSecrets(dsn string) []string { return secretsOfDSN(dsn) }

// secretsOfDSN lists the credential values a DSN carries, raw and
// URL-decoded, so error texts can be scrubbed of them.
func secretsOfDSN(dsn string) []string {
	var out []string
	if m := userinfo.FindStringSubmatch(dsn); m != nil && m[2] != "" {
		out = append(out, m[2])
		if u, err := url.PathUnescape(m[2]); err == nil && u != m[2] {
			out = append(out, u)
		}
	}
	if i := strings.LastIndexByte(dsn, '?'); i >= 0 {
		if q, err := url.ParseQuery(dsn[i+1:]); err == nil {
			for k, vs := range q {
				if secretParams[strings.ToLower(k)] {
					out = append(out, vs...)
				}
			}
		}
	}
	return out
}

func secretsOfConfig(cfg *gosnowflake.Config) []string {
	var out []string
	for _, s := range []string{cfg.Password, cfg.Passcode, cfg.Token, cfg.OauthClientSecret} {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// scrubText replaces every secret (4 characters or more, so that a short
// password does not blank out ordinary words) in s by ***.
func scrubText(s string, secrets []string) string {
	for _, sec := range secrets {
		if len(sec) >= 4 {
			s = strings.ReplaceAll(s, sec, "***")
		}
	}
	return s
}

// scrubbedError keeps a driver error for errors.As while its message is
// scrubbed of credentials.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

func scrub(err error, secrets []string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if clean := scrubText(msg, secrets); clean != msg {
		return &scrubbedError{msg: clean, err: err}
	}
	return err
}
