package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/config"
	webui "github.com/dvtrun/dvtrun/engine/console"
	"github.com/dvtrun/dvtrun/engine/delivery"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// uiFlags are the console's flags, on `ui` and (but --listen) on the daemons.
type uiFlags struct {
	tokenEnv, basicEnv string
	poll               time.Duration
	hosts              string
	maxStreams         int
}

func (u *uiFlags) register(fsReg *flag.FlagSet) {
	fsReg.StringVar(&u.tokenEnv, "ui-token-env", "", "require a bearer token, read from environment variable `NAME` (overrides the config's console.tokenEnv)")
	fsReg.StringVar(&u.basicEnv, "ui-basic-auth-env", "", "require HTTP basic auth USER:PASSWORD, read from environment variable `NAME` (overrides console.basicAuthEnv)")
	fsReg.DurationVar(&u.poll, "ui-poll", time.Second, "how often a live run page reads the log for new events")
	fsReg.StringVar(&u.hosts, "ui-hosts", "", "without authentication, also answer requests for these host `NAMES` (comma-separated; adds to console.hosts). Others are refused (DNS rebinding)")
	fsReg.IntVar(&u.maxStreams, "ui-max-streams", 0, "serve at most `N` live run streams at once; past it 503 with Retry-After (default console.maxStreams, else 64)")
}

// check refuses the console flags' bad values.
func (u uiFlags) check() error {
	if u.maxStreams < 0 {
		return engine.Errorf(engine.CodeInvalidArgument, "--ui-max-streams must not be negative")
	}
	return nil
}

// consoleHosts are the host names the console answers to without
// authentication: the config's and --ui-hosts'.
func (u uiFlags) consoleHosts(cc config.Console) []string {
	hosts := append([]string(nil), cc.Hosts...)
	for _, h := range strings.Split(u.hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

// open reports whether the console is served without authentication.
func (u uiFlags) open(cc config.Console) bool {
	return cc.TokenEnv == "" && cc.BasicAuthEnv == "" && u.tokenEnv == "" && u.basicEnv == ""
}

// HTTP server bounds of the console and /metrics: a client gets
// httpHeaderTimeout to send its request's headers, and an idle keep-alive
// connection is closed after httpIdleTimeout (a variable: tests shorten it).
var (
	httpHeaderTimeout = 5 * time.Second
	httpIdleTimeout   = 30 * time.Second
)

// newHTTPServer is the http.Server of the console and /metrics, with the
// bounds above: a client that connects and stays silent, or keeps an idle
// connection, does not hold it for long.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: httpHeaderTimeout, IdleTimeout: httpIdleTimeout}
}

func cmdUI(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("ui", "", "Serve the operator console: run history, run pages with a Gantt chart and the DAG, live\n"+
		"updates, steps, events, schedules, the queue, workers and the outbox. Read-only. Prints the URL\n"+
		"it serves, on loopback unless --listen names another address. Stop it with Ctrl-C.\n"+
		"It shows the target the command runs on (--target, DVT_TARGET, the config's target:); when the\n"+
		"config has several targets, every page links to the others. Without authentication it answers\n"+
		"only requests for localhost, an IP address or a name in console.hosts / --ui-hosts.")
	listen := fs.String("listen", "127.0.0.1:8080", "serve on `ADDR` (host:port; port 0 picks a free one)")
	var u uiFlags
	u.register(fs)
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	if err := u.check(); err != nil {
		return err
	}
	cfg, err := c.queueConfig()
	if err != nil {
		return err
	}
	if _, err := c.consoleAuth(cfg.Console, u); err != nil { // before the store is opened
		return err
	}
	st, err := c.openQueueStore(ctx, true)
	if err != nil {
		return err
	}
	defer st.Close()
	h, closeUI, err := c.consoleHandler(ctx, st, cfg, u)
	if err != nil {
		return err
	}
	defer closeUI()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return engine.Errorf(engine.CodeInvalidArgument, "--listen %s: %v", *listen, err)
	}
	if !isLoopback(ln.Addr()) && u.open(cfg.Console) {
		fmt.Fprintf(c.stderr, "warning: %s\n", openConsoleWarning(ln.Addr()))
	}
	srv := newHTTPServer(h)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	fmt.Fprintf(c.stdout, "dvtrun console: http://%s/runs\n", ln.Addr())
	select {
	case err := <-done:
		return fmt.Errorf("the console stopped serving: %w", err)
	case <-ctx.Done():
	}
	// Live streams end with the request contexts; 5s bounds the rest.
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// consoleHandler is the console of the command's target and, when the
// config has several targets, of each of the others too, with a target
// selector on every page (the others' state stores are opened read-only
// beside the command's; a target whose store cannot be opened is listed
// with why). The returned func closes what it opened.
func (c *cli) consoleHandler(ctx context.Context, st queueStore, cfg *config.Config, u uiFlags) (http.Handler, func(), error) {
	auth, err := c.consoleAuth(cfg.Console, u)
	if err != nil {
		return nil, nil, err
	}
	def, closeDef, err := c.consoleServer(ctx, st, cfg, u, auth)
	if err != nil {
		return nil, nil, err
	}
	if c.target == nil || len(cfg.Targets) < 2 {
		return def, closeDef, nil
	}
	closers := []func(){closeDef}
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defStore := c.g.store
	var ts []webui.Target
	for _, name := range cfg.TargetNames() {
		if name == c.target.name {
			ts = append(ts, webui.Target{Name: name, Server: def, Default: true})
			continue
		}
		var srv *webui.Server
		err := c.asTarget(cfg, name, func() error {
			tst := st
			if c.g.store != defStore {
				o, err := c.openQueueStore(ctx, true)
				if err != nil {
					return err
				}
				closers = append(closers, func() { o.Close() })
				tst = o
			}
			s, closeS, err := c.consoleServer(ctx, tst, cfg, u, auth)
			if err != nil {
				return err
			}
			closers = append(closers, closeS)
			srv = s
			return nil
		})
		t := webui.Target{Name: name, Server: srv}
		if err != nil {
			msg := err.Error()
			var e *engine.Error
			if errors.As(err, &e) {
				msg = e.Msg
			}
			t.Why = "its state store could not be opened: " + c.clean(msg)
			c.jsonLogger("ui").Warn("the console cannot show a target", "target", name, "error", t.Why)
		}
		ts = append(ts, t)
	}
	m, err := webui.NewTargets(ts)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return m, closeAll, nil
}

// asTarget runs fn with the command switched to config target name (its
// store, warehouse and environment), then switches back.
func (c *cli) asTarget(cfg *config.Config, name string, fn func() error) error {
	t, err := c.resolveTarget(cfg, name)
	if err != nil {
		return err
	}
	target, store, wh, env := c.target, c.g.store, c.g.warehouse, c.g.environment
	defer func() { c.target, c.g.store, c.g.warehouse, c.g.environment = target, store, wh, env }()
	c.target, c.g.store, c.g.warehouse, c.g.environment = &chosenTarget{name: name, t: t}, t.Store, t.Warehouse, t.Environment
	return fn()
}

// consoleServer wires one target's console to its state store (history,
// queue, outbox, leases, SQL projection, stored plan bundles), the
// config's schedules kept in that store, the warehouse's ledger when
// there is one, and the authentication.
func (c *cli) consoleServer(ctx context.Context, st queueStore, cfg *config.Config, u uiFlags, auth webui.Auth) (*webui.Server, func(), error) {
	cc := webui.Config{
		History: st, Clock: engine.ClockFunc(time.Now),
		TenantID: c.g.tenant, ProjectID: c.g.project, EnvironmentID: c.g.environment,
		Requests: st, Workers: st, Leases: st, Auth: auth, Poll: u.poll,
		MaxStreams: cmp.Or(u.maxStreams, cfg.Console.MaxStreams), Hosts: u.consoleHosts(cfg.Console),
		Log: c.jsonLogger("ui"),
		PlanGraph: func(ctx context.Context, sha string) ([]webui.GraphNode, bool, error) {
			data, ok, err := st.GetPlanBundle(ctx, sha)
			if err != nil || !ok {
				return nil, false, err
			}
			b, err := plan.DecodeBundle(sha, data)
			if err != nil {
				return nil, false, err
			}
			nodes := make([]webui.GraphNode, len(b.Plan.Steps))
			for i, s := range b.Plan.Steps {
				nodes[i] = webui.GraphNode{ID: s.ID, Kind: s.Kind, DependsOn: s.DependsOn}
			}
			return nodes, true, nil
		},
	}
	if p, ok := projectorFor(st); ok {
		cc.Projector = p
	}
	if ds, ok := st.(delivery.Store); ok {
		cc.Deliveries = ds
	}
	if len(cfg.Schedules) > 0 {
		s, err := c.newScheduler(st, cfg, time.Minute, c.jsonLogger("ui"))
		if err != nil {
			return nil, nil, err
		}
		cc.Schedules = func(ctx context.Context) ([]webui.Schedule, error) { return scheduleRows(ctx, st, s, time.Now()) }
	}
	closeWH := func() {}
	if wh := c.consoleWarehouse(ctx); wh != nil {
		if l, ok := wh.(engine.Ledger); ok {
			cc.Ledger = l
		}
		closeWH = func() { wh.Close() }
	}
	h, err := webui.New(cc)
	if err != nil {
		closeWH()
		return nil, nil, err
	}
	return h, closeWH, nil
}

// consoleWarehouse opens the warehouse for the step ledger, or returns nil
// when there is none to ask: a SQLite warehouse that does not exist is not
// created, and one that fails to open only leaves the ledger unchecked.
func (c *cli) consoleWarehouse(ctx context.Context) warehouse {
	t, err := c.parseTarget("warehouse", c.g.warehouse)
	if err != nil {
		return nil
	}
	if t.kind == "sqlite" {
		if _, err := os.Stat(t.path); err != nil {
			return nil
		}
	}
	wh, _, err := c.openWarehouse(ctx)
	if err != nil {
		return nil
	}
	return wh
}

// consoleAuth reads the console's credentials from the environment
// variables the flags or the config name. A named variable that is unset
// is an error: a console meant to be protected never starts open.
func (c *cli) consoleAuth(cc config.Console, u uiFlags) (webui.Auth, error) {
	tokenEnv, basicEnv := cc.TokenEnv, cc.BasicAuthEnv
	if u.tokenEnv != "" {
		tokenEnv = u.tokenEnv
	}
	if u.basicEnv != "" {
		basicEnv = u.basicEnv
	}
	tokenKey, basicKey := "console.tokenEnv", "console.basicAuthEnv"
	if u.tokenEnv != "" {
		tokenKey = "--ui-token-env"
	}
	if u.basicEnv != "" {
		basicKey = "--ui-basic-auth-env"
	}
	// A value of blanks (a variable set to " " or a stray newline) is no
	// secret: it would open the console to anyone who sends a blank token.
	var a webui.Auth
	if tokenEnv != "" {
		if a.BearerToken = strings.TrimSpace(c.env(tokenEnv)); a.BearerToken == "" {
			return a, engine.Errorf(engine.CodeConfigInvalid, "%s: the console's bearer token variable %s is unset, empty or only blanks", tokenKey, tokenEnv)
		}
	}
	if basicEnv != "" {
		v := strings.TrimSpace(c.env(basicEnv))
		user, pass, ok := strings.Cut(v, ":")
		if !ok || strings.TrimSpace(user) == "" || strings.TrimSpace(pass) == "" {
			return a, engine.Errorf(engine.CodeConfigInvalid, "%s: the console's basic auth variable %s must hold USER:PASSWORD, neither blank", basicKey, basicEnv)
		}
		a.BasicUser, a.BasicPass = user, pass
	}
	return a, nil
}

// openConsoleWarning is the warning of a console served beyond this
// machine without authentication.
func openConsoleWarning(addr net.Addr) string {
	return fmt.Sprintf("the console on %s is served beyond this machine without authentication: anyone who reaches it can read every run, its SQL and errors (set console.tokenEnv or --ui-token-env, or console.basicAuthEnv or --ui-basic-auth-env)", addr)
}
