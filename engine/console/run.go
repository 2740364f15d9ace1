package console

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/stepview"
	"github.com/dvtrun/dvtrun/store"
)

// loadRun returns the run of the console's scope with this exact id, as
// its history row (trigger, target, interval, queue times), or
// RUN_NOT_FOUND.
func (s *Server) loadRun(ctx context.Context, runID string) (store.RunSummary, error) {
	notFound := engine.Errorf(engine.CodeRunNotFound, "run %s not found in tenant %s, project %s, environment %s",
		engine.QuoteText(runID), s.cfg.TenantID, s.cfg.ProjectID, s.cfg.EnvironmentID)
	if runID == "" || len(runID) > maxValue || engine.HasControl(runID) {
		return store.RunSummary{}, notFound
	}
	runs, err := s.cfg.History.ListRuns(ctx, s.scope(store.RunFilter{RunIDPrefix: runID, Limit: 20}))
	if err != nil {
		return store.RunSummary{}, err
	}
	for _, r := range runs {
		if r.RunID == runID {
			return r, nil
		}
	}
	return store.RunSummary{}, notFound
}

// snapshot is the run's state: the stored live snapshot brought up to
// date with the events after it (reading only those), else the reducer
// over the whole log.
func (s *Server) snapshot(ctx context.Context, runID string) (engine.Snapshot, error) {
	state, _, err := s.cfg.History.LoadSnapshot(ctx, runID)
	if err != nil {
		return engine.Snapshot{}, err
	}
	if len(state) > 0 {
		if snap, err := engine.UnmarshalSnapshotState(state); err == nil && snap.RunID == runID && !snap.Stale {
			evs, err := s.cfg.History.ListEvents(ctx, runID, snap.LastEventSeq, 0)
			if err != nil {
				return engine.Snapshot{}, err
			}
			return engine.Incremental(snap, evs), nil
		}
	}
	evs, err := s.cfg.History.ListEvents(ctx, runID, 0, 0)
	if err != nil {
		return engine.Snapshot{}, err
	}
	return engine.Project(runID, evs), nil
}

// runPage is run.html's data.
type runPage struct {
	Run       store.RunSummary
	Snap      engine.Snapshot
	Steps     []engine.StepSnapshot // the steps shown (shownSteps)
	Signals   []engine.Signal
	Gantt     gantt
	DAG       dag
	Integrity integrity
	Commands  []string
	Live      bool // the run has not ended: the page follows it
}

func (s *Server) run(r *http.Request) (page, error) {
	ctx := r.Context()
	sum, err := s.loadRun(ctx, r.PathValue("runId"))
	if err != nil {
		return page{}, err
	}
	snap, err := s.snapshot(ctx, sum.RunID)
	if err != nil {
		return page{}, err
	}
	sigs, err := s.cfg.History.ListSignals(ctx, sum.RunID, 0)
	if err != nil {
		return page{}, err
	}
	p := runPage{Run: sum, Snap: snap, Signals: sigs, Live: !snap.Status.Terminal(), Commands: commands(sum, snap)}
	p.Steps = shownSteps(snap.Steps)
	p.Gantt = buildGantt(sum, snap)
	var nodes []GraphNode
	if s.cfg.PlanGraph != nil && sum.PlanSHA256 != "" {
		ns, ok, err := s.cfg.PlanGraph(ctx, sum.PlanSHA256)
		if err != nil {
			return page{}, err
		}
		if ok {
			nodes = ns
		}
	}
	p.DAG = buildDAG(nodes, snap, sum.RunID)
	p.Integrity = s.verify(ctx, sum.RunID, snap, r.URL.Query().Get("verify") == "1")
	return page{name: "run", title: "Run " + sum.RunID, nav: "runs", data: p}, nil
}

// commands are the dvtrun commands an operator copies from a run page:
// inspect it, follow or retry it, run its schedule again, see and verify
// what it ran.
func commands(r store.RunSummary, snap engine.Snapshot) []string {
	id := r.RunID
	out := []string{"dvtrun status " + id}
	switch {
	case !snap.Status.Terminal():
		out = append(out, "dvtrun status "+id+" --follow")
	case snap.Status == engine.StatusFailed || snap.Status == engine.StatusCancelled:
		out = append(out, "dvtrun retry "+id)
	}
	if r.Schedule != "" {
		out = append(out, "dvtrun schedule trigger "+shellQuote(r.Schedule))
	}
	if r.PlanSHA256 != "" {
		// The stored bundle is what it ran: run it again with
		// `dvtrun run PLAN --plan-sha256` over these files.
		out = append(out, "dvtrun plan show "+id+" --list")
	}
	return append(out, "dvtrun verify "+id)
}

// shellQuote quotes s for a POSIX shell when it holds anything but safe
// characters.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:/@", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// integrity is the run's badge: what verify found and what it checked.
type integrity struct {
	Checked bool
	OK      bool
	Why     string // not checked: why
	Diffs   []engine.SnapshotDiff
	Steps   int
	Events  int64
	// The warehouse ledger's exactly-once record of the successful steps:
	// how many were asked and how many have a committed entry for their
	// latest logical attempt.
	LedgerAsked, LedgerCommitted int
	LedgerWhy                    string // not asked: why
	VerifyURL                    string
	Offer                        bool // not checked, but can be on request: link VerifyURL
}

// verify compares the store's SQL projection with the Go reducer, as
// `dvtrun verify RUN` does. A run with more than VerifyMaxEvents events
// is verified only when asked, so that its page stays fast.
func (s *Server) verify(ctx context.Context, runID string, snap engine.Snapshot, asked bool) integrity {
	in := integrity{Steps: len(snap.Steps), Events: snap.LastEventSeq, VerifyURL: "/runs/" + pathEscape(runID) + "?verify=1"}
	s.ledgerRecord(ctx, runID, snap, &in)
	if s.cfg.Projector == nil {
		in.Why = "this state store has no SQL projection"
		return in
	}
	// The two sides are read one after the other: on a run still being
	// written they could see different logs and differ for no fault.
	if !snap.Status.Terminal() {
		in.Why = "the run has not ended; it is verified once it has"
		return in
	}
	if snap.LastEventSeq > s.cfg.VerifyMaxEvents && !asked {
		in.Why = strconv.FormatInt(snap.LastEventSeq, 10) + " events: verified on request"
		in.Offer = true
		return in
	}
	sqlSnap, err := s.cfg.Projector.ProjectSQL(ctx, runID)
	if err != nil {
		in.Why = err.Error()
		return in
	}
	// The Go side is the reducer over the whole log, never the stored
	// snapshot: verify checks the two computations, not the cache.
	evs, err := s.cfg.History.ListEvents(ctx, runID, 0, 0)
	if err != nil {
		in.Why = err.Error()
		return in
	}
	in.Diffs = engine.DiffSnapshots(sqlSnap, engine.Project(runID, evs))
	in.Checked, in.OK = true, len(in.Diffs) == 0
	return in
}

// maxLedgerSteps bounds the ledger lookups of one run page.
const maxLedgerSteps = 100

// ledgerRecord asks the warehouse's ledger about each successful step's
// latest logical attempt.
func (s *Server) ledgerRecord(ctx context.Context, runID string, snap engine.Snapshot, in *integrity) {
	if s.cfg.Ledger == nil {
		in.LedgerWhy = "the console was started without the warehouse"
		return
	}
	for _, st := range snap.Steps {
		if st.Status != engine.StepStatusSuccess {
			continue
		}
		if in.LedgerAsked == maxLedgerSteps {
			in.LedgerWhy = "the first " + strconv.Itoa(maxLedgerSteps) + " successful steps were asked"
			return
		}
		_, found, err := s.cfg.Ledger.LookupStep(ctx, runID, st.StepID, st.LogicalAttemptID)
		if err != nil {
			in.LedgerWhy = err.Error()
			return
		}
		in.LedgerAsked++
		if found {
			in.LedgerCommitted++
		}
	}
}

// stepPage is step.html's data.
type stepPage struct {
	Run  store.RunSummary
	View stepview.View
}

func (s *Server) step(r *http.Request) (page, error) {
	ctx := r.Context()
	sum, err := s.loadRun(ctx, r.PathValue("runId"))
	if err != nil {
		return page{}, err
	}
	stepID := r.PathValue("stepId")
	// The run's state, and only this step's events: a step page of a big
	// run reads neither the whole log nor every step.
	snap, err := s.snapshot(ctx, sum.RunID)
	if err != nil {
		return page{}, err
	}
	evs, err := s.cfg.History.ListStepEvents(ctx, sum.RunID, stepID)
	if err != nil {
		return page{}, err
	}
	v, err := stepview.Build(sum.RunID, snap, evs, stepID)
	if err != nil {
		return page{}, notFound{err}
	}
	if v.NeedsLedger() {
		if s.cfg.Ledger != nil {
			v.AskLedger(ctx, s.cfg.Ledger)
		} else {
			v.Ledger.NotCheckedWhy = "the console was started without the warehouse"
		}
	}
	return page{name: "step", title: "Step " + engine.EscapeControl(stepID), nav: "runs", data: stepPage{Run: sum, View: v}}, nil
}
