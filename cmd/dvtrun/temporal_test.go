package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine/config"
)

// TestTemporalSecretsRefusedBeforeTheRun: a temporal block's TLS files and
// API key are references; one that cannot be used is CONFIG_INVALID
// naming the key (the target's block, else the top-level one), before any
// run is recorded or Temporal is dialled (the address points nowhere).
func TestTemporalSecretsRefusedBeforeTheRun(t *testing.T) {
	h := newHarness(t)
	dir := h.dir
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("notpem.txt", "hello\n")
	write("blank.key", "  \n")
	write("cert.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
	h.env["BLANK_KEY"] = "   "
	cases := []struct{ name, block, want string }{
		{"missing CA", "tls: {caFile: nowhere/ca.pem}", "temporal.tls.caFile: cannot read " + filepath.Join(dir, "nowhere/ca.pem")},
		{"CA not PEM", "tls: {caFile: notpem.txt}", "temporal.tls.caFile: " + filepath.Join(dir, "notpem.txt") + " holds no PEM certificate"},
		{"cert without key", "tls: {certFile: cert.pem}", "temporal.tls.keyFile: is required with tls.certFile"},
		{"key file missing", "tls: {certFile: cert.pem, keyFile: gone.key}", "temporal.tls.keyFile: cannot read " + filepath.Join(dir, "gone.key")},
		{"not a key pair", "tls: {certFile: cert.pem, keyFile: notpem.txt}", "temporal.tls.certFile: " + filepath.Join(dir, "cert.pem") + " and tls.keyFile"},
		{"blank key variable", "apiKeyEnv: BLANK_KEY", "temporal.apiKeyEnv: the API key variable BLANK_KEY is unset, empty or only blanks"},
		{"unset key variable", "apiKeyEnv: NO_SUCH_KEY", "temporal.apiKeyEnv: the API key variable NO_SUCH_KEY is unset"},
		{"blank key file", "apiKeyFile: blank.key", "temporal.apiKeyFile: " + filepath.Join(dir, "blank.key") + " is empty or only blanks"},
		{"missing key file", "apiKeyFile: none.key", "temporal.apiKeyFile: cannot read"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := write("dvt.yaml", "temporal: {address: '127.0.0.1:1', "+tc.block+"}\n")
			r := h.run("--config", cfg, "run", "--engine", "temporal", fixture("ok", "plan.yaml"))
			wantError(t, r, 2, "CONFIG_INVALID", tc.want)
			if strings.Contains(r.stdout, "Running plan") {
				t.Errorf("a run was recorded before the references were checked:\n%s", r.stdout)
			}
		})
	}
	// A target's own block is named as such.
	cfg := write("dvt.yaml", `targets:
  tmp:
    store: `+h.env["DVT_STORE"]+`
    warehouse: `+h.env["DVT_WAREHOUSE"]+`
    engine: temporal
    temporal: {address: '127.0.0.1:1', apiKeyEnv: BLANK_KEY}
`)
	wantError(t, h.run("--config", cfg, "--target", "tmp", "run", fixture("ok", "plan.yaml")), 2, "CONFIG_INVALID", "targets.tmp.temporal.apiKeyEnv: the API key variable BLANK_KEY")
}

// TestEnginePrecedence: --engine, else the engine the run started on
// (resume, retry), else DVT_ENGINE, else the target's engine.
func TestEnginePrecedence(t *testing.T) {
	cases := []struct {
		flag, recorded, env, target string
		want                        bool
	}{
		{"", "", "", "", false},
		{"", "", "", "temporal", true},
		{"", "", "temporal", "local", true},
		{"", "temporal", "", "local", true},  // a Temporal run resumes there on a local target
		{"", "temporal", "local", "", true},  // the run's engine wins over the environment's
		{"", "local", "temporal", "", false}, // a local run stays local
		{"local", "temporal", "", "temporal", false},
		{"temporal", "local", "", "", true},
	}
	for _, tc := range cases {
		c := &cli{env: func(k string) string {
			if k == "DVT_ENGINE" {
				return tc.env
			}
			return ""
		}}
		if tc.target != "" {
			c.target = &chosenTarget{name: "t", t: config.Target{Engine: tc.target}}
		}
		if got := c.onTemporal(tc.flag, tc.recorded); got != tc.want {
			t.Errorf("--engine %q, recorded %q, DVT_ENGINE %q, target %q: on Temporal %v, want %v", tc.flag, tc.recorded, tc.env, tc.target, got, tc.want)
		}
	}
}
