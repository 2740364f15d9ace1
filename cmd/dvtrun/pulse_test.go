package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine/config"
)

// TestPulseIntervalChoice: --pulse-interval wins, then the config's
// pulse.interval, then the store's default (seconds on Snowflake), cut to
// a third of the lease TTL; a configured value above that is refused.
func TestPulseIntervalChoice(t *testing.T) {
	t.Parallel()
	const sqliteStore, sfStore = "sqlite:state.db", "snowflake://u:p@acct/db/sch"
	for _, tc := range []struct {
		name    string
		store   string
		flag    time.Duration
		config  time.Duration
		ttl     time.Duration
		want    time.Duration
		refused bool
	}{
		{"SQLite default", sqliteStore, 0, 0, 30 * time.Second, 250 * time.Millisecond, false},
		{"Snowflake default", sfStore, 0, 0, 30 * time.Second, 2 * time.Second, false},
		{"Snowflake default cut to TTL/3", sfStore, 0, 0, 3 * time.Second, time.Second, false},
		{"config", sfStore, 0, 5 * time.Second, 30 * time.Second, 5 * time.Second, false},
		{"flag over config", sqliteStore, 100 * time.Millisecond, 5 * time.Second, 30 * time.Second, 100 * time.Millisecond, false},
		{"config above TTL/3", sqliteStore, 0, 11 * time.Second, 30 * time.Second, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &cli{env: func(string) string { return "" }}
			c.g.store, c.g.config = tc.store, "dvt.yaml"
			got, err := c.pulseInterval(runFlags{pulse: tc.flag, leaseTTL: tc.ttl}, &config.Config{Pulse: config.Pulse{Interval: tc.config}})
			if tc.refused {
				if err == nil || !strings.Contains(err.Error(), "CONFIG_INVALID") || !strings.Contains(err.Error(), "pulse.interval") {
					t.Fatalf("got %s, %v; want CONFIG_INVALID naming pulse.interval", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %s, %v; want %s", got, err, tc.want)
			}
		})
	}
}

// run, resume, worker and serve take --pulse-interval, and their help says
// what it costs.
func TestPulseFlag(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"run", "resume", "worker", "serve"} {
		t.Run(cmd, func(t *testing.T) {
			r := newHarness(t).run(cmd, "--help")
			for _, want := range []string{"-pulse-interval", "ONE state-store request per interval", "2s on Snowflake", "keeps the warehouse awake", "--lease-ttl/3"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("%s --help lacks %q:\n%s", cmd, want, r.stdout)
				}
			}
		})
	}
	plan := fixture("ok", "plan.yaml")
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"run", "--pulse-interval", "1ms", plan}, "--pulse-interval must be between 10ms and a third of --lease-ttl (10s)"},
		{[]string{"worker", "--lease-ttl", "3s", "--pulse-interval", "2s"}, "a third of --lease-ttl (1s)"},
		{[]string{"serve", "--pulse-interval", "-1s"}, "--pulse-interval must be between"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			h := newHarness(t)
			wantError(t, h.run(tc.args...), exitUsage, "INVALID_ARGUMENT", tc.msg)
			if _, err := os.Stat(h.statePath()); !os.IsNotExist(err) {
				t.Errorf("the refused command created the state store (stat: %v)", err)
			}
		})
	}
	t.Run("config pulse.interval above TTL/3", func(t *testing.T) {
		h := newHarness(t)
		cfg := filepath.Join(h.dir, "dvt.yaml")
		if err := os.WriteFile(cfg, []byte("pulse: {interval: 20s}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		h.env["DVT_CONFIG"] = cfg
		wantError(t, h.run("run", plan), exitUsage, "CONFIG_INVALID", "pulse.interval 20s is more than a third of the lease TTL")
		if _, err := os.Stat(h.statePath()); !os.IsNotExist(err) {
			t.Errorf("the refused run created the state store (stat: %v)", err)
		}
	})
}
