package main

import (
	"strings"
	"testing"
)

// The run header names the config's target, as dbt does, and the adapter
// beside it (it named the adapter as if it were the target).
func TestHeaderNamesTheTarget(t *testing.T) {
	h := newHarness(t)
	cfg := h.writeConfig(`target: dev
targets:
  dev: {store: "sqlite:state.db", warehouse: "sqlite:dev.db"}
`)
	r := h.run("--config", cfg, "run", fixture("ok", "plan.yaml"))
	if r.code != 0 || !strings.Contains(r.stdout, "Concurrency: 4 threads (target='dev', adapter='sqlite')") {
		t.Fatalf("run on target dev: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
