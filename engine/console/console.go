// Package console is dvtrun's operator console: read-only HTML pages over
// the same history layer the CLI reads (store.ListRuns, the run log, the
// reducer and live snapshots, engine/stepview, verify), rendered on the
// server with html/template. It needs no JavaScript but for live updates
// (Server-Sent Events and one small embedded script that swaps the parts
// of a run page that changed).
//
// Paths: /runs, /runs/{runId}, /runs/{runId}/steps/{stepId},
// /runs/{runId}/events (an EventSource asking for text/event-stream gets
// the live stream there), /schedules, /queue, /workers, /outbox; / redirects
// to /runs.
package console

import (
	"context"
	"crypto/subtle"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/delivery"
	"github.com/dvtrun/dvtrun/engine/queue"
	"github.com/dvtrun/dvtrun/store"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// History is what the console reads of the state store: the same calls
// the CLI's read commands make.
type History interface {
	GetRun(ctx context.Context, runID string) (engine.RunMetadata, error)
	ListRuns(ctx context.Context, f store.RunFilter) ([]store.RunSummary, error)
	ListEvents(ctx context.Context, runID string, afterSeq int64, limit int) ([]engine.RunEventRecord, error)
	ListStepEvents(ctx context.Context, runID, stepID string) ([]engine.RunEventRecord, error)
	ListSignals(ctx context.Context, runID string, afterSeq int64) ([]engine.Signal, error)
	// LoadSnapshot is the live projection's stored state (store.SnapshotStore):
	// a run page reduces only the events after it.
	LoadSnapshot(ctx context.Context, runID string) ([]byte, int64, error)
}

// Projector computes a run's snapshot in SQL (the store's projection), for
// the integrity badge: SQL projection == Go reducer.
type Projector interface {
	ProjectSQL(ctx context.Context, runID string) (engine.Snapshot, error)
}

// Requests lists the run queue (queue.Store).
type Requests interface {
	ListRequests(ctx context.Context, all bool) ([]queue.Request, error)
}

// Workers lists the workers' heartbeats (queue.Store).
type Workers interface {
	ListWorkers(ctx context.Context) ([]queue.Worker, error)
}

// Deliveries lists the outbox (delivery.Store).
type Deliveries interface {
	ListDeliveries(ctx context.Context, f delivery.Filter) ([]delivery.Delivery, error)
}

// Leases reads a run's lease (store.LeaseReader).
type Leases interface {
	GetLease(ctx context.Context, runID string) (store.Lease, bool, error)
}

// GraphNode is a plan step and the steps it depends on.
type GraphNode struct {
	ID        string
	Kind      string
	DependsOn []string
}

// Schedule is a row of the schedules page (and of `dvtrun schedule
// list --json`): a schedule, its next ticks and what its cursor recorded.
type Schedule struct {
	Name          string      `json:"name"`
	Cron          string      `json:"cron"`
	Timezone      string      `json:"timezone"`
	Overlap       string      `json:"overlap"`
	NextTicks     []time.Time `json:"nextTicks"`
	LastTick      time.Time   `json:"lastTick,omitzero"`
	LastRequestID string      `json:"lastRequestId,omitempty"`
	LastState     string      `json:"lastState,omitempty"`
	Fired         int64       `json:"fired"`
	Missed        int64       `json:"missed"`
	Skipped       int64       `json:"skipped"`
}

// Auth is the console's optional authentication. Both empty: none (the
// console listens on loopback unless told otherwise). The values are
// secrets: the console compares them and never shows them.
type Auth struct {
	BearerToken string // "Authorization: Bearer TOKEN"
	BasicUser   string // HTTP basic auth, what browsers prompt for
	BasicPass   string
}

// Config wires the console. History and Clock are required; every other
// source is optional, and a page whose source is missing says so.
type Config struct {
	History History
	Clock   engine.Clock
	// Scope is the tenant/project/environment shown: runs of another scope
	// are not found, as in the CLI.
	TenantID, ProjectID, EnvironmentID string

	Projector  Projector
	Ledger     engine.Ledger // the warehouse's step ledger, for step pages
	Requests   Requests
	Workers    Workers
	Deliveries Deliveries
	Leases     Leases
	// PlanGraph returns the steps of the plan bundle with this sha256, for
	// the DAG (ok false when the store does not hold the bundle).
	PlanGraph func(ctx context.Context, sha256 string) (nodes []GraphNode, ok bool, err error)
	Schedules func(ctx context.Context) ([]Schedule, error)

	Auth Auth
	// Poll is how often a live stream reads the log for new events
	// (default 500ms); StreamFor bounds one stream, after which the
	// browser reconnects and resumes by Last-Event-ID (default 10m).
	Poll, StreamFor time.Duration
	// VerifyMaxEvents: a run with more events is verified on request only
	// (?verify=1), so that its page stays fast (default 5000).
	VerifyMaxEvents int64
	// MaxStreams bounds the live streams open at once (each holds a
	// connection and polls the store); past it a stream is refused with
	// 503 and Retry-After (default DefaultMaxStreams).
	MaxStreams int
	// Hosts are the names (besides localhost and IP literals) the console
	// answers to when it has no authentication: a request naming any other
	// Host is refused, so that a web page whose DNS name is rebound to this
	// machine cannot read the console through the visitor's browser.
	Hosts []string
	Log   *slog.Logger
}

// DefaultMaxStreams is Config.MaxStreams' default.
const DefaultMaxStreams = 64

// Server serves the console.
type Server struct {
	target  string       // the config target shown ("": the console shows one)
	targets []TargetLink // the target selector (nil: none)
	cfg     Config
	tmpl    map[string]*template.Template
	mux     *http.ServeMux
	streams atomic.Int64 // live streams open
}

// New builds the console's handler.
func New(cfg Config) (*Server, error) {
	if cfg.History == nil || cfg.Clock == nil {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "the console needs a history and a clock")
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 500 * time.Millisecond
	}
	if cfg.StreamFor <= 0 {
		cfg.StreamFor = 10 * time.Minute
	}
	if cfg.VerifyMaxEvents <= 0 {
		cfg.VerifyMaxEvents = 5000
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, tmpl: map[string]*template.Template{}, mux: http.NewServeMux()}
	pages := []string{"runs", "run", "step", "events", "schedules", "queue", "workers", "outbox", "error"}
	for _, p := range pages {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", p, err)
		}
		s.tmpl[p] = t
	}
	static, _ := fs.Sub(staticFS, "static")
	s.mux.Handle("GET /static/{file}", http.StripPrefix("/static/", staticHandler(static)))
	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/runs", http.StatusSeeOther)
	})
	s.mux.HandleFunc("GET /runs", s.handle(s.runs))
	s.mux.HandleFunc("GET /runs/{runId}", s.handle(s.run))
	s.mux.HandleFunc("GET /runs/{runId}/steps/{stepId}", s.handle(s.step))
	s.mux.HandleFunc("GET /runs/{runId}/events", s.events)
	s.mux.HandleFunc("GET /schedules", s.handle(s.schedules))
	s.mux.HandleFunc("GET /queue", s.handle(s.queue))
	s.mux.HandleFunc("GET /workers", s.handle(s.workers))
	s.mux.HandleFunc("GET /outbox", s.handle(s.outbox))
	return s, nil
}

// staticHandler serves the embedded CSS and script; they change only with
// the binary, so a browser may keep them for a while. Files only: a
// directory is not found, never listed.
func staticHandler(files fs.FS) http.Handler {
	h := http.FileServerFS(files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if st, err := fs.Stat(files, strings.TrimPrefix(r.URL.Path, "/")); err != nil || st.IsDir() {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=300")
		h.ServeHTTP(w, r)
	})
}

// maxQuery bounds a request's query string: filters are short, and a huge
// one is refused before it reaches the store.
const maxQuery = 4096

// ServeHTTP checks authentication, refuses writes (the console is
// read-only) and oversized queries, then serves the page.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.gate(w, r) {
		s.mux.ServeHTTP(w, r)
	}
}

// gate sets the security headers and refuses (answering the request) what
// no page serves: a foreign Host without authentication, missing
// credentials, a write, an oversized query. true: serve it.
func (s *Server) gate(w http.ResponseWriter, r *http.Request) bool {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	// Pages show run history that changes and may be private: no cache
	// keeps them (static files set their own).
	h.Set("Cache-Control", "no-store")
	if !s.hostAllowed(r.Host) {
		h.Set("Connection", "close")
		s.fail(w, r, http.StatusMisdirectedRequest, fmt.Sprintf("This console has no authentication, so it answers only to localhost, an IP address or the names it was given (console.hosts, --ui-hosts); the request named host %s.", engine.QuoteText(r.Host)))
		return false
	}
	if !s.authorized(r) {
		h.Set("Connection", "close") // a refused client does not keep the connection
		if s.cfg.Auth.BasicUser != "" {
			h.Set("WWW-Authenticate", `Basic realm="dvtrun console", charset="UTF-8"`)
		} else {
			h.Set("WWW-Authenticate", `Bearer realm="dvtrun console"`)
		}
		s.fail(w, r, http.StatusUnauthorized, "Sign in to see the console: it is served with authentication.")
		return false
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		s.fail(w, r, http.StatusMethodNotAllowed, "The console is read-only: it answers GET and HEAD only.")
		return false
	}
	if len(r.URL.RawQuery) > maxQuery {
		s.fail(w, r, http.StatusRequestURITooLong, fmt.Sprintf("The query string is %d bytes; the console accepts at most %d.", len(r.URL.RawQuery), maxQuery))
		return false
	}
	return true
}

// hostAllowed reports whether a request's Host may be served: any, with
// authentication (a rebound page does not have the credentials); without,
// localhost, an IP literal (what a listen address is; no DNS rebinding
// goes through one) or a configured name.
func (s *Server) hostAllowed(hostport string) bool {
	if s.cfg.Auth.BearerToken != "" || s.cfg.Auth.BasicUser != "" {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	for _, n := range s.cfg.Hosts {
		if strings.EqualFold(strings.TrimSuffix(n, "."), host) {
			return true
		}
	}
	return false
}

// authorized reports whether r carries the configured credentials (any
// request, when none are configured). Comparisons take constant time.
func (s *Server) authorized(r *http.Request) bool {
	a := s.cfg.Auth
	if a.BearerToken == "" && a.BasicUser == "" {
		return true
	}
	if a.BearerToken != "" {
		if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok &&
			subtle.ConstantTimeCompare([]byte(tok), []byte(a.BearerToken)) == 1 {
			return true
		}
	}
	if a.BasicUser != "" {
		if u, p, ok := r.BasicAuth(); ok {
			uok := subtle.ConstantTimeCompare([]byte(u), []byte(a.BasicUser))
			pok := subtle.ConstantTimeCompare([]byte(p), []byte(a.BasicPass))
			return uok&pok == 1
		}
	}
	return false
}

// page is what a handler returns: the template to render and its data.
type page struct {
	name  string
	title string
	nav   string // the nav entry to mark as current
	data  any
}

// handle renders a handler's page, or its error as a page with the status
// the error's code maps to.
func (s *Server) handle(fn func(*http.Request) (page, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := fn(r)
		if err != nil {
			s.failErr(w, r, err)
			return
		}
		s.render(w, r, http.StatusOK, p)
	}
}

// layoutData is what layout.html reads.
type layoutData struct {
	Title   string
	Nav     string
	Scope   string
	Target  string
	Targets []TargetLink
	Page    any
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, p page) {
	t := s.tmpl[p.name]
	var b strings.Builder
	err := t.Execute(&b, layoutData{Title: p.title, Nav: p.nav, Scope: s.cfg.TenantID + "/" + s.cfg.ProjectID + "/" + s.cfg.EnvironmentID,
		Target: s.target, Targets: s.targets, Page: p.data})
	if err != nil {
		s.cfg.Log.Error("console page failed", "page", p.name, "error", err.Error())
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write([]byte(b.String()))
	}
}

// errorPage is error.html's data.
type errorPage struct {
	Status  int
	Text    string
	Message string
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	s.render(w, r, status, page{name: "error", title: http.StatusText(status), data: errorPage{status, http.StatusText(status), msg}})
}

// failErr maps an error's contract code to a status: a run or step that
// does not exist is 404, bad input 400, and only the store's own failures
// are 5xx.
func (s *Server) failErr(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	switch engine.CodeOf(err) {
	case engine.CodeRunNotFound:
		status = http.StatusNotFound
	case engine.CodeInvalidArgument:
		status = http.StatusBadRequest
	case engine.CodeStoreUnavailable:
		status = http.StatusServiceUnavailable
	}
	var nf notFound
	if errors.As(err, &nf) {
		status = http.StatusNotFound
	}
	if status >= 500 {
		s.cfg.Log.Error("console request failed", "path", r.URL.Path, "error", err.Error())
	}
	s.fail(w, r, status, err.Error())
}

// notFound is a page about something that does not exist (a step of a run).
type notFound struct{ error }

func (e notFound) Unwrap() error { return e.error }
