package postgres

import (
	"testing"
	"time"
)

// The default connect timeout applies only where neither the DSN nor
// PGCONNECT_TIMEOUT sets one; connect_timeout=0 keeps libpq's "forever".
func TestConnectTimeoutDefault(t *testing.T) {
	t.Setenv("PGCONNECT_TIMEOUT", "")
	cases := []struct {
		dsn  string
		want time.Duration
	}{
		{"postgres://u@h/db", DefaultConnectTimeout},
		{"host=h user=u dbname=db", DefaultConnectTimeout},
		{"postgres://u@h/db?connect_timeout=3", 3 * time.Second},
		{"postgres://u@h/db?sslmode=disable&connect_timeout=0", 0},
		{"host=h connect_timeout=7 dbname=db", 7 * time.Second},
		{"host=h application_name=xconnect_timeout dbname=db", DefaultConnectTimeout},
	}
	for _, c := range cases {
		cfg, err := pgxConfig(c.dsn, time.Second, time.Second)
		if err != nil {
			t.Fatalf("%s: %v", c.dsn, err)
		}
		if cfg.ConnectTimeout != c.want {
			t.Errorf("%s: connect timeout %s, want %s", c.dsn, cfg.ConnectTimeout, c.want)
		}
	}
	t.Setenv("PGCONNECT_TIMEOUT", "4")
	if cfg, err := pgxConfig("postgres://u@h/db", time.Second, time.Second); err != nil || cfg.ConnectTimeout != 4*time.Second {
		t.Errorf("PGCONNECT_TIMEOUT=4: %v, %v", cfg.ConnectTimeout, err)
	}
}
