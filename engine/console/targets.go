package console

import (
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/dvtrun/dvtrun/engine"
)

// TargetLink is an entry of the target selector every page shows when the
// console serves several targets.
type TargetLink struct {
	Name        string
	Environment string
	Current     bool   // the target this page shows
	Why         string // not "": the target cannot be shown, and why
}

// Target is one config target the console serves: its console, or why it
// has none (its state store could not be opened).
type Target struct {
	Name    string
	Server  *Server
	Why     string
	Default bool // shown until a request picks another
}

// targetCookie holds the target a browser picked. A cookie, not a query
// parameter: every link of every page keeps the choice without carrying
// it, and /runs?target= already filters by the target a run recorded.
const targetCookie = "dvt_target"

// Targets serves several config targets' consoles, each over its own state
// store (or its own environment of a shared one). A request is served by
// the target the browser picked with /target?name=NAME (a plain link in
// every page's header: no JavaScript), else by the default target.
type Targets struct {
	order   []string
	byName  map[string]*Server
	def     *Server
	targets []Target
}

// NewTargets builds the console of several targets; exactly one is the
// default, and it must have a console.
func NewTargets(ts []Target) (*Targets, error) {
	m := &Targets{byName: map[string]*Server{}, targets: ts}
	for _, t := range ts {
		if t.Server != nil {
			m.byName[t.Name] = t.Server
		}
		if t.Default {
			m.def = t.Server
		}
		m.order = append(m.order, t.Name)
	}
	if m.def == nil {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "the console of several targets needs its default target's console")
	}
	for _, t := range ts {
		if t.Server == nil {
			continue
		}
		t.Server.target = t.Name
		t.Server.targets = make([]TargetLink, 0, len(ts))
		for _, o := range ts {
			l := TargetLink{Name: o.Name, Current: o.Name == t.Name, Why: o.Why}
			if o.Server != nil {
				l.Environment = o.Server.cfg.EnvironmentID
			}
			t.Server.targets = append(t.Server.targets, l)
		}
	}
	return m, nil
}

// switchTo are the pages /target may send the browser back to.
var switchTo = []string{"/runs", "/schedules", "/queue", "/workers", "/outbox"}

// ServeHTTP serves /target (pick a target, then back to the page it was
// picked on) and every other path with the picked target's console.
func (m *Targets) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := m.pick(r)
	if r.URL.Path != "/target" {
		s.ServeHTTP(w, r)
		return
	}
	if !s.gate(w, r) {
		return
	}
	q := r.URL.Query()
	name := q.Get("name")
	if _, ok := m.byName[name]; !ok {
		msg := fmt.Sprintf("No target %s here: the console serves %s.", engine.QuoteText(name), engine.JoinLimited(m.order, ", ", 20))
		for _, t := range m.targets {
			if t.Name == name && t.Why != "" {
				msg = fmt.Sprintf("Target %s cannot be shown: %s", engine.QuoteText(name), t.Why)
			}
		}
		s.failErr(w, r, notFound{errors.New(msg)})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: targetCookie, Value: name, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode})
	to := q.Get("to")
	if !slices.Contains(switchTo, to) {
		to = "/runs"
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// pick is the console of the target the request's cookie names, else the
// default one.
func (m *Targets) pick(r *http.Request) *Server {
	if c, err := r.Cookie(targetCookie); err == nil {
		if s, ok := m.byName[c.Value]; ok {
			return s
		}
	}
	return m.def
}
