package main

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunWithInterval: `run --interval START/END` gives a run by hand the
// data interval a schedule's tick would, recorded in RunQueued and shown by
// status; without one, a plan using an interval name is refused before
// anything is written, and a malformed interval is INVALID_ARGUMENT.
func TestRunWithInterval(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	plan := filepath.Join(h.dir, "plan.yaml")
	if err := os.WriteFile(plan, []byte(`planId: days
planVersion: "1"
schemaVersion: "1"
steps:
  - id: model.day
    kind: model
    materialized: table
    sql: select {{ logical_date_utc }} as day, {{ data_interval_end_utc }} as until
`), 0o644); err != nil {
		t.Fatal(err)
	}
	wantError(t, h.run("run", plan), 2, "PLAN_INVALID", "has no data interval")
	if _, err := os.Stat(h.statePath()); !os.IsNotExist(err) {
		t.Fatalf("a refused run wrote the state store (stat: %v)", err)
	}
	for _, bad := range []struct{ v, msg string }{
		{"2026-11-24", "no '/'"},
		{"2026-11-25/2026-11-24", "the start is not before the end"},
		{"yesterday/today", "neither an RFC 3339 time nor a date"},
	} {
		wantError(t, h.run("run", plan, "--interval", bad.v), 2, "INVALID_ARGUMENT", "--interval", bad.msg)
	}
	if r := h.run("run", plan, "--interval", "2026-11-24/2026-11-25T00:00:00+01:00"); r.code != 0 {
		t.Fatalf("run --interval: %+v", r)
	}
	r := h.run("status", "last")
	if !strings.Contains(r.stdout, "[2026-11-24T00:00:00.000000000Z, 2026-11-24T23:00:00.000000000Z) UTC") {
		t.Errorf("status does not show the interval:\n%s", r.stdout)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(h.dir, "warehouse.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var day, until string
	if err := db.QueryRow("select day, until from day").Scan(&day, &until); err != nil {
		t.Fatal(err)
	}
	if day != "2026-11-24T00:00:00Z" || until != "2026-11-24T23:00:00Z" {
		t.Errorf("rendered day %q until %q", day, until)
	}
}
