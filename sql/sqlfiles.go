// Package sqlfiles embeds dvtrun's SQL: one migration sequence per dialect
// (sqlite, snowflake, postgres), projection queries and audit views. Go code never
// assembles SQL from user input; it loads the statements from here.
package sqlfiles

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
)

//go:embed sqlite snowflake postgres
var files embed.FS

// Dialects with a migration sequence.
const (
	SQLite    = "sqlite"
	Snowflake = "snowflake"
	Postgres  = "postgres"
)

// Migration is one numbered file of a dialect's sequence.
type Migration struct {
	Version int
	Name    string // file name without extension
	SQL     string
}

// Migrations returns the dialect's migrations in version order. File names
// are NNNN_name.sql; numbers must be unique (gaps are allowed so that
// independent areas can own their own ranges).
func Migrations(dialect string) ([]Migration, error) {
	dir := path.Join(dialect, "migrations")
	entries, err := fs.ReadDir(files, dir)
	if err != nil {
		return nil, fmt.Errorf("sqlfiles: no migrations for dialect %q: %w", dialect, err)
	}
	var out []Migration
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".sql")
		if e.IsDir() || name == e.Name() {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("sqlfiles: migration %s/%s: name must start with a number and '_'", dir, e.Name())
		}
		b, err := fs.ReadFile(files, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		text, err := expandIncludes(dialect, string(b))
		if err != nil {
			return nil, fmt.Errorf("sqlfiles: migration %s/%s: %w", dir, e.Name(), err)
		}
		out = append(out, Migration{Version: v, Name: name, SQL: text})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("sqlfiles: %s migrations %s and %s share a version", dialect, out[i-1].Name, out[i].Name)
		}
	}
	return out, nil
}

// includeRE marks where a migration includes a named query of its
// dialect: /*include FILE NAME*/.
var includeRE = regexp.MustCompile(`/\*include (\S+) (\S+)\*/`)

// expandIncludes replaces each /*include FILE NAME*/ of a migration with
// the query NAME of dialect/FILE, so that SQL a migration shares with a
// query file (a view over the projection's CTEs) is written once. An
// included query may include others (the audit views include the
// projection's CTEs), at most maxIncludeDepth deep, which also ends a cycle.
func expandIncludes(dialect, text string) (string, error) {
	return expandIncludesDepth(dialect, text, 0)
}

const maxIncludeDepth = 4

func expandIncludesDepth(dialect, text string, depth int) (string, error) {
	if depth > maxIncludeDepth {
		return "", fmt.Errorf("includes nest deeper than %d (a cycle?)", maxIncludeDepth)
	}
	var err error
	out := includeRE.ReplaceAllStringFunc(text, func(m string) string {
		sub := includeRE.FindStringSubmatch(m)
		q, qerr := Query(dialect, sub[1], sub[2])
		if qerr == nil {
			q, qerr = expandIncludesDepth(dialect, q, depth+1)
		}
		if qerr != nil && err == nil {
			err = qerr
		}
		return strings.TrimSuffix(q, ";")
	})
	return out, err
}

// Projection is the SQL projection of a dialect's projection.sql in its
// two scopes, and the statement listing every event for the Go reducer.
type Projection struct{ Run, All, Events string }

// ProjectionOf composes dialect's projection: WITH RECURSIVE, the CTEs the
// audit view dvt_event_states includes too (`states`, reading
// dvt_run_events /*scope*/), then the snapshot query (`project`). Over one
// run the /*scope*/ comment becomes scope_run, fixed text from the same
// file; over every run it stays a comment.
func ProjectionOf(dialect string) (Projection, error) {
	q, err := Queries(dialect, "projection.sql")
	if err != nil {
		return Projection{}, err
	}
	states, project := q["states"], q["project"]
	if !strings.Contains(states, "/*scope*/") || project == "" || q["scope_run"] == "" || q["list_all_events"] == "" {
		return Projection{}, fmt.Errorf("sqlfiles: %s/projection.sql lacks states (with its /*scope*/), project, scope_run or list_all_events", dialect)
	}
	all := "WITH RECURSIVE\n" + states + ",\n" + project
	return Projection{
		Run:    strings.Replace(all, "/*scope*/", q["scope_run"], 1),
		All:    all,
		Events: q["list_all_events"],
	}, nil
}

// File returns the text of dialect/name, e.g. File("sqlite", "projection.sql").
func File(dialect, name string) (string, error) {
	b, err := fs.ReadFile(files, path.Join(dialect, name))
	if err != nil {
		return "", fmt.Errorf("sqlfiles: %w", err)
	}
	return string(b), nil
}

// Queries parses a file of named statements, each introduced by a line
// "-- name: <name>" (the convention of yesql and sqlc), and returns them by
// name. Text before the first marker is a comment and is dropped.
func Queries(dialect, name string) (map[string]string, error) {
	text, err := File(dialect, name)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string)
	var cur string
	var b strings.Builder
	flush := func() error {
		if cur == "" {
			return nil
		}
		q := strings.TrimSpace(b.String())
		if q == "" {
			return fmt.Errorf("sqlfiles: %s/%s: query %q is empty", dialect, name, cur)
		}
		if _, dup := out[cur]; dup {
			return fmt.Errorf("sqlfiles: %s/%s: query %q defined twice", dialect, name, cur)
		}
		out[cur] = q
		return nil
	}
	for _, line := range strings.Split(text, "\n") {
		if n, ok := strings.CutPrefix(strings.TrimSpace(line), "-- name:"); ok {
			if err := flush(); err != nil {
				return nil, err
			}
			cur = strings.TrimSpace(n)
			b.Reset()
			continue
		}
		if cur != "" {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

var (
	parsedMu sync.Mutex
	parsed   = map[string]map[string]string{}
)

// Query returns the statement named name in the file dialect/file,
// parsing each file once per process.
func Query(dialect, file, name string) (string, error) {
	parsedMu.Lock()
	defer parsedMu.Unlock()
	key := path.Join(dialect, file)
	qs, ok := parsed[key]
	if !ok {
		var err error
		if qs, err = Queries(dialect, file); err != nil {
			return "", err
		}
		parsed[key] = qs
	}
	q, ok := qs[name]
	if !ok {
		return "", fmt.Errorf("sqlfiles: %s has no query %q", key, name)
	}
	return q, nil
}
