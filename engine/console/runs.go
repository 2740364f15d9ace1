package console

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store"
)

// runStatuses are the statuses the runs page filters by.
var runStatuses = []engine.RunStatus{engine.StatusQueued, engine.StatusApproved, engine.StatusRunning, engine.StatusPaused,
	engine.StatusCompleted, engine.StatusFailed, engine.StatusCancelled}

// maxValue bounds one filter value: ids and names are short.
const maxValue = 200

// runsQuery is the runs page's query string, parsed and checked.
type runsQuery struct {
	Status, Plan, Schedule, Trigger, Target, Since, Until, After, View string
	Limit                                                              int
}

// failingView is the "failed and not succeeded since" view.
const failingView = "failing"

func parseRunsQuery(q url.Values, now time.Time) (runsQuery, store.RunFilter, error) {
	rq := runsQuery{Status: q.Get("status"), Plan: q.Get("plan"), Schedule: q.Get("schedule"), Trigger: q.Get("trigger"),
		Target: q.Get("target"), Since: q.Get("since"), Until: q.Get("until"), After: q.Get("after"), View: q.Get("view"), Limit: 50}
	for _, v := range []string{rq.Status, rq.Plan, rq.Schedule, rq.Trigger, rq.Target, rq.Since, rq.Until, rq.After, rq.View} {
		if len(v) > maxValue || !utf8.ValidString(v) || engine.HasControl(v) {
			return rq, store.RunFilter{}, engine.Errorf(engine.CodeInvalidArgument, "filter value %s is too long or not plain text", engine.QuoteText(v))
		}
	}
	f := store.RunFilter{Status: engine.RunStatus(rq.Status), PlanID: rq.Plan, Schedule: rq.Schedule, Trigger: store.Trigger(rq.Trigger), Target: rq.Target}
	if rq.Status != "" && !slices.Contains(runStatuses, f.Status) {
		return rq, f, engine.Errorf(engine.CodeInvalidArgument, "status %s is not one of QUEUED, APPROVED, RUNNING, PAUSED, COMPLETED, FAILED, CANCELLED", engine.QuoteText(rq.Status))
	}
	if rq.Trigger != "" && !slices.Contains(store.Triggers, f.Trigger) {
		return rq, f, engine.Errorf(engine.CodeInvalidArgument, "trigger %s is not one of manual, schedule, queue, retry", engine.QuoteText(rq.Trigger))
	}
	if rq.View != "" && rq.View != failingView {
		return rq, f, engine.Errorf(engine.CodeInvalidArgument, "view %s is not %s", engine.QuoteText(rq.View), failingView)
	}
	var err error
	if f.Since, err = store.ParseWhen("since", rq.Since, now); err != nil {
		return rq, f, err
	}
	if f.Until, err = store.ParseWhen("until", rq.Until, now); err != nil {
		return rq, f, err
	}
	if rq.After != "" {
		c, err := store.ParseCursor(rq.After)
		if err != nil {
			return rq, f, err
		}
		f.After = &c
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 500 {
			return rq, f, engine.Errorf(engine.CodeInvalidArgument, "limit %s is not a number from 1 to 500", engine.QuoteText(v))
		}
		rq.Limit = n
	}
	f.Limit = rq.Limit
	return rq, f, nil
}

// runsPage is runs.html's data.
type runsPage struct {
	Q        runsQuery
	Statuses []engine.RunStatus
	Triggers []store.Trigger
	Runs     []store.RunSummary
	Next     string // the next page's URL; "" on the last page
	Failing  bool
	// Target is the config target shown, when the console serves several
	// (an empty page then says which target it looked in).
	Target, Environment string
}

func (s *Server) scope(f store.RunFilter) store.RunFilter {
	f.TenantID, f.ProjectID, f.EnvironmentID = s.cfg.TenantID, s.cfg.ProjectID, s.cfg.EnvironmentID
	return f
}

func (s *Server) runs(r *http.Request) (page, error) {
	ctx := r.Context()
	rq, f, err := parseRunsQuery(r.URL.Query(), s.cfg.Clock.Now())
	if err != nil {
		return page{}, err
	}
	p := runsPage{Q: rq, Statuses: runStatuses, Triggers: store.Triggers}
	if len(s.targets) > 1 {
		p.Target, p.Environment = s.target, s.cfg.EnvironmentID
	}
	if rq.View == failingView {
		p.Failing = true
		p.Runs, err = s.failing(ctx, f)
		return page{name: "runs", title: "Failing runs", nav: "runs", data: p}, err
	}
	// One row more than shown says whether there is a next page.
	f = s.scope(f)
	f.Limit++
	runs, err := s.cfg.History.ListRuns(ctx, f)
	if err != nil {
		return page{}, err
	}
	if len(runs) > rq.Limit {
		runs = runs[:rq.Limit]
		q := r.URL.Query()
		q.Set("after", runs[len(runs)-1].Cursor().String())
		p.Next = "/runs?" + q.Encode()
	}
	p.Runs = runs
	return page{name: "runs", title: "Runs", nav: "runs", data: p}, nil
}

// failingScan bounds the failed runs the failing view reads.
const failingScan = 200

// failing is the newest failed run of each plan (and schedule) that has
// not completed since: what is broken now, not what broke once.
func (s *Server) failing(ctx context.Context, f store.RunFilter) ([]store.RunSummary, error) {
	f = s.scope(f)
	f.Status, f.After, f.Limit = engine.StatusFailed, nil, failingScan
	failed, err := s.cfg.History.ListRuns(ctx, f)
	if err != nil {
		return nil, err
	}
	seen := map[[2]string]bool{}
	var out []store.RunSummary
	for _, r := range failed {
		k := [2]string{r.PlanID, r.Schedule}
		if seen[k] {
			continue
		}
		seen[k] = true
		ok := s.scope(store.RunFilter{PlanID: r.PlanID, Schedule: r.Schedule, Status: engine.StatusCompleted, Since: r.CreatedAt, Limit: 1})
		later, err := s.cfg.History.ListRuns(ctx, ok)
		if err != nil {
			return nil, err
		}
		if len(later) == 0 {
			out = append(out, r)
		}
	}
	return out, nil
}
