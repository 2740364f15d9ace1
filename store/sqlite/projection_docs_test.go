package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// docQuery is a query of docs/reference/sql.md, introduced by <!-- query: name -->.
var docQuery = regexp.MustCompile("(?s)<!-- query: ([a-z_]+) -->\\s*```sql\\n(.*?)```")

// window is the persisted_at window the documented queries use.
var (
	winFrom = time.Date(2026, 1, 1, 0, 0, 20, 0, time.UTC)
	winTo   = time.Date(2026, 1, 1, 0, 0, 40, 0, time.UTC)
)

func inWindow(t time.Time) bool { return !t.Before(winFrom) && t.Before(winTo) }

// TestAuditDocQueries runs every query of docs/reference/sql.md against a store
// holding 300 generated runs of two tenants and compares its rows with
// what the Go reducer says, replayed event by event.
func TestAuditDocQueries(t *testing.T) {
	doc, err := os.ReadFile("../../docs/reference/sql.md")
	if err != nil {
		t.Fatal(err)
	}
	queries := docQuery.FindAllStringSubmatch(string(doc), -1)
	if blocks := strings.Count(string(doc), "```sql"); blocks != len(queries) || blocks == 0 {
		t.Fatalf("docs/reference/sql.md has %d sql blocks and %d named queries: every block needs a <!-- query: name --> marker", blocks, len(queries))
	}

	streams := storetest.AuditDocStreams()
	s := openProjectionStore(t)
	insertRaw(t, s, streams)
	want := expectDocRows(streams)

	seen := map[string]bool{}
	for _, q := range queries {
		name, text := q[1], q[2]
		seen[name] = true
		t.Run(name, func(t *testing.T) {
			exp, ok := want[name]
			if !ok {
				t.Fatalf("no expectation for documented query %s: add one to expectDocRows", name)
			}
			got := queryRows(t, s.DB().DB, text)
			if len(exp) == 0 {
				t.Fatalf("expectation for %s is empty: the fixture does not exercise it", name)
			}
			if strings.Join(got, "\n") != strings.Join(exp, "\n") {
				t.Errorf("%s: %d rows, want %d\ngot:\n%s\nwant:\n%s", name, len(got), len(exp), strings.Join(got, "\n"), strings.Join(exp, "\n"))
			}
		})
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("expectation %s matches no query of docs/reference/sql.md", name)
		}
	}
}

func queryRows(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), q)
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
		out = append(out, row(vals...))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// row renders values the way both sides are compared: NULL, integers,
// text; booleans as 0/1 as SQLite stores them.
func row(vals ...any) string {
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
			parts[i] = "NULL"
			if !v.IsZero() {
				parts[i] = v.UTC().Format(engine.TimeFormat)
			}
		case *engine.ErrorInfo:
			parts[i] = "NULL"
			if v != nil {
				parts[i] = v.Code
			}
		default:
			parts[i] = fmt.Sprint(v)
		}
	}
	return strings.Join(parts, " | ")
}

// expectDocRows computes each documented query's rows from the Go reducer,
// replaying every run one event at a time to see what each event did.
func expectDocRows(streams map[string][]engine.RunEventRecord) map[string][]string {
	ids := make([]string, 0, len(streams))
	for id := range streams {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	want := map[string][]string{}
	statusCount := map[engine.RunStatus][2]int{}
	type agg struct{ n, max, total int64 }
	slow := map[string]*agg{}
	for _, id := range ids {
		events := streams[id]
		final := engine.Project(id, events)
		tenant := events[0].TenantID
		var lastPersisted time.Time
		for _, e := range events {
			if e.PersistedAt.After(lastPersisted) {
				lastPersisted = e.PersistedAt
			}
		}
		if tenant == "t1" {
			c := statusCount[final.Status]
			c[0]++
			if final.Inconsistent {
				c[1]++
			}
			statusCount[final.Status] = c
			if inWindow(lastPersisted) {
				want["runs_in_window"] = append(want["runs_in_window"], row(id, string(final.Status), final.Substatus, final.Inconsistent,
					final.StartedAt, final.CompletedAt, final.DurationMs, final.Error))
			}
		}
		if id == "run-000007" {
			for _, st := range final.Steps {
				want["steps_of_run"] = append(want["steps_of_run"], row(st.StepID, string(st.Status), st.LogicalAttemptID, st.EngineAttemptID,
					st.DurationMs, st.Error, nullIfEmpty(st.SkipReason)))
			}
		}
		for _, v := range final.Violations {
			if tenant == "t1" && inWindow(v.PersistedAt) {
				want["violations_in_window"] = append(want["violations_in_window"], row(id, v.RunSeq, string(v.EventType), v.Entity, v.StepID, v.PriorState, v.AttemptedState))
			}
		}

		// Replay: what each event did.
		type failure struct {
			e       engine.RunEventRecord
			entity  string
			attempt int
			err     *engine.ErrorInfo
		}
		var failures []failure
		type attempt struct {
			startSeq int64
			row      string
		}
		var timeline []attempt
		startedAfter := map[string][]int64{} // step -> seqs of applied StepStarted
		before := engine.Project(id, nil)
		for _, e := range events {
			after := engine.Incremental(before, []engine.RunEventRecord{e})
			_, changes := engine.TargetOf(e.EventType)
			entity, applied, prior, stateAfter := any(nil), any(nil), any(nil), any(nil)
			redelivered := any(nil)
			isStep := e.EventType.StepLevel()
			violated := len(after.Violations) > len(before.Violations)
			if changes && (!isStep || e.StepID != "") {
				if isStep {
					entity = engine.EntityStep
					bst, ok := before.Step(e.StepID)
					if !ok {
						bst.Status = engine.StepStatusPending
					}
					ast, _ := after.Step(e.StepID)
					wasApplied := ast.LastEventSeq == e.RunSeq
					switch {
					case violated:
						redelivered, applied, prior, stateAfter = false, false, string(bst.Status), string(ast.Status)
					case wasApplied:
						redelivered, applied, prior, stateAfter = false, true, string(bst.Status), string(ast.Status)
						switch ast.Status {
						case engine.StepStatusRunning:
							startedAfter[e.StepID] = append(startedAfter[e.StepID], e.RunSeq)
						case engine.StepStatusSuccess, engine.StepStatusFailed:
							outcome := string(ast.Status)
							if e.TenantID == "t1" && inWindow(e.PersistedAt) {
								timeline = append(timeline, attempt{bst.LastEventSeq, row(id, e.StepID, ast.LogicalAttemptID, outcome, ast.StartedAt, ast.CompletedAt, ast.DurationMs)})
							}
							if e.TenantID == "t1" && ast.Status == engine.StepStatusSuccess {
								a := slow[e.StepID]
								if a == nil {
									a = &agg{}
									slow[e.StepID] = a
								}
								a.n++
								a.total += ast.DurationMs
								a.max = max(a.max, ast.DurationMs)
							}
							if ast.Status == engine.StepStatusFailed {
								failures = append(failures, failure{e, engine.EntityStep, ast.LogicalAttemptID, ast.Error})
							}
						}
					default:
						redelivered = true
					}
				} else {
					entity = engine.EntityRun
					switch {
					case violated:
						redelivered, applied, prior, stateAfter = false, false, string(before.Status), string(after.Status)
					case after.Status != before.Status:
						redelivered, applied, prior, stateAfter = false, true, string(before.Status), string(after.Status)
						if after.Status == engine.StatusFailed {
							failures = append(failures, failure{e, engine.EntityRun, e.LogicalAttemptID, after.Error})
						}
					default:
						redelivered = true
					}
				}
			}
			if id == "run-000007" {
				want["event_states_of_run"] = append(want["event_states_of_run"], row(e.RunSeq, string(e.EventType), nullIfEmpty(e.StepID), entity, redelivered, applied, prior, stateAfter))
			}
			before = after
		}
		sort.Slice(timeline, func(i, j int) bool { return timeline[i].startSeq < timeline[j].startSeq })
		for _, a := range timeline {
			want["step_timeline"] = append(want["step_timeline"], a.row)
		}
		for _, f := range failures {
			if f.e.TenantID != "t1" || !inWindow(f.e.PersistedAt) {
				continue
			}
			retried := false
			for _, seq := range startedAfter[f.e.StepID] {
				retried = retried || (f.entity == engine.EntityStep && seq > f.e.RunSeq)
			}
			var code, msg any
			if f.err != nil {
				code, msg = f.err.Code, f.err.Message
			}
			want["failures_in_window"] = append(want["failures_in_window"], row(id, f.e.RunSeq, f.entity, nullIfEmpty(f.e.StepID), f.attempt, code, msg, retried))
		}
	}
	statuses := make([]string, 0, len(statusCount))
	for st := range statusCount {
		statuses = append(statuses, string(st))
	}
	sort.Strings(statuses)
	for _, st := range statuses {
		c := statusCount[engine.RunStatus(st)]
		want["status_counts"] = append(want["status_counts"], row(st, c[0], c[1]))
	}
	steps := make([]string, 0, len(slow))
	for id := range slow {
		steps = append(steps, id)
	}
	sort.Slice(steps, func(i, j int) bool {
		a, b := slow[steps[i]], slow[steps[j]]
		if a.max != b.max {
			return a.max > b.max
		}
		return steps[i] < steps[j]
	})
	for _, id := range steps {
		a := slow[id]
		want["slowest_steps"] = append(want["slowest_steps"], row(id, a.n, a.max, a.total))
	}
	return want
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
