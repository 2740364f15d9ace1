package sqlite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/jmoiron/sqlx"
	msqlite "modernc.org/sqlite"

	"github.com/dvtrun/dvtrun/engine"
	sqlfiles "github.com/dvtrun/dvtrun/sql"
)

// create makes a new state store at path atomically: it is created and
// migrated in a temporary file beside path, synced, and hard-linked into
// place, which fails rather than replace a store another process linked
// first (then that one is used). A creation that fails (a full disk, a
// file size limit, a kill) leaves nothing at path, so no command ever
// sees a half-made store; its temporary file is removed when it can be.
func create(ctx context.Context, path string, now func() time.Time) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return engine.Errorf(engine.CodeStoreUnavailable, "cannot create the state store directory %s: %v", dir, pathErr(err))
	}
	removeAbandoned(dir, filepath.Base(path), now())
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".creating-*")
	if err != nil {
		return engine.Errorf(engine.CodeStoreUnavailable, "cannot create the state store %s: %v", path, pathErr(err))
	}
	tmp := f.Name()
	f.Close()
	defer func() {
		for _, p := range []string{tmp, tmp + "-journal"} {
			os.Remove(p)
		}
	}()
	if err := initStore(ctx, tmp, now); err != nil {
		var se *msqlite.Error
		if engine.CodeOf(err) == engine.CodeStoreUnavailable && errors.As(err, &se) {
			// The driver's error says what went wrong; the temporary
			// file's name would only confuse.
			return &engine.Error{Code: engine.CodeStoreUnavailable, Msg: fmt.Sprintf("cannot create the state store %s (is its disk full?): %v", path, se), Err: err}
		}
		return err
	}
	if err := syncFile(tmp); err != nil {
		return engine.Errorf(engine.CodeStoreUnavailable, "cannot create the state store %s: %v", path, pathErr(err))
	}
	switch err := os.Link(tmp, path); {
	case err == nil, errors.Is(err, fs.ErrExist):
	default:
		// No hard links here (some network and FUSE file systems): a
		// rename is as atomic, but would replace a store made meanwhile.
		if _, serr := os.Stat(path); serr == nil {
			break
		}
		if err := os.Rename(tmp, path); err != nil {
			return engine.Errorf(engine.CodeStoreUnavailable, "cannot create the state store %s: %v", path, pathErr(err))
		}
	}
	syncFile(dir) //nolint:errcheck // best effort: the link is in place either way
	return nil
}

// abandonedAfter is the age past which a temporary file of create is
// taken for one a killed process left: a creation takes well under a
// second, so no live creator's file is this old.
const abandonedAfter = 10 * time.Minute

// removeAbandoned removes the temporary files of creations that a killed
// process left beside the store (a SIGKILL skips create's clean-up), so
// they do not pile up in the directory. Best effort: a file it cannot
// remove is left for the next time.
func removeAbandoned(dir, base string, now time.Time) {
	matches, err := filepath.Glob(filepath.Join(dir, "."+base+".creating-*"))
	if err != nil {
		return
	}
	for _, m := range matches {
		if fi, err := os.Stat(m); err == nil && now.Sub(fi.ModTime()) > abandonedAfter {
			os.Remove(m)
		}
	}
}

// initStore migrates the new database at path in rollback-journal mode,
// so that once it is closed the whole store is in that one file (a WAL
// would hold part of it in another); Open turns WAL on.
func initStore(ctx context.Context, path string, now func() time.Time) error {
	q, err := sqlfiles.Queries(sqlfiles.SQLite, "store.sql")
	if err != nil {
		return err
	}
	db, err := sqlx.Open("sqlite", "file:"+path+"?mode=rw&_pragma=journal_mode(DELETE)&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		return classify(path, err)
	}
	s := &Store{db: db, path: path, opts: Options{Now: now}, q: q, lock: newLockWaiter("state store "+path, 0, nil, nil)}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return err
	}
	return classify(path, db.Close())
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
