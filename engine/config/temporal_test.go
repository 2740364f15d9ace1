package config

import (
	"strings"
	"testing"
	"time"
)

func TestTemporalBlock(t *testing.T) {
	cases := []struct {
		name, text string
		want       Temporal // after WithDefaults
		err        string
	}{
		{"defaults", "", Temporal{Address: "127.0.0.1:7233", Namespace: "default", TaskQueue: "dvtrun", HeartbeatTimeout: 5 * time.Second}, ""},
		{"given", "temporal: {address: 'tmp.example:7233', namespace: prod, taskQueue: etl, historyBudget: 5000, heartbeatTimeout: 2s}",
			Temporal{Address: "tmp.example:7233", Namespace: "prod", TaskQueue: "etl", HistoryBudget: 5000, HeartbeatTimeout: 2 * time.Second}, ""},
		{"heartbeat too short", "temporal: {heartbeatTimeout: 10ms}", Temporal{}, "temporal.heartbeatTimeout"},
		{"bad address", "temporal: {address: nowhere}", Temporal{}, "temporal.address"},
		{"negative budget", "temporal: {historyBudget: -1}", Temporal{}, "temporal.historyBudget"},
		{"unknown key", "temporal: {apiKey: x}", Temporal{}, "field apiKey not found"},
		{"cloud", "temporal: {address: 'ns.acct.tmprl.cloud:7233', namespace: ns.acct, apiKeyEnv: TEMPORAL_API_KEY}",
			Temporal{Address: "ns.acct.tmprl.cloud:7233", Namespace: "ns.acct", TaskQueue: "dvtrun", HeartbeatTimeout: 5 * time.Second, APIKeyEnv: "TEMPORAL_API_KEY"}, ""},
		{"mtls", "temporal: {tls: {caFile: ca.pem, certFile: c.pem, keyFile: c.key, serverName: temporal.internal}}",
			Temporal{Address: "127.0.0.1:7233", Namespace: "default", TaskQueue: "dvtrun", HeartbeatTimeout: 5 * time.Second,
				TLS: TemporalTLS{CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "c.key", ServerName: "temporal.internal"}}, ""},
		{"cert without key", "temporal: {tls: {certFile: c.pem}}", Temporal{}, "temporal.tls.keyFile: is required with tls.certFile"},
		{"key without cert", "temporal: {tls: {keyFile: c.key}}", Temporal{}, "temporal.tls.certFile: is required with tls.keyFile"},
		{"two api keys", "temporal: {apiKeyEnv: K, apiKeyFile: k.txt}", Temporal{}, "temporal.apiKeyEnv: give apiKeyEnv or apiKeyFile, not both"},
		{"api key env not a name", "temporal: {apiKeyEnv: 'tmprl_abc.def'}", Temporal{}, `temporal.apiKeyEnv: "tmprl_abc.def" is not an environment variable name`},
		{"a PEM in the file", "temporal: {tls: {caFile: '-----BEGIN CERTIFICATE-----'}}", Temporal{}, "temporal.tls.caFile: give the path of a PEM file"},
		{"unknown tls key", "temporal: {tls: {insecure: true}}", Temporal{}, "field insecure not found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.text), "dvt.yaml")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Temporal.WithDefaults(); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestTargetEngine: a target's engine and temporal block, the top-level
// block as the fallback of the block (never of the engine).
func TestTargetEngine(t *testing.T) {
	c, err := Parse([]byte(`
temporal: {address: 'top.example:7233', taskQueue: top}
targets:
  dev: {store: a, warehouse: "sqlite:dev.db"}
  tmp: {store: a, warehouse: "sqlite:tmp.db", engine: temporal, temporal: {address: '127.0.0.1:7233', namespace: ns, taskQueue: dvtrun}}
  shared: {store: a, warehouse: "sqlite:shared.db", engine: temporal}
  loc: {store: a, warehouse: "sqlite:loc.db", engine: local, temporal: {taskQueue: own}}
`), "dvt.yaml")
	if err != nil {
		t.Fatal(err)
	}
	top := Temporal{Address: "top.example:7233", Namespace: "default", TaskQueue: "top", HeartbeatTimeout: 5 * time.Second}
	cases := []struct {
		target, engine string
		block          Temporal
	}{
		{"", EngineLocal, top},
		{"dev", EngineLocal, top},
		{"tmp", EngineTemporal, Temporal{Address: "127.0.0.1:7233", Namespace: "ns", TaskQueue: "dvtrun", HeartbeatTimeout: 5 * time.Second}},
		{"shared", EngineTemporal, top},
		{"loc", EngineLocal, Temporal{Address: "127.0.0.1:7233", Namespace: "default", TaskQueue: "own", HeartbeatTimeout: 5 * time.Second}},
	}
	for _, tc := range cases {
		eng, block := c.Engine(tc.target)
		if eng != tc.engine || block != tc.block {
			t.Errorf("Engine(%q) = %s %+v, want %s %+v", tc.target, eng, block, tc.engine, tc.block)
		}
	}
}

func TestTargetEngineErrorsNameTheKey(t *testing.T) {
	cases := []struct{ text, want string }{
		{"targets: {tmp: {store: a, warehouse: b, engine: conductor}}", `targets.tmp.engine: "conductor": want local or temporal`},
		{"targets: {tmp: {store: a, warehouse: b, engine: temporal, temporal: {address: nowhere}}}", `targets.tmp.temporal.address: "nowhere" is not host:port`},
		{"targets: {tmp: {store: a, warehouse: b, temporal: {heartbeatTimeout: 1ms}}}", "targets.tmp.temporal.heartbeatTimeout: must be at least 400ms"},
		{"targets: {tmp: {store: a, warehouse: b, temporal: {historyBudget: -2}}}", "targets.tmp.temporal.historyBudget: must not be negative"},
		{"targets: {tmp: {store: a, warehouse: b, temporal: {apiKey: x}}}", "field apiKey not found"},
		{"targets: {tmp: {store: a, warehouse: b, temporal: {tls: {certFile: c.pem}}}}", "targets.tmp.temporal.tls.keyFile: is required"},
	}
	for _, tc := range cases {
		if _, err := Parse([]byte(tc.text), "dvt.yaml"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one with %q", tc.text, err, tc.want)
		}
	}
}

// TestTemporalKey names the block a target's runs use, for errors.
func TestTemporalKey(t *testing.T) {
	c, err := Parse([]byte(`
targets:
  own: {store: a, warehouse: b, engine: temporal, temporal: {taskQueue: q}}
  shared: {store: a, warehouse: c, engine: temporal}
`), "dvt.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for target, want := range map[string]string{"own": "targets.own.temporal", "shared": "temporal", "": "temporal"} {
		if got := c.TemporalKey(target); got != want {
			t.Errorf("TemporalKey(%q) = %s, want %s", target, got, want)
		}
	}
}
