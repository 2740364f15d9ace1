package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/config"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/queue"
	"github.com/dvtrun/dvtrun/engine/schedule"
	"github.com/dvtrun/dvtrun/engine/selection"
	"github.com/dvtrun/dvtrun/store/postgres"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

// queueStore is a state store with the run queue and schedule cursors
// (both backends).
type queueStore interface {
	stateStore
	queue.Store
	schedule.CursorStore
}

// Both backends have the run queue.
var (
	_ queueStore = (*sqlite.Store)(nil)
	_ queueStore = (*snowflake.Store)(nil)
	_ queueStore = (*postgres.Store)(nil)
)

// openQueueStore opens the state store as a queue store.
func (c *cli) openQueueStore(ctx context.Context, mustExist bool) (queueStore, error) {
	st, err := c.openStore(ctx, mustExist)
	if err != nil {
		return nil, err
	}
	qs, ok := st.(queueStore)
	if !ok {
		st.Close()
		return nil, engine.Errorf(engine.CodeStoreUnavailable, "this state store has no run queue")
	}
	return qs, nil
}

// queueConfig is the --config file with schedule plan paths made
// relative to the file, as the file's reader expects.
func (c *cli) queueConfig() (*config.Config, error) {
	cfg, err := c.loadConfig()
	if err != nil {
		return nil, err
	}
	for i := range cfg.Schedules {
		cfg.Schedules[i].Plan = relativeTo(c.g.config, cfg.Schedules[i].Plan)
	}
	return cfg, nil
}

func relativeTo(file, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(file), p)
}

// planDigest is what a run request records of its plan: id, version and
// the plan bundle's sha256 (the plan and every file it references, as
// plan.LoadBundle hashes them). The bundle is stored first: the worker
// runs it from the store by that sha256, wherever it was started.
func planDigest(ctx context.Context, st plan.BundleStore, path string) (schedule.PlanInfo, error) {
	b, err := loadPlan(path, "")
	if err != nil {
		return schedule.PlanInfo{}, err
	}
	if err := storeBundle(ctx, st, b); err != nil {
		return schedule.PlanInfo{}, err
	}
	return planInfo(b), nil
}

func planInfo(b *plan.Bundle) schedule.PlanInfo {
	return schedule.PlanInfo{PlanID: b.Plan.PlanID, PlanVersion: b.Plan.PlanVersion, SHA256: b.Ref.SHA256}
}

func queueLimits(l config.Limits) queue.Limits {
	return queue.Limits{MaxConcurrentRuns: l.MaxConcurrentRuns, PerPlan: l.PerPlan, MaxQueueDepth: l.MaxQueueDepth,
		Policy: string(l.Policy), RetryAfter: l.RetryAfter, Delay: l.Delay}
}

func claimLimits(l config.Limits) queue.ClaimLimits {
	return queue.ClaimLimits{MaxConcurrentRuns: l.MaxConcurrentRuns, PerPlan: l.PerPlan}
}

// parseNotBefore reads an RFC 3339 time or a duration from now ("10m").
func parseNotBefore(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(strings.TrimPrefix(s, "+")); err == nil {
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, engine.Errorf(engine.CodeInvalidArgument, "--not-before %q: want an RFC 3339 time (2026-04-01T02:00:00Z) or a duration (10m)", s)
	}
	return t.UTC(), nil
}

func cmdEnqueue(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("enqueue", "PLAN", "Ask for a run of a plan: a worker starts it. Idempotent on the request id:\n"+
		"a second enqueue with the same --request-id returns the first request.\n"+
		"Exit 75 with RUN_QUEUE_FULL when the limits refuse it (retry after the time given).")
	reqID := fs.String("request-id", "", "the caller's `ID` for this run request (default: a new one)")
	prio := fs.Int("priority", 0, "higher `N` starts first")
	notBefore := fs.String("not-before", "", "do not start before `TIME` (RFC 3339, or a duration from now)")
	asJSON := fs.Bool("json", false, "print the request as JSON")
	var sf selectFlags
	sf.register(fs)
	vars := fs.String("vars", "", "the run's variables: a YAML or JSON `MAPPING` ('{\"region\": \"eu\"}'), read by {{ var('k') }}")
	fullRefresh := fs.Bool("full-refresh", false, "rebuild incremental models from their full select instead of merging new rows")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if sf.indirect != string(selection.Eager) {
		// The worker evaluates the selection on the stored plan, eagerly.
		return engine.Errorf(engine.CodeInvalidArgument, "enqueue: --indirect-selection is not recorded with a request; only eager is supported")
	}
	varMap, err := plan.ParseVars(*vars)
	if err != nil {
		return err
	}
	nb, err := parseNotBefore(*notBefore, time.Now())
	if err != nil {
		return err
	}
	cfg, err := c.queueConfig()
	if err != nil {
		return err
	}
	b, err := loadPlan(pos[0], "") // refused before a store is made
	if err != nil {
		return err
	}
	shape := queue.Shape{Target: c.targetName(), Select: sf.sel, Exclude: sf.exc, Vars: varMap, FullRefresh: *fullRefresh}
	// A selection that picks nothing is refused now, not by the worker.
	if _, err := c.choose(b.Plan, sf, true); err != nil {
		return err
	}
	st, err := c.openQueueStore(ctx, false)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := storeBundle(ctx, st, b); err != nil { // before the request names it
		return err
	}
	info := planInfo(b)
	q := &queue.Queue{Store: st, IDs: engine.IDFunc(newID), Limits: queueLimits(cfg.Limits)}
	r, created, err := q.Enqueue(ctx, queue.Request{
		TenantID: c.g.tenant, ProjectID: c.g.project, EnvironmentID: c.g.environment,
		PlanID: info.PlanID, PlanVersion: info.PlanVersion, RunRequestID: *reqID,
		PlanPath: pos[0], PlanSHA256: info.SHA256, Priority: *prio, NotBefore: nb, Shape: shape,
	})
	if err != nil {
		return err
	}
	if *asJSON {
		return c.printJSON(struct {
			queue.Request
			Created bool `json:"created"`
		}{r, created})
	}
	if !created {
		fmt.Fprintf(c.stdout, "Already enqueued: request %s (runRequestId %s) is %s; nothing new was queued.\n", r.RequestID, r.RunRequestID, r.State)
		return nil
	}
	fmt.Fprintf(c.stdout, "Enqueued request %s for plan %s@%s (runRequestId %s, priority %d, not before %s)\n",
		r.RequestID, r.PlanID, r.PlanVersion, r.RunRequestID, r.Priority, fmtTime(r.NotBefore))
	return nil
}

func cmdQueue(ctx context.Context, c *cli, args []string) error {
	if len(args) > 0 && args[0] == "cancel" {
		return cmdQueueCancel(ctx, c, args[1:])
	}
	fs := c.newFlagSet("queue", "[cancel ID]", "List the run requests waiting or running (with --all, finished ones too), oldest first.")
	asJSON := fs.Bool("json", false, "print JSON")
	all := fs.Bool("all", false, "include finished and cancelled requests")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	c.noteScope("queue")
	st, err := c.openQueueStore(ctx, true)
	if err != nil {
		return err
	}
	defer st.Close()
	list, err := st.ListRequests(ctx, *all)
	if err != nil {
		return err
	}
	type row struct {
		queue.Request
		AgeSeconds float64 `json:"ageSeconds"`
	}
	now := time.Now()
	rows := []row{}
	elsewhere := map[string]int{} // requests of the scope's other environments
	for _, r := range list {
		if r.TenantID != c.g.tenant || r.ProjectID != c.g.project {
			continue
		}
		if r.EnvironmentID != c.g.environment {
			elsewhere[r.EnvironmentID]++
			continue
		}
		rows = append(rows, row{r, now.Sub(r.EnqueuedAt).Seconds()})
	}
	if *asJSON {
		return c.printJSON(rows)
	}
	if len(rows) == 0 {
		if c.target != nil {
			fmt.Fprintf(c.stdout, "The run queue of target %s is empty.\n", c.target.name)
		} else {
			fmt.Fprintln(c.stdout, "The run queue is empty.")
		}
		c.hintOtherTargets("queue", "request(s)", elsewhere)
		return nil
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "REQUEST\tSTATE\tAGE\tPRIO\tPLAN\tRUN REQUEST\tRUN\tOWNER\tOUTCOME")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s@%s\t%s\t%s\t%s\t%s\n", r.RequestID, r.State,
			time.Duration(r.AgeSeconds*float64(time.Second)).Round(time.Second), r.Priority, r.PlanID, r.PlanVersion,
			r.RunRequestID, r.RunID, r.Owner, r.Outcome)
	}
	return tw.Flush()
}

func cmdQueueCancel(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("queue cancel", "ID", "Cancel a waiting run request. A running one is cancelled through its run (dvtrun cancel RUN_ID).")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	st, err := c.openQueueStore(ctx, true)
	if err != nil {
		return err
	}
	defer st.Close()
	r, err := st.GetRequest(ctx, pos[0])
	if err == nil && (r.TenantID != c.g.tenant || r.ProjectID != c.g.project || r.EnvironmentID != c.g.environment) {
		err = engine.Errorf(engine.CodeRunNotFound, "no run request %s in tenant %s, project %s, environment %s", pos[0], c.g.tenant, c.g.project, c.g.environment)
	}
	if err != nil {
		return err
	}
	if r, err = st.CancelRequest(ctx, pos[0]); err != nil {
		return err
	}
	switch r.State {
	case queue.StateCancelled:
		fmt.Fprintf(c.stdout, "Cancelled request %s.\n", r.RequestID)
		return nil
	case queue.StateDone:
		return engine.Errorf(engine.CodeInvalidArgument, "request %s already finished (%s)", r.RequestID, r.Outcome)
	case queue.StateRunning:
		return engine.Errorf(engine.CodeInvalidArgument, "request %s is running as run %s; cancel the run: dvtrun cancel %s", r.RequestID, r.RunID, r.RunID)
	default:
		return engine.Errorf(engine.CodeInvalidArgument, "request %s is %s by %s; try again, or cancel its run once it has one", r.RequestID, r.State, r.Owner)
	}
}
