package snowflake_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
)

// A store or warehouse whose host refuses or never answers fails within
// the DSN's loginTimeout (plus a margin for the machine), with a
// STORE_UNAVAILABLE that names the host, not the password, and that no
// caller retries (the driver has already spent the budget).
func TestLoginIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for two login timeouts")
	}
	refused, silent := sftest.Unreachable(t)
	const timeout = 2 * time.Second
	open := map[string]func(ctx context.Context, dsn string) error{
		"store": func(ctx context.Context, dsn string) error {
			s, err := snowflake.Open(ctx, dsn, snowflake.Options{})
			if err == nil {
				s.Close()
			}
			return err
		},
		"warehouse": func(ctx context.Context, dsn string) error {
			w, err := snowflake.OpenWarehouse(ctx, dsn, snowflake.WarehouseOptions{})
			if err == nil {
				w.Close()
			}
			return err
		},
	}
	for _, addr := range []struct{ name, hostPort string }{{"refused", refused}, {"never answers", silent.Addr}} {
		for what, fn := range open {
			t.Run(addr.name+"/"+what, func(t *testing.T) {
				t.Parallel()
				dsn := "alice:Sup3rSecretPW@" + addr.hostPort + "/db/sch?account=acme&loginTimeout=" + strconv.Itoa(int(timeout.Seconds()))
				start := time.Now()
				err := fn(context.Background(), dsn)
				took := time.Since(start)
				t.Logf("after %s: %v", took.Round(time.Millisecond), err)
				if took > timeout+5*time.Second {
					t.Errorf("failed after %s, want within the %s login timeout", took, timeout)
				}
				switch {
				case engine.CodeOf(err) != engine.CodeStoreUnavailable:
					t.Fatalf("error %v, want STORE_UNAVAILABLE", err)
				case engine.IsTransient(err):
					t.Errorf("error %v is transient: a caller's retries would multiply the login timeout", err)
				case !strings.Contains(err.Error(), addr.hostPort):
					t.Errorf("error %q does not name the host %s", err, addr.hostPort)
				case strings.Contains(err.Error(), "Sup3rSecretPW"):
					t.Errorf("error %q carries the password", err)
				}
			})
		}
	}
}

// TestRefusedFailsFast: a host that refuses connections, or whose name does
// not resolve, fails in a few seconds with the default login timeout, not
// after the driver's login retries (24–28 s before), with the same
// STORE_UNAVAILABLE naming the host.
func TestRefusedFailsFast(t *testing.T) {
	refused, _ := sftest.Unreachable(t)
	for _, c := range []struct{ name, hostPort, says string }{
		{"refused", refused, "connection refused"},
		{"unknown host", "no-such-host.invalid:443", "no such host"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dsn := "alice:Sup3rSecretPW@" + c.hostPort + "/db/sch?account=acme"
			start := time.Now()
			s, err := snowflake.Open(context.Background(), dsn, snowflake.Options{})
			took := time.Since(start)
			if err == nil {
				s.Close()
			}
			t.Logf("after %s: %v", took.Round(time.Millisecond), err)
			if engine.CodeOf(err) != engine.CodeStoreUnavailable || !strings.Contains(err.Error(), c.hostPort) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("error %v, want STORE_UNAVAILABLE naming %s and saying %q", err, c.hostPort, c.says)
			}
			// The bound is loose for a loaded machine; the driver's retries
			// alone took 24 s or more.
			if took > 15*time.Second {
				t.Errorf("failed after %s, want a few seconds", took)
			}
		})
	}
}
