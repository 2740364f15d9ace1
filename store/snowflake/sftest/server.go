package sftest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/snowflakedb/gosnowflake"

	_ "github.com/duckdb/duckdb-go/v2" // registers the "duckdb" driver
)

// Options configures a Server.
type Options struct {
	// User and Password, when set, are required at login; otherwise any
	// non-empty password is accepted.
	User, Password string
	// Path is a DuckDB database file; empty means in-memory.
	Path string
	// LockTimeout is how long UPDATE/DELETE/MERGE wait for another
	// transaction's table lock when the session sets no LOCK_TIMEOUT
	// (seconds, 0 = do not wait). Default 5s, not Snowflake's 12 hours, so
	// that a test that forgets a transaction fails instead of hanging.
	LockTimeout time.Duration
	// Logf, when set, receives one line per login and per statement
	// (e.g. t.Logf).
	Logf func(format string, args ...any)
	// IdleTxAbort is how long a transaction that blocks another's lock wait
	// may run nothing before the server aborts and rolls it back, as
	// Snowflake does after 5 minutes ("If it blocks another transaction from
	// acquiring a lock on the same table and is idle for 5 minutes, it is
	// automatically aborted and rolled back", Transactions: Aborting
	// transactions), which frees the locks of a client that died mid
	// transaction. Default 5 minutes; tests shorten it.
	IdleTxAbort time.Duration
	// RTT delays every HTTP request by this much before it is served, as a
	// network round trip to a real account (100–400 ms) would. The wait ends
	// early if the client goes away.
	RTT time.Duration
}

// LoggedQuery is one executed statement, as QUERY_HISTORY would show it.
type LoggedQuery struct {
	QueryID       string
	ParentQueryID string // set for the statements of a multi-statement request
	SessionID     int64
	RequestID     string
	QueryTag      string
	SQLText       string
	Err           string // Snowflake error code, empty on success
}

// Server is a Snowflake-protocol server executing on embedded DuckDB.
type Server struct {
	opts  Options
	db    *sql.DB
	tmp   string
	locks *lockManager

	mu        sync.Mutex
	sessions  map[string]*session // by session token
	expired   map[string]*session // expired session tokens, until renewed
	masters   map[string]*session // by master token
	byID      map[int64]*session
	nextID    int64
	txSeq     atomic.Int64                  // the last transaction id given out
	running   map[string]context.CancelFunc // by requestId
	done      map[string]*dedupEntry        // by requestId
	doneLRU   []string
	results   map[string][]byte // child results of multi-statement requests, by query id
	resultLRU []string
	pending   map[string]chan struct{} // asynchronous requests still running, by query id
	log       []LoggedQuery

	answerHolds answerHolds // HoldAnswers

	queryRequests  atomic.Int64
	resultRequests atomic.Int64
	httpRequests   atomic.Int64

	ln   net.Listener
	http *http.Server
	addr string
}

// dedupEntry holds the response to a requestId once it is known.
type dedupEntry struct {
	ready chan struct{}
	body  []byte
}

const maxRemembered = 10000

// New opens a fresh DuckDB database for the server.
func New(opts Options) (*Server, error) {
	if opts.LockTimeout == 0 {
		opts.LockTimeout = 5 * time.Second
	}
	if opts.IdleTxAbort == 0 {
		opts.IdleTxAbort = 5 * time.Minute
	}
	db, err := sql.Open("duckdb", opts.Path)
	if err != nil {
		return nil, fmt.Errorf("open duckdb: %w", err)
	}
	s := &Server{
		opts:     opts,
		db:       db,
		locks:    newLockManager(opts.IdleTxAbort),
		sessions: map[string]*session{},
		expired:  map[string]*session{},
		masters:  map[string]*session{},
		byID:     map[int64]*session{},
		running:  map[string]context.CancelFunc{},
		done:     map[string]*dedupEntry{},
		results:  map[string][]byte{},
		pending:  map[string]chan struct{}{},
	}
	// Transaction ids look like Snowflake's (1661899308790000000 in the
	// CURRENT_TRANSACTION example: the start in ms times 10^6) and increase.
	s.txSeq.Store(time.Now().UnixMilli() * 1_000_000)
	return s, nil
}

// NewTemp is New with a DuckDB file in a fresh temporary directory, removed
// by Close.
func NewTemp(opts Options) (*Server, error) {
	dir, err := os.MkdirTemp("", "sftest-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	opts.Path = filepath.Join(dir, "sftest.duckdb")
	s, err := New(opts)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s.tmp = dir
	return s, nil
}

// Start listens on addr ("127.0.0.1:0" picks a port) and serves in the
// background.
func (s *Server) Start(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	s.ln = ln
	s.addr = ln.Addr().String()
	s.http = &http.Server{Handler: s.handler()}
	go func() { _ = s.http.Serve(ln) }()
	return nil
}

// Start starts a server on a loopback port for the test and closes it when
// the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with options (e.g. RTT).
func StartWith(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatalf("sftest: %v", err)
	}
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatalf("sftest: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("sftest close: %v", err)
		}
	})
	return s
}

// OpenDB opens database/sql on the server through gosnowflake; the handle
// is closed when the test ends.
func (s *Server) OpenDB(t testing.TB, database, schema string) *sql.DB {
	t.Helper()
	db := sql.OpenDB(gosnowflake.NewConnector(gosnowflake.SnowflakeDriver{}, *s.Config(database, schema)))
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.addr }

// Config returns a driver configuration pointing at the server over plain
// http. Telemetry the driver sends is accepted and dropped.
func (s *Server) Config(database, schema string) *gosnowflake.Config {
	host, port, _ := net.SplitHostPort(s.addr)
	p, _ := strconv.Atoi(port)
	user, pass := s.opts.User, s.opts.Password
	if user == "" {
		user = "sftest"
	}
	if pass == "" {
		pass = "sftest"
	}
	return &gosnowflake.Config{
		Account:   "sftest",
		User:      user,
		Password:  pass,
		Host:      host,
		Port:      p,
		Protocol:  "http",
		Database:  database,
		Schema:    schema,
		Warehouse: "SFTEST_WH",
		// One attempt per request: the driver's retries would hide errors.
		MaxRetryCount: 1,
	}
}

// DSN returns a gosnowflake DSN for Config(database, schema).
func (s *Server) DSN(database, schema string) string {
	dsn, err := gosnowflake.DSN(s.Config(database, schema))
	if err != nil {
		// Config always carries account, user and password.
		return "invalid-config: " + err.Error()
	}
	return dsn
}

// QueryRequests is the number of /queries/v1/query-request calls served.
func (s *Server) QueryRequests() int64 { return s.queryRequests.Load() }

// ResultRequests is the number of GET /queries/<id>/result calls served:
// the driver makes one per child of a multi-statement request it reads, so
// they are round trips too.
func (s *Server) ResultRequests() int64 { return s.resultRequests.Load() }

// Requests is the number of HTTP requests of any kind served (login,
// queries, result fetches, heartbeats, token renewals, telemetry…): every
// one is a network round trip for a client of a real account.
func (s *Server) Requests() int64 { return s.httpRequests.Load() }

// ResetCounters sets the request counters to zero.
func (s *Server) ResetCounters() {
	s.queryRequests.Store(0)
	s.resultRequests.Store(0)
	s.httpRequests.Store(0)
}

// QueryLog returns a copy of the statements executed so far (the most
// recent 25,000 to 50,000 once more have run).
func (s *Server) QueryLog() []LoggedQuery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]LoggedQuery(nil), s.log...)
}

// Close stops serving, closes every session and the database.
func (s *Server) Close() error {
	var errs []error
	s.releaseAnswers()
	if s.http != nil {
		errs = append(errs, s.http.Close())
	}
	s.mu.Lock()
	for _, c := range s.running {
		c()
	}
	sessions := make([]*session, 0, len(s.byID))
	for _, sess := range s.byID {
		sessions = append(sessions, sess)
	}
	s.byID = map[int64]*session{}
	s.mu.Unlock()
	for _, sess := range sessions {
		errs = append(errs, sess.conn.Close())
	}
	errs = append(errs, s.db.Close())
	if s.tmp != "" {
		errs = append(errs, os.RemoveAll(s.tmp))
	}
	return errors.Join(errs...)
}

func (s *Server) logf(format string, args ...any) {
	if s.opts.Logf != nil {
		s.opts.Logf(format, args...)
	}
}

func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /session/v1/login-request", s.handleLogin)
	mux.HandleFunc("POST /session/token-request", s.handleRenew)
	mux.HandleFunc("POST /session/heartbeat", s.handleHeartbeat)
	mux.HandleFunc("POST /session", s.handleSessionClose)
	mux.HandleFunc("POST /queries/v1/query-request", s.handleQuery)
	mux.HandleFunc("POST /queries/v1/abort-request", s.handleAbort)
	mux.HandleFunc("GET /queries/{id}/result", s.handleResult)
	mux.HandleFunc("POST /telemetry/send", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, okResponse(nil))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.httpRequests.Add(1)
		if s.opts.RTT > 0 {
			t := time.NewTimer(s.opts.RTT)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

// response is the envelope of every answer.
type response struct {
	Data    any    `json:"data"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	Success bool   `json:"success"`
}

func okResponse(data any) response { return response{Data: data, Success: true} }

func errResponse(e *sfError, queryID string) response {
	return response{
		Data:    map[string]any{"queryId": queryID, "sqlState": e.sqlState, "errorCode": e.code},
		Code:    e.code,
		Message: e.msg,
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeBody(w, b)
}

func writeBody(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// sessionFor finds the session of the request's "Snowflake Token": an
// expired token gets 390112, on which the driver renews it with the master
// token and retries.
func (s *Server) sessionFor(r *http.Request) (*session, *sfError) {
	tok := tokenOf(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess, ok := s.sessions[tok]; ok {
		return sess, nil
	}
	if _, ok := s.expired[tok]; ok {
		return nil, errTokenExpired
	}
	return nil, errNoSession
}

// ExpireTokens expires every session token now, as Snowflake does after
// validityInSeconds, so tests can exercise the driver's token renewal.
// Sessions, their transactions and master tokens stay valid.
func (s *Server) ExpireTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for tok, sess := range s.sessions {
		s.expired[tok] = sess
		delete(s.sessions, tok)
	}
}

func tokenOf(r *http.Request) string {
	h := r.Header.Get("Authorization")
	h = strings.TrimPrefix(h, "Snowflake Token=")
	return strings.Trim(h, `"`)
}

func newQueryID() string { return uuid.NewString() }

var errTokenExpired = newSFError(codeSessionExpiredRC, "08001", "Session token expired.")

var errNoSession = newSFError(CodeSessionGone, "08001", "Session no longer exists.  New login required to access the service.")
