package snowflake_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/eventgen"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

var docQuery = regexp.MustCompile("(?s)<!-- query: ([a-z_]+) -->\\s*```sql\\n(.*?)```")

// TestAuditDocQueriesMatchSQLite runs every query of docs/audit.md on the
// Snowflake views (through the test server) and on the SQLite views over the
// same 300 generated runs, and requires the same rows. The SQLite results
// are themselves compared with the Go reducer (store/sqlite
// TestAuditDocQueries), so the documented queries mean the same on both.
func TestAuditDocQueriesMatchSQLite(t *testing.T) {
	doc, err := os.ReadFile("../../docs/audit.md")
	if err != nil {
		t.Fatal(err)
	}
	queries := docQuery.FindAllStringSubmatch(string(doc), -1)
	if len(queries) == 0 {
		t.Fatal("docs/audit.md has no named queries")
	}
	streams := map[string][]engine.RunEventRecord{}
	for seed := uint64(1); seed <= 300; seed++ {
		id := fmt.Sprintf("run-%06d", seed)
		tenant := "t1"
		if seed > 150 {
			tenant = "t2"
		}
		streams[id] = eventgen.Stream(seed, id, eventgen.Options{Duplicates: true, AllowGaps: true, Noise: 0.2, TenantID: tenant})
	}
	srv := sftest.Start(t)
	sf := openStore(t, srv.DSN("dvt", "audit_docs"), snowflake.Options{})
	t.Cleanup(func() { sf.Close() })
	loadRaw(t, sf, streams)
	lite, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "state.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lite.Close() })
	loadSQLite(t, lite, streams)

	for _, q := range queries {
		name, text := q[1], q[2]
		t.Run(name, func(t *testing.T) {
			want := docRows(t, lite.DB().DB, text)
			got := docRows(t, sf.DB(), text)
			if len(want) == 0 {
				t.Fatalf("%s returns no rows on SQLite: the fixture does not exercise it", name)
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("%s: Snowflake %d rows, SQLite %d\nsnowflake:\n%s\nsqlite:\n%s", name, len(got), len(want), strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// loadSQLite writes the streams into the SQLite log as they are (SQLite's
// unique index needs a re-delivery's key made distinct; no view reads keys).
func loadSQLite(t *testing.T, s *sqlite.Store, streams map[string][]engine.RunEventRecord) {
	t.Helper()
	tx, err := s.DB().Begin()
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

// docRows runs q and renders each row in a dialect-neutral form: NULL,
// integers, text, booleans as 0/1, times in engine.TimeFormat.
func docRows(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	rows, err := db.QueryContext(ctx, q)
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
