package storetest

import (
	"database/sql"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/eventgen"
)

// GenStreams makes n reproducible runs for the projection property tests:
// run ids are "run-<seed>".
func GenStreams(first, n uint64, o eventgen.Options) map[string][]engine.RunEventRecord {
	out := make(map[string][]engine.RunEventRecord, n)
	for seed := first; seed < first+n; seed++ {
		id := fmt.Sprintf("run-%06d", seed)
		out[id] = eventgen.Stream(seed, id, o)
	}
	return out
}

// ReportDiffs fails t with the first ten differences of a comparison of
// snapshots.
func ReportDiffs(t testing.TB, what string, diffs []engine.SnapshotDiff) {
	t.Helper()
	var b strings.Builder
	for i, d := range diffs {
		if i == 10 {
			fmt.Fprintf(&b, "\n  … %d more", len(diffs)-i)
			break
		}
		fmt.Fprintf(&b, "\n  run %s step %q %s: sql=%q go=%q", d.RunID, d.StepID, d.Field, d.SQL, d.Go)
	}
	t.Errorf("%s: %d differences%s", what, len(diffs), b.String())
}

// DocQueries returns the named queries of docs/reference/sql.md (name, SQL), read
// from path (the tests of store/<backend> pass "../../docs/reference/sql.md").
func DocQueries(t testing.TB, path string) [][2]string {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [][2]string
	for _, m := range docQuery.FindAllStringSubmatch(string(doc), -1) {
		out = append(out, [2]string{m[1], m[2]})
	}
	if len(out) == 0 {
		t.Fatalf("%s has no named queries", path)
	}
	return out
}

var docQuery = regexp.MustCompile("(?s)<!-- query: ([a-z_]+) -->\\s*```sql\\n(.*?)```")

// LoadSQLiteLog writes streams into an SQLite store's dvt_run_events as
// they are (a re-delivery's key made distinct for the unique index; no view
// reads keys): the reference the other dialects' audit views are compared
// with.
func LoadSQLiteLog(t testing.TB, db *sql.DB, streams map[string][]engine.RunEventRecord) {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for runID, events := range streams {
		keys := map[string]bool{}
		for _, e := range events {
			key := e.IdempotencyKey
			if keys[key] {
				key = fmt.Sprintf("%s~%d", key, e.RunSeq)
			}
			keys[key] = true
			var step, payload any
			if e.StepID != "" {
				step = e.StepID
			}
			if e.Payload != nil {
				payload = string(e.Payload)
			}
			if _, err := tx.Exec(`INSERT INTO dvt_run_events (run_id, run_seq, tenant_id, project_id, environment_id, event_id, event_type, step_id,
				plan_id, plan_version, logical_attempt_id, engine_attempt_id, idempotency_key, emitted_at, persisted_at, payload)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, runID, e.RunSeq, e.TenantID, e.ProjectID, e.EnvironmentID, e.EventID,
				string(e.EventType), step, e.PlanID, e.PlanVersion, e.LogicalAttemptID, e.EngineAttemptID, key,
				e.EmittedAt.UTC().Format(engine.TimeFormat), e.PersistedAt.UTC().Format(engine.TimeFormat), payload); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// DocRows runs q and renders each row in a dialect-neutral form: NULL,
// integers, text, booleans as 0/1, times in engine.TimeFormat.
func DocRows(t testing.TB, db *sql.DB, q string) []string {
	t.Helper()
	rows, err := db.Query(q)
	if err != nil {
		t.Fatalf("query: %v\n%s", err, q)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		parts := make([]string, len(vals))
		for i, v := range vals {
			switch v := v.(type) {
			case nil:
				parts[i] = "NULL"
			case []byte:
				parts[i] = string(v)
			case bool:
				parts[i] = "0"
				if v {
					parts[i] = "1"
				}
			case time.Time:
				parts[i] = v.UTC().Format(engine.TimeFormat)
			default:
				parts[i] = fmt.Sprint(v)
			}
		}
		out = append(out, strings.Join(parts, " | "))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
