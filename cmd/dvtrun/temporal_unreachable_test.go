package main

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// TestTemporalUnreachable: `run --target X` whose target runs on a
// Temporal frontend that is down says that the Temporal frontend, at its
// address, is unreachable (not the warehouse or the state store), exits
// 4, and records no run: nothing stays QUEUED with no engine to take it.
func TestTemporalUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // a closed port: the frontend is down
	h := newHarness(t)
	cfg := h.writeConfig(`target: dev
targets:
  dev: {store: "sqlite:state.db", warehouse: "sqlite:dev.db", environment: shared}
  tmp:
    store: "sqlite:state.db"
    warehouse: "sqlite:tmp.db"
    environment: shared
    engine: temporal
    temporal: {address: "` + addr + `"}
`)
	r := h.run("--config", cfg, "--target", "tmp", "run", fixture("ok", "plan.yaml"))
	wantError(t, r, exitUnavailable, "STORE_UNAVAILABLE", "Temporal frontend at "+addr)
	if strings.Contains(r.stdout+r.stderr, "warehouse or state store") {
		t.Errorf("the error blames the warehouse or the state store:\n%s%s", r.stdout, r.stderr)
	}
	h.env["DVT_STORE"] = "sqlite:" + filepath.Join(h.dir, "state.db")
	if ids := listed(t, h.run("--config", cfg, "runs", "--json")); len(ids) != 0 {
		t.Errorf("runs recorded without a reachable engine: %v", ids)
	}
}
