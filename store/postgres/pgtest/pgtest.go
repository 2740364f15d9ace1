// Package pgtest starts a real Postgres for tests: the server from the OS
// packages (/usr/lib/postgresql/<version>/bin), initdb in a temporary
// directory, run as an unprivileged user (Postgres refuses root), listening
// on a Unix socket in that directory only, with fsync off. One server per
// test binary (started on first use); each caller gets a database of its
// own. Where the server cannot start, a test skips with the reason, except
// under CI=true, where it fails: CI must never pass by skipping.
package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// StartTimeout bounds the wait for a started server to accept connections.
const StartTimeout = 30 * time.Second

// Server is a running test server.
type Server struct {
	Dir    string // the temporary directory: data/, the socket, server.log
	Port   int
	cmd    *exec.Cmd
	exited chan error // receives the server's exit
	dbs    atomic.Int64
}

var (
	once    sync.Once
	srv     *Server
	srvErr  error
	stopped atomic.Bool
)

// Main runs a package's tests and then stops the server, if one started:
// call it from TestMain so that no server outlives its test binary.
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// Stop ends the server (fast shutdown, bounded) and removes its directory.
func Stop() {
	if srv == nil || !stopped.CompareAndSwap(false, true) {
		return
	}
	srv.stop()
}

// Get returns the package's server, starting it on first use; a test that
// cannot have one skips (fails under CI=true) with the reason.
func Get(t testing.TB) *Server {
	t.Helper()
	once.Do(func() { srv, srvErr = start() })
	if srvErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pgtest: cannot start Postgres (CI=true, so this fails instead of skipping): %v", srvErr)
		}
		t.Skipf("pgtest: no Postgres for this test: %v", srvErr)
	}
	return srv
}

// DSN returns a key=value DSN of a new, empty database of the package's
// server, dropped when t ends.
func DSN(t testing.TB) string {
	t.Helper()
	s := Get(t)
	name := fmt.Sprintf("t%d_%d", os.Getpid(), s.dbs.Add(1))
	if err := s.exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = s.exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)") })
	return s.KeyValueDSN(name)
}

// URL returns a postgres:// URL of a new, empty database, as a user would
// pass it to --store.
func URL(t testing.TB) string {
	t.Helper()
	kv := DSN(t)
	name := kv[strings.LastIndex(kv, "dbname=")+len("dbname="):]
	return srv.URL(name)
}

// KeyValueDSN is the libpq key=value DSN of database name.
func (s *Server) KeyValueDSN(name string) string {
	return fmt.Sprintf("host=%s port=%d user=dvt sslmode=disable dbname=%s", s.Dir, s.Port, name)
}

// URL is the libpq URL of database name (the socket directory as the host
// parameter).
func (s *Server) URL(name string) string {
	return fmt.Sprintf("postgres://dvt@/%s?host=%s&port=%d&sslmode=disable", name, s.Dir, s.Port)
}

// exec runs an administrative statement on the postgres database.
func (s *Server) exec(stmt string) error {
	db, err := sql.Open("pgx", s.KeyValueDSN("postgres"))
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if _, err := db.ExecContext(ctx, stmt); err != nil {
		return fmt.Errorf("%s: %w", stmt, err)
	}
	return nil
}

// binDir is the newest installed server's bin directory.
func binDir() (string, error) {
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(found) == 0 {
		return "", errors.New("no /usr/lib/postgresql/*/bin/initdb (apt-get install postgresql)")
	}
	sort.Slice(found, func(i, j int) bool { return version(found[i]) < version(found[j]) })
	return filepath.Dir(found[len(found)-1]), nil
}

func version(initdb string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return v
}

// credential is who runs the server: the postgres OS user when the tests
// run as root (initdb and postgres refuse root), otherwise the caller.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("tests run as root and there is no postgres OS user to run the server as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func start() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "dvtrun-pg-")
	if err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	s := &Server{Dir: dir, Port: 5432} // the socket is private to dir: no port clash
	command := func(name string, args ...string) *exec.Cmd {
		c := exec.Command(filepath.Join(bin, name), args...)
		c.Dir = dir
		c.Env = []string{"LC_ALL=C", "PATH=/usr/bin:/bin"}
		c.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGTERM}
		return c
	}
	data := filepath.Join(dir, "data")
	if out, err := command("initdb", "-D", data, "-U", "dvt", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close()
	s.cmd = command("postgres", "-D", data, "-k", dir, "-c", "listen_addresses=",
		"-c", "port="+strconv.Itoa(s.Port), "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=400", "-c", "shared_buffers=32MB")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	s.exited = make(chan error, 1)
	go func() { s.exited <- s.cmd.Wait() }()
	deadline := time.Now().Add(StartTimeout)
	for {
		err := s.exec("SELECT 1")
		if err == nil {
			return s, nil
		}
		select {
		case werr := <-s.exited:
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			os.RemoveAll(dir)
			return nil, fmt.Errorf("postgres exited (%v): %s", werr, log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			s.stop()
			return nil, fmt.Errorf("postgres did not accept connections within %s (last: %v): %s", StartTimeout, err, log)
		}
	}
}

// stop sends SIGINT (fast shutdown) and waits up to 10 s before killing.
func (s *Server) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	}
	os.RemoveAll(s.Dir)
}
