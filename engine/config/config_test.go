package config

import (
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

func TestParse(t *testing.T) {
	c, err := Parse([]byte(`
sinks:
  - name: hooks
    webhook: {url: "https://example.test/dvt", secretEnv: DVT_WEBHOOK_SECRET, timeout: 10s}
  - name: archive
    jsonl: {path: /var/log/dvtrun/events.jsonl}
  - name: lineage
    openlineage: {url: "http://marquez:5000", apiKeyEnv: OL_TOKEN, namespace: analytics}
signals:
  rules:
    - {actors: [alice], signals: [PAUSE, RESUME], environments: [prod]}
console: {tokenEnv: DVT_UI_TOKEN, basicAuthEnv: DVT_UI_BASIC, hosts: [dvt.example.com], maxStreams: 8}
`), "dvt.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Sinks) != 3 || c.Sinks[0].Webhook.Timeout != 10*time.Second || c.Sinks[1].JSONL.Path != "/var/log/dvtrun/events.jsonl" ||
		*c.Sinks[2].OpenLineage != (OpenLineageSink{URL: "http://marquez:5000", APIKeyEnv: "OL_TOKEN", Namespace: "analytics"}) {
		t.Errorf("sinks = %+v", c.Sinks)
	}
	if r := c.Signals.Rules; len(r) != 1 || r[0].Actors[0] != "alice" || len(r[0].Signals) != 2 {
		t.Errorf("signals = %+v", c.Signals)
	}
	if c.Console.TokenEnv != "DVT_UI_TOKEN" || c.Console.BasicAuthEnv != "DVT_UI_BASIC" || len(c.Console.Hosts) != 1 || c.Console.Hosts[0] != "dvt.example.com" || c.Console.MaxStreams != 8 {
		t.Errorf("console = %+v", c.Console)
	}
	if c, err := Parse(nil, "empty.yaml"); err != nil || len(c.Sinks) != 0 {
		t.Errorf("empty file: %v, %+v", err, c)
	}
}

func TestParseErrorsNameTheKey(t *testing.T) {
	cases := []struct{ name, text, want string }{
		{"unknown section", "sink: []", "field sink not found"},
		{"unknown sink key", "sinks: [{name: a, jsonl: {path: x}, retries: 3}]", "field retries not found"},
		{"missing name", "sinks: [{jsonl: {path: x}}]", "sinks[0].name: is required"},
		{"duplicate name", "sinks: [{name: a, jsonl: {path: x}}, {name: a, jsonl: {path: y}}]", `sinks[1].name: "a" is used`},
		{"no kind", "sinks: [{name: a}]", "sinks[0]: sink \"a\" needs webhook, jsonl or openlineage"},
		{"two kinds", "sinks: [{name: a, jsonl: {path: x}, webhook: {url: u}}]", "sets more than one of webhook, jsonl and openlineage"},
		{"openlineage and jsonl", "sinks: [{name: a, jsonl: {path: x}, openlineage: {path: y}}]", "sets more than one"},
		{"openlineage neither", "sinks: [{name: a, openlineage: {namespace: n}}]", "sinks[0].openlineage: sink \"a\" needs exactly one of url and path"},
		{"openlineage both", "sinks: [{name: a, openlineage: {url: u, path: p}}]", "needs exactly one of url and path"},
		{"openlineage file with a key", "sinks: [{name: a, openlineage: {path: p, apiKeyEnv: K}}]", "apiKeyEnv and timeout apply to a url only"},
		{"openlineage negative timeout", "sinks: [{name: a, openlineage: {url: u, timeout: -1s}}]", "sinks[0].openlineage.timeout: must not be negative"},
		{"openlineage unknown key", "sinks: [{name: a, openlineage: {url: u, token: t}}]", "field token not found"},
		{"webhook url", "sinks: [{name: a, webhook: {secretEnv: S}}]", "sinks[0].webhook.url: is required"},
		{"bad timeout", "sinks: [{name: a, webhook: {url: u, timeout: soon}}]", "soon"},
		{"jsonl path", "sinks: [{name: a, jsonl: {}}]", "sinks[0].jsonl.path: is required"},
		{"unknown signal", "signals: {rules: [{signals: [STOP]}]}", `signals.rules[0].signals[0]: unknown signal "STOP"`},
		{"not yaml", "sinks: [", "dvt.yaml"},
		{"console token env", "console: {tokenEnv: \"A B\"}", `console.tokenEnv: "A B" is not an environment variable name`},
		{"console basic auth env", "console: {basicAuthEnv: 1X}", `console.basicAuthEnv: "1X" is not an environment variable name`},
		{"console host with a port", "console: {hosts: [\"dvt.example.com:8080\"]}", `console.hosts: "dvt.example.com:8080" is not a host name`},
		{"console host with a scheme", "console: {hosts: [\"http://x\"]}", `console.hosts: "http://x" is not a host name`},
		{"console negative max streams", "console: {maxStreams: -1}", `console.maxStreams: -1 must not be negative`},
		{"console secret inline", "console: {token: abc}", "field token not found"},
		// stateStore (ExecutionSemantics §5), read key by key.
		{"stateStore: not a mapping", "stateStore: [1]", "stateStore: want a mapping"},
		{"stateStore: unknown key", "stateStore: {writeBudgetMs: 3000}", "stateStore.writeBudgetMs: unknown key"},
		{"stateStore: budget in seconds", "stateStore: {writeLatencyBudgetMs: 3s}", `stateStore.writeLatencyBudgetMs: "3s" is not a whole number of milliseconds`},
		{"stateStore: budget fraction", "stateStore: {writeLatencyBudgetMs: 2.5}", `stateStore.writeLatencyBudgetMs: "2.5" is not a whole number`},
		{"stateStore: budget list", "stateStore: {writeLatencyBudgetMs: [1]}", `stateStore.writeLatencyBudgetMs: "[1]" is not a whole number`},
		{"stateStore: budget too small", "stateStore: {writeLatencyBudgetMs: 3}", "stateStore.writeLatencyBudgetMs: 3 is not between 100 and 3600000 (milliseconds)"},
		{"stateStore: budget zero", "stateStore: {writeLatencyBudgetMs: 0}", "stateStore.writeLatencyBudgetMs: 0 is not between 100 and 3600000 (milliseconds)"},
		{"stateStore: budget negative", "stateStore: {writeLatencyBudgetMs: -5}", "stateStore.writeLatencyBudgetMs: -5 is not between 100 and 3600000 (milliseconds)"},
		{"stateStore: budget above an hour", "stateStore: {writeLatencyBudgetMs: 3600001}", "stateStore.writeLatencyBudgetMs: 3600001 is not between"},
		{"stateStore: budget overflows", "stateStore: {writeLatencyBudgetMs: 99999999999999999999}", "stateStore.writeLatencyBudgetMs: \"99999999999999999999\" is not a whole number"},
		{"stateStore: budget wraps as nanoseconds", "stateStore: {writeLatencyBudgetMs: 9223372036854775}", "stateStore.writeLatencyBudgetMs: 9223372036854775 is not between"},
		{"stateStore: long value cut", "stateStore: {writeLatencyBudgetMs: " + strings.Repeat("9", 500) + "}", `"` + strings.Repeat("9", 60) + `"… is not a whole number`},
		{"stateStore: set twice", "stateStore: {writeLatencyBudgetMs: 500, writeLatencyBudgetMs: 600}", "stateStore.writeLatencyBudgetMs: is set twice"},
		{"stateStore: spool dir empty", `stateStore: {spoolDir: ""}`, `stateStore.spoolDir: want a directory path, not ""`},
		{"stateStore: spool dir null", `stateStore: {spoolDir: ~}`, `stateStore.spoolDir: want a directory path`},
		{"stateStore: spool dir list", `stateStore: {spoolDir: [a]}`, `stateStore.spoolDir: want a directory path`},
		{"stateStore: fail open for completions", "stateStore: {failOpenForEventClass: [StepStarted, StepCompleted]}",
			"stateStore.failOpenForEventClass: dvtrun fails open (spools) for exactly [StepStarted] (ExecutionSemantics §5) and implements no other policy"},
		{"stateStore: fail open for nothing", "stateStore: {failOpenForEventClass: []}", "stateStore.failOpenForEventClass: dvtrun fails open (spools) for exactly [StepStarted]"},
		{"stateStore: fail open as a string", "stateStore: {failOpenForEventClass: StepStarted}", "stateStore.failOpenForEventClass: dvtrun fails open (spools) for exactly [StepStarted]"},
		{"stateStore: fail open twice", "stateStore: {failOpenForEventClass: [StepStarted, StepStarted]}", "stateStore.failOpenForEventClass:"},
		{"stateStore: never fail open short", "stateStore: {neverFailOpen: [StepFailed]}",
			"stateStore.neverFailOpen: dvtrun never fails open for exactly [StepCompleted, StepFailed] (ExecutionSemantics §5)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.text), "dvt.yaml")
			if engine.CodeOf(err) != engine.CodeConfigInvalid || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "dvt.yaml") {
				t.Errorf("got %v, want CONFIG_INVALID naming dvt.yaml and %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}
