package main

import (
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// warehouseRows returns "id:kind:updated" rows of a relation of the
// harness's SQLite warehouse, in id order, joined by spaces.
func (h *harness) warehouseRows(rel string) string {
	h.t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(h.dir, "warehouse.db")+"?mode=ro")
	if err != nil {
		h.t.Fatal(err)
	}
	defer db.Close()
	return eventRows(h.t, db, rel)
}

// eventRows returns a relation's rows as "id:kind:updated", in id order,
// joined by spaces (SQL both warehouses run).
func eventRows(t *testing.T, db *sql.DB, rel string) string {
	t.Helper()
	rows, err := db.Query("select cast(id as varchar) || ':' || kind || ':' || cast(updated as varchar) from " + rel + " order by id")
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, " ")
}

// planCopy copies testdata/<name>/plan.yaml into a temporary directory
// (where a test writes the plan's CSV files) and returns its path.
func planCopy(t *testing.T, name string) string {
	t.Helper()
	src, err := os.ReadFile(fixture(name, "plan.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	plan := filepath.Join(t.TempDir(), "plan.yaml")
	if err := os.WriteFile(plan, src, 0o644); err != nil {
		t.Fatal(err)
	}
	return plan
}

// lastRunRowsAffected returns adapter_response.rows_affected of step's
// result in the newest run's run_results.json.
func lastRunRowsAffected(t *testing.T, h *harness, runID, uniqueID string) float64 {
	t.Helper()
	data := readArtifact(t, h.closingArtifact(runID))
	var doc struct {
		Results []struct {
			UniqueID        string         `json:"unique_id"`
			AdapterResponse map[string]any `json:"adapter_response"`
		} `json:"results"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	for _, r := range doc.Results {
		if r.UniqueID == uniqueID {
			n, _ := r.AdapterResponse["rows_affected"].(float64)
			return n
		}
	}
	t.Fatalf("no result for %s", uniqueID)
	return 0
}

// TestIncrementalAndEphemeralRuns runs testdata/incremental through the CLI
// on SQLite: three runs over a source that gains and changes rows leave
// the incremental table equal to the full rebuild while merging only the
// new rows; a failing merge leaves the table as it was; a row deleted from
// the source stays until `run --full-refresh`; the ephemeral model is
// inlined into its readers and never becomes a relation.
func TestIncrementalAndEphemeralRuns(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	plan := planCopy(t, "incremental")
	dir := filepath.Dir(plan)
	var runs []string
	run := func(csv string, exit int, flags ...string) string {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "events.csv"), []byte(csv), 0o644); err != nil {
			t.Fatal(err)
		}
		r := h.run(append(append([]string{"run"}, flags...), plan)...)
		if r.code != exit {
			t.Fatalf("run: exit %d, want %d: %s %s", r.code, exit, r.stdout, r.stderr)
		}
		if !strings.Contains(r.stdout, "(4 steps)") || !strings.Contains(r.stdout, "TOTAL=4") && exit == 0 {
			t.Errorf("the ephemeral model is counted as a step:\n%s", r.stdout)
		}
		id := runIDFrom(t, r.stdout)
		runs = append(runs, id)
		return id
	}
	steps := []struct {
		csv    string
		merged float64 // rows the incremental step wrote
	}{
		{"id,kind,updated\n1,a,1\n2,b,1\n", 2},
		{"id,kind,updated\n1,a,1\n2,bb,2\n3,c,2\n", 2},
		{"id,kind,updated\n1,aa,3\n2,bb,2\n3,c,2\n4,d,3\n-1,x,9\n", 2},
	}
	for i, s := range steps {
		id := run(s.csv, 0)
		if got, want := h.warehouseRows("events"), h.warehouseRows("events_full"); got != want {
			t.Errorf("run %d: incremental %q, full rebuild %q", i+1, got, want)
		}
		if n := lastRunRowsAffected(t, h, id, "model.cli_incremental.events"); n != s.merged {
			t.Errorf("run %d: the incremental step wrote %v rows, want %v", i+1, n, s.merged)
		}
	}
	if got := h.warehouseRows("events"); got != "1:AA:3 2:BB:2 3:C:2 4:D:3" {
		t.Errorf("events = %q", got)
	}
	before := h.warehouseRows("events")

	// Two new rows with one key: the merge fails, the table stays.
	run("id,kind,updated\n1,aa,3\n5,e,4\n5,f,4\n", 1)
	if got := h.warehouseRows("events"); got != before {
		t.Errorf("after a failed merge events = %q, want %q", got, before)
	}

	// Row 4 leaves the source: it stays in the incremental table (dbt's
	// semantics) until --full-refresh rebuilds it from the full select.
	run("id,kind,updated\n1,aa,3\n2,bb,2\n3,c,2\n6,f,5\n", 0)
	if got := h.warehouseRows("events"); got != "1:AA:3 2:BB:2 3:C:2 4:D:3 6:F:5" {
		t.Errorf("after a merge events = %q", got)
	}
	run("id,kind,updated\n1,aa,3\n2,bb,2\n3,c,2\n6,f,5\n", 0, "--full-refresh")
	if got, want := h.warehouseRows("events"), h.warehouseRows("events_full"); got != want {
		t.Errorf("after --full-refresh events %q, want the full rebuild %q", got, want)
	}

	// The ephemeral model never became a relation, and no run has a step
	// for it.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(h.dir, "warehouse.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`select count(*) from sqlite_master where name like '%stg_events%'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("the ephemeral model left %d relation(s) (%v)", n, err)
	}
	for _, id := range runs {
		for _, ev := range h.events(id) {
			if ev.StepID == "model.stg_events" {
				t.Fatalf("run %s has an event for the ephemeral model: %s", id, ev.EventType)
			}
		}
	}
}
