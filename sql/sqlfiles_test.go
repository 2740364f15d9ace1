package sqlfiles_test

import (
	"errors"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
)

// TestTransitionTableMatchesEngine keeps the dvt_transitions rows each
// dialect's migrations ship equal to engine.Transitions: the SQL projection
// reads that table, the Go reducer reads the Go one, and they must not drift.
func TestTransitionTableMatchesEngine(t *testing.T) {
	row := regexp.MustCompile(`\(\s*'([^']*)'\s*,\s*'([^']*)'\s*,\s*'([^']*)'\s*,\s*'([^']*)'\s*,\s*'([^']*)'\s*,\s*'([^']*)'\s*\)`)
	for _, dialect := range []string{sqlfiles.SQLite, sqlfiles.Snowflake, sqlfiles.Postgres} {
		t.Run(dialect, func(t *testing.T) {
			migs, err := sqlfiles.Migrations(dialect)
			if errors.Is(err, fs.ErrNotExist) {
				t.Skipf("no %s migrations yet", dialect)
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []engine.Transition
			for _, m := range migs {
				i := strings.Index(m.SQL, "INSERT INTO dvt_transitions")
				if i < 0 {
					continue
				}
				for _, r := range row.FindAllStringSubmatch(m.SQL[i:], -1) {
					got = append(got, engine.Transition{Entity: r[1], From: r[2], Event: engine.EventType(r[3]), To: r[4], RunStatus: r[5], Attempt: engine.AttemptRule(r[6])})
				}
			}
			if len(got) == 0 {
				t.Fatalf("no dvt_transitions rows in the %s migrations: every dialect must seed the transitions table", dialect)
			}
			want := map[engine.Transition]bool{}
			for _, tr := range engine.Transitions {
				want[tr] = true
			}
			seen := map[engine.Transition]bool{}
			for _, tr := range got {
				if !want[tr] {
					t.Errorf("%s ships a row engine.Transitions lacks: %+v", dialect, tr)
				}
				seen[tr] = true
			}
			for tr := range want {
				if !seen[tr] {
					t.Errorf("%s lacks a row of engine.Transitions: %+v", dialect, tr)
				}
			}
		})
	}
}

func TestQueriesParsesNamedStatements(t *testing.T) {
	migs, err := sqlfiles.Migrations(sqlfiles.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(migs); i++ {
		if migs[i].Version <= migs[i-1].Version {
			t.Fatalf("migrations out of order: %s after %s", migs[i].Name, migs[i-1].Name)
		}
	}
	if migs[0].Version != 1 || !strings.Contains(migs[0].SQL, "CREATE TABLE dvt_run_events") {
		t.Fatalf("first sqlite migration is %s", migs[0].Name)
	}
}

func TestQuery(t *testing.T) {
	for _, d := range []string{sqlfiles.SQLite, sqlfiles.Snowflake, sqlfiles.Postgres} {
		q, err := sqlfiles.Query(d, "snapshots.sql", "load_snapshot")
		if err != nil || !strings.Contains(q, "dvt_live_snapshots") {
			t.Errorf("%s: %q, %v", d, q, err)
		}
		if _, err := sqlfiles.Query(d, "snapshots.sql", "nope"); err == nil || !strings.Contains(err.Error(), "nope") {
			t.Errorf("%s: unknown query: %v", d, err)
		}
		if _, err := sqlfiles.Query(d, "missing.sql", "x"); err == nil {
			t.Errorf("%s: missing file gave no error", d)
		}
	}
}

// TestBackendObjectsDocumented: every table, view and function the
// migrations and the warehouses create is named in
// docs/reference/backend-objects.md, the list of what dvtrun leaves on a
// backend (issue 26): a new object without a line there fails here.
func TestBackendObjectsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/reference/backend-objects.md")
	if err != nil {
		t.Fatal(err)
	}
	created := regexp.MustCompile(`(?i)CREATE\s+(?:OR\s+REPLACE\s+)?(?:TABLE|VIEW|FUNCTION)\s+(?:IF\s+NOT\s+EXISTS\s+)?([a-z_][a-z0-9_]*)`)
	for _, dialect := range []string{sqlfiles.SQLite, sqlfiles.Snowflake, sqlfiles.Postgres} {
		migs, err := sqlfiles.Migrations(dialect)
		if err != nil {
			t.Fatal(err)
		}
		texts := []string{}
		for _, m := range migs {
			texts = append(texts, m.SQL)
		}
		for _, f := range []string{"warehouse.sql", "store.sql"} {
			text, err := sqlfiles.File(dialect, f)
			if err != nil {
				t.Fatal(err)
			}
			texts = append(texts, text)
		}
		for _, text := range texts {
			for _, m := range created.FindAllStringSubmatch(text, -1) {
				name := strings.ToLower(m[1])
				if strings.HasPrefix(name, "dvt_") && !strings.Contains(string(doc), "`"+name) {
					t.Errorf("%s creates %s, which docs/reference/backend-objects.md does not name", dialect, name)
				}
			}
		}
	}
}
