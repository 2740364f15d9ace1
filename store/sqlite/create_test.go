package sqlite_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

// TestOpenWhatIsThere: whatever is found at the store's path, readers
// (MustExist) and writers treat it alike: a database without any table
// (a store whose creation never finished, as an older dvtrun left it on a
// full disk) is completed by both; a database of someone else's, or a file
// that is no database, is refused by both.
func TestOpenWhatIsThere(t *testing.T) {
	exec := func(stmts ...string) func(t *testing.T, path string) {
		return func(t *testing.T, path string) {
			db, err := sql.Open("sqlite", "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			for _, s := range stmts {
				if _, err := db.Exec(s); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	tests := []struct {
		name string
		make func(t *testing.T, path string)
		code engine.Code // "": opens as an empty store
	}{
		{"empty file", func(t *testing.T, path string) { os.WriteFile(path, nil, 0o644) }, ""},
		{"header only (WAL set, no table)", exec("PRAGMA journal_mode=WAL"), ""},
		// Store and warehouse may be one file, and the warehouse may open it first.
		{"the warehouse's tables only", exec("CREATE TABLE dvt_step_ledger (a)", "CREATE TABLE dvt_run_fences (a)"), ""},
		{"someone else's database", exec("CREATE TABLE mine (a)"), engine.CodeStoreCorrupt},
		{"not a database", func(t *testing.T, path string) {
			os.WriteFile(path, []byte(strings.Repeat("not SQLite\n", 500)), 0o644)
		}, engine.CodeStoreCorrupt},
	}
	for _, tt := range tests {
		for _, mustExist := range []bool{true, false} {
			name := tt.name + map[bool]string{true: "/reader", false: "/writer"}[mustExist]
			t.Run(name, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "state.db")
				tt.make(t, path)
				st, err := sqlite.Open(context.Background(), path, sqlite.Options{MustExist: mustExist})
				if tt.code != "" {
					if err == nil {
						st.Close()
						t.Fatalf("opened, want %s", tt.code)
					}
					if engine.CodeOf(err) != tt.code {
						t.Fatalf("got %v, want %s", err, tt.code)
					}
					return
				}
				if err != nil {
					t.Fatalf("got %v, want the store completed", err)
				}
				defer st.Close()
				runs, err := st.ListRuns(context.Background(), store.RunFilter{})
				if err != nil || len(runs) != 0 {
					t.Fatalf("runs %v, %v: want none", runs, err)
				}
			})
		}
	}
}

// TestCreateLeavesNoTemporaryFile: a new store is made beside its path and
// linked into place; what remains is the store alone.
func TestCreateLeavesNoTemporaryFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sub")
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "state.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "state.db") || strings.Contains(e.Name(), "creating") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// TestCreateRemovesAbandonedTemporaryFiles: the temporary file of a
// creation a SIGKILL interrupted is removed by the next creation once it is
// old enough to be nobody's; a recent one (a creator at work) is kept.
func TestCreateRemovesAbandonedTemporaryFiles(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, ".state.db.creating-111")
	recent := filepath.Join(dir, ".state.db.creating-222")
	other := filepath.Join(dir, ".other.db.creating-333")
	for _, p := range []string{old, recent, other} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hourAgo := time.Now().Add(-time.Hour)
	for _, p := range []string{old, other} {
		if err := os.Chtimes(p, hourAgo, hourAgo); err != nil {
			t.Fatal(err)
		}
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "state.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	for p, want := range map[string]bool{old: false, recent: true, other: true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", filepath.Base(p), err == nil, want)
		}
	}
}

// TestStoreLockWait: a write waits for another process's write lock at
// most the lock-wait budget, reporting the state store it waits for, then
// fails STORE_UNAVAILABLE, transient (the store is busy, not broken); an
// open that has nothing to migrate does not wait at all.
func TestStoreLockWait(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	holder, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	conn, err := holder.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, "ROLLBACK") //nolint:errcheck
	const budget = 1500 * time.Millisecond
	var reports []engine.LockWait
	start := time.Now()
	st, err = sqlite.Open(ctx, path, sqlite.Options{LockWait: budget, OnWait: func(w engine.LockWait) { reports = append(reports, w) }})
	if err != nil {
		t.Fatalf("open while another process writes: %v", err)
	}
	defer st.Close()
	if took := time.Since(start); took > budget/2 {
		t.Errorf("open waited %s for a lock it does not need", took)
	}
	start = time.Now()
	err = st.AcquireLease(ctx, "r1", "me", time.Minute)
	took := time.Since(start)
	if engine.CodeOf(err) != engine.CodeStoreUnavailable || !engine.IsTransient(err) || !strings.Contains(err.Error(), "state store "+path) || !strings.Contains(err.Error(), "not released within 1.5s") {
		t.Fatalf("got %v, want a transient STORE_UNAVAILABLE naming the store and the budget", err)
	}
	if took < budget || took > budget+time.Second {
		t.Errorf("gave up after %s, want the budget %s (+ at most 1s)", took, budget)
	}
	if len(reports) == 0 || !strings.Contains(reports[0].String(), "state store "+path) {
		t.Errorf("progress reports %v: want some naming the state store", reports)
	}
}
