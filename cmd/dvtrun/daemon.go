package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	// Schedules name IANA zones; the binary carries the zone database so
	// that a host or container without one still loads them.
	_ "time/tzdata"

	sdkworker "go.temporal.io/sdk/worker"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/config"
	webui "github.com/dvtrun/dvtrun/engine/console"
	"github.com/dvtrun/dvtrun/engine/delivery"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/projection"
	"github.com/dvtrun/dvtrun/engine/pulse"
	"github.com/dvtrun/dvtrun/engine/queue"
	runcore "github.com/dvtrun/dvtrun/engine/run"
	"github.com/dvtrun/dvtrun/engine/schedule"
	"github.com/dvtrun/dvtrun/engine/service"
	dvtemporal "github.com/dvtrun/dvtrun/engine/temporal"
	"github.com/dvtrun/dvtrun/engine/worker"
	"github.com/dvtrun/dvtrun/store"
)

// daemonFlags are shared by scheduler, worker and serve.
type daemonFlags struct {
	poll     time.Duration
	http     string
	slots    int
	grace    time.Duration
	exec     runFlags // --threads, --lease-ttl, --secrets-file, as `run` has them
	delivery deliveryFlags
	ui       bool
	uiFlags  uiFlags
}

func (d *daemonFlags) register(c *cli, name string, worker bool) *flag.FlagSet {
	fs := c.newFlagSet(name, "", daemonHelp[name])
	// On Snowflake every poll wakes a warehouse: seconds, not milliseconds.
	fs.DurationVar(&d.poll, "poll", 2*time.Second, "pause between polls of the store when idle")
	fs.StringVar(&d.http, "http", "", "serve /livez, /readyz and /metrics on `ADDR` (e.g. 127.0.0.1:9464; a non-loopback address is served as given, with a warning)")
	if worker {
		fs.BoolVar(&d.ui, "ui", false, "also serve the operator console, as dvtrun ui does, on the --http address")
		d.uiFlags.register(fs)
		fs.IntVar(&d.slots, "slots", 1, "run up to `N` requests at once in this process")
		fs.DurationVar(&d.grace, "grace", 30*time.Second, "on SIGTERM, let runs in flight finish this long before handing them back")
		d.exec.registerExec(fs)
		// The worker delivers the outbox to the config's sinks, as
		// `dvtrun outbox deliver` does.
		d.delivery.register(fs, "delivery-", 0)
	}
	return fs
}

var daemonHelp = map[string]string{
	"scheduler": "Fire the configured schedules into the run queue until SIGTERM. Any number of schedulers\nmay run on one store: each tick becomes one request.",
	"worker": "Claim queued run requests and run them until SIGTERM, then let runs in flight finish\nwithin --grace or hand them back to another worker. Exit 0. Also delivers the outbox to\n" +
		"the config's sinks (as `dvtrun outbox deliver`) and keeps the live snapshots current\n(as `dvtrun project`). On Temporal (the target's engine, or --engine temporal) it polls\nthe Temporal task queue and turns each claimed request into a workflow start.",
	"serve": "Scheduler, worker, outbox delivery and the live projector in one process: the single-machine default.",
}

func (d daemonFlags) check(worker bool) error {
	if d.poll < 100*time.Millisecond {
		return engine.Errorf(engine.CodeInvalidArgument, "--poll must be at least 100ms")
	}
	if d.ui && d.http == "" {
		return engine.Errorf(engine.CodeInvalidArgument, "--ui serves the console on the --http address: give --http ADDR too")
	}
	if err := d.uiFlags.check(); err != nil {
		return err
	}
	if d.http != "" {
		if _, _, err := net.SplitHostPort(d.http); err != nil {
			return engine.Errorf(engine.CodeInvalidArgument, "--http %q: %v", d.http, err)
		}
	}
	if worker {
		switch {
		case d.slots < 1:
			return engine.Errorf(engine.CodeInvalidArgument, "--slots must be at least 1")
		case d.grace < 0:
			return engine.Errorf(engine.CodeInvalidArgument, "--grace must not be negative")
		}
		return d.exec.check()
	}
	return nil
}

// jsonLogger is the daemons' log: JSON lines on stderr.
func (c *cli) jsonLogger(component string) *slog.Logger {
	return slog.New(slog.NewJSONHandler(c.stderr, nil)).With("component", component)
}

func (c *cli) ownerID(role string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s@%s:%d:%s", role, host, os.Getpid(), newID()[:8])
}

// newScheduler builds the scheduler of the config's schedules.
func (c *cli) newScheduler(st queueStore, cfg *config.Config, poll time.Duration, log *slog.Logger) (*schedule.Scheduler, error) {
	defs := make([]schedule.Def, 0, len(cfg.Schedules))
	for _, s := range cfg.Schedules {
		sp, err := s.Spec()
		if err != nil {
			return nil, engine.Errorf(engine.CodeConfigInvalid, "schedule %s: %v", s.Name, err)
		}
		env, err := c.scheduleEnvironment(cfg, s)
		if errors.Is(err, errOtherStore) {
			// Its runs live in another target's store: the scheduler of
			// that target fires it.
			if log != nil {
				log.Info("schedule left to its target's scheduler", "schedule", s.Name, "target", s.Target)
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		// A plan that does not load is refused now, not at its first tick.
		if _, err := loadPlan(s.Plan, ""); err != nil {
			return nil, fmt.Errorf("schedule %s: %w", s.Name, err)
		}
		defs = append(defs, schedule.Def{Name: s.Name, Spec: sp, PlanPath: s.Plan, Overlap: string(s.Overlap), CatchupWindow: s.CatchupWindow, Priority: s.Priority,
			Shape: c.scheduleShape(s), EnvironmentID: env})
	}
	eng := c.engineFor(st)
	return &schedule.Scheduler{
		Store: st, Clock: engine.ClockFunc(time.Now), IDs: engine.IDFunc(newID), Defs: defs,
		TenantID: c.g.tenant, ProjectID: c.g.project, EnvironmentID: c.g.environment,
		// Each request's bundle is stored as its tick reads it.
		Resolve:   func(ctx context.Context, path string) (schedule.PlanInfo, error) { return planDigest(ctx, st, path) },
		CancelRun: eng.CancelRun,
		Poll:      poll, Sleep: sleepCtx, Log: log, Metrics: &schedule.Counters{},
	}, nil
}

func findDef(s *schedule.Scheduler, cfg *config.Config, name string) (schedule.Def, error) {
	for _, d := range s.Defs {
		if d.Name == name {
			return d, nil
		}
	}
	for _, sc := range cfg.Schedules {
		if sc.Name == name {
			return schedule.Def{}, engine.Errorf(engine.CodeInvalidArgument, "schedule %s runs on target %s, whose runs are kept in another state store: add --target %s", name, sc.Target, sc.Target)
		}
	}
	return schedule.Def{}, engine.Errorf(engine.CodeInvalidArgument, "no schedule %q in the config", name)
}

// errOtherStore: a schedule's target keeps its runs in another state store
// than the command's.
var errOtherStore = errors.New("the schedule's target has another state store")

// scheduleEnvironment is the environment id of a schedule's runs: its
// target's ("" when it names none: the command's).
func (c *cli) scheduleEnvironment(cfg *config.Config, s config.Schedule) (string, error) {
	if s.Target == "" || s.Target == c.targetName() {
		return "", nil
	}
	t, err := c.resolveTarget(cfg, s.Target)
	if err != nil {
		return "", err
	}
	if t.Store != c.g.store {
		return "", errOtherStore
	}
	return t.Environment, nil
}

func cmdSchedule(ctx context.Context, c *cli, args []string) error {
	sub := ""
	if len(args) > 0 {
		sub, args = args[0], args[1:]
	}
	if sub == "--help" || sub == "-h" || sub == "help" {
		fmt.Fprintln(c.stdout, "Usage: dvtrun schedule list\n       dvtrun schedule trigger NAME\n       dvtrun schedule backfill NAME --from T --to T\n\nRun `dvtrun schedule SUBCOMMAND --help` for its flags.")
		return errHelp
	}
	fs := c.newFlagSet("schedule "+sub, "list | trigger NAME | backfill NAME --from T --to T",
		"Show the configured schedules (next ticks, last run), fire one now, or enqueue the ticks of a past range\nthrough the run queue (a tick already requested is not requested again).")
	from := fs.String("from", "", "backfill from `TIME` (RFC 3339, inclusive)")
	to := fs.String("to", "", "backfill to `TIME` (RFC 3339, inclusive)")
	asJSON := fs.Bool("json", false, "print JSON")
	var pos []string
	var err error
	switch sub {
	case "list":
		pos, err = c.parse(fs, args, 0, 0)
	case "trigger", "backfill":
		pos, err = c.parse(fs, args, 1, 1)
	default:
		return engine.Errorf(engine.CodeInvalidArgument, "schedule: want list, trigger NAME or backfill NAME (see dvtrun schedule list --help)")
	}
	if err != nil {
		return err
	}
	cfg, err := c.queueConfig()
	if err != nil {
		return err
	}
	if sub == "list" {
		c.noteScope("schedule list")
	}
	st, err := c.openQueueStore(ctx, false)
	if err != nil {
		return err
	}
	defer st.Close()
	s, err := c.newScheduler(st, cfg, time.Second, nil)
	if err != nil {
		return err
	}
	q := &queue.Queue{Store: st, IDs: engine.IDFunc(newID), Limits: queueLimits(cfg.Limits)}
	switch sub {
	case "trigger":
		d, err := findDef(s, cfg, pos[0])
		if err != nil {
			return err
		}
		r, _, err := schedule.Trigger(ctx, q, s, d)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "Enqueued request %s for schedule %s (runRequestId %s)\n", r.RequestID, d.Name, r.RunRequestID)
		return nil
	case "backfill":
		d, err := findDef(s, cfg, pos[0])
		if err != nil {
			return err
		}
		f, err1 := time.Parse(time.RFC3339, *from)
		t, err2 := time.Parse(time.RFC3339, *to)
		if err1 != nil || err2 != nil || t.Before(f) {
			return engine.Errorf(engine.CodeInvalidArgument, "backfill needs --from and --to as RFC 3339 times, --from not after --to")
		}
		reqs, created, err := schedule.Backfill(ctx, q, s, d, f, t)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "Backfill of %s: %d tick(s) from %s to %s, %d newly enqueued, %d already requested\n",
			d.Name, len(reqs), f.UTC().Format(time.RFC3339), t.UTC().Format(time.RFC3339), created, len(reqs)-created)
		return nil
	}
	if err := c.listSchedules(ctx, st, s, *asJSON); err != nil {
		return err
	}
	if !*asJSON {
		// Schedules whose runs are in another target's store are that
		// target's to list.
		for _, sc := range cfg.Schedules {
			if !slices.ContainsFunc(s.Defs, func(d schedule.Def) bool { return d.Name == sc.Name }) {
				fmt.Fprintf(c.stderr, "dvtrun: schedule %s runs on target %s, whose runs are in another state store: dvtrun schedule list --target %s\n", sc.Name, sc.Target, sc.Target)
			}
		}
	}
	return nil
}

// scheduleRows are the schedules with their next ticks and what their
// cursors recorded: `schedule list` prints them, the console shows them.
func scheduleRows(ctx context.Context, st queueStore, s *schedule.Scheduler, now time.Time) ([]webui.Schedule, error) {
	var rows []webui.Schedule
	for _, d := range s.Defs {
		cur, ok, err := st.GetCursor(ctx, d.Name)
		if err != nil {
			return nil, err
		}
		r := webui.Schedule{Name: d.Name, Cron: d.Spec.Expr, Timezone: d.Spec.Loc.String(), Overlap: d.Overlap}
		next := d.Spec.Next(now)
		if ok {
			r.LastTick, r.LastRequestID, r.Fired, r.Missed, r.Skipped = cur.LastTick, cur.LastRequestID, cur.Fired, cur.Missed, cur.Skipped
			if cur.NextTick.Before(next) {
				next = cur.NextTick
			}
			if cur.LastRequestID != "" {
				if lr, err := st.GetRequest(ctx, cur.LastRequestID); err == nil {
					r.LastState = string(lr.State)
					if lr.Outcome != "" {
						r.LastState += " " + lr.Outcome
					}
				}
			}
		}
		for i := 0; i < 3 && !next.IsZero(); i++ {
			r.NextTicks = append(r.NextTicks, next)
			next = d.Spec.Next(next)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

func (c *cli) listSchedules(ctx context.Context, st queueStore, s *schedule.Scheduler, asJSON bool) error {
	rows, err := scheduleRows(ctx, st, s, time.Now())
	if err != nil {
		return err
	}
	if asJSON {
		return c.printJSON(rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(c.stdout, "No schedules in the config.")
		return nil
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "SCHEDULE\tCRON\tZONE\tOVERLAP\tNEXT TICKS (UTC)\tLAST TICK\tLAST RUN\tFIRED\tMISSED\tSKIPPED")
	for _, r := range rows {
		var ticks []string
		for _, t := range r.NextTicks {
			ticks = append(ticks, t.UTC().Format("2006-01-02 15:04:05"))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\n", r.Name, r.Cron, r.Timezone, r.Overlap,
			strings.Join(ticks, ", "), fmtTime(r.LastTick), r.LastState, r.Fired, r.Missed, r.Skipped)
	}
	return tw.Flush()
}

// cliExec is the worker's Executor: it loads the request's plan, checks
// its sha256, and runs it with engine.Engine and runner.Runner.
type cliExec struct {
	c      *cli
	st     queueStore
	wh     warehouse
	f      runFlags
	lookup plan.SecretLookup
	owner  string
	pulse  *pulse.Pulse // the process's: every run's lease is owner's
	log    *slog.Logger
	runs   *runDurations  // nil: not measured
	cfg    *config.Config // for the targets requests name
	tmp    *temporalHost  // the worker's target runs on Temporal: requests become workflow starts
}

// plan reads the request's plan bundle from the state store by the
// sha256 the request recorded, so the worker runs what was enqueued
// wherever it was started. A request enqueued before bundles were stored
// has none: its plan path is read, and refused (PLAN_HASH_MISMATCH) when
// its sha256 is no longer the recorded one.
func (x *cliExec) plan(ctx context.Context, r queue.Request) (*plan.Bundle, error) {
	b, ok, err := storedBundle(ctx, x.st, r.PlanSHA256, r.PlanPath)
	if err != nil || ok {
		return b, err
	}
	return loadPlan(r.PlanPath, r.PlanSHA256)
}

func (x *cliExec) engine(r queue.Request) *engine.Engine {
	eng := x.c.engineFor(x.st)
	eng.Config.TenantID, eng.Config.ProjectID, eng.Config.EnvironmentID = r.TenantID, r.ProjectID, r.EnvironmentID
	eng.Config.TriggeredBy, eng.Config.TriggerSource = x.owner, "queue"
	if r.Schedule != "" {
		eng.Config.TriggeredBy, eng.Config.TriggerSource = "schedule:"+r.Schedule, "schedule"
	}
	return eng
}

// Run implements worker.Executor.
func (x *cliExec) Run(ctx context.Context, r queue.Request, runID string) (engine.RunStatus, error) {
	b, err := x.plan(ctx, r)
	if err != nil {
		return "", err
	}
	p := b.Plan
	sel, err := shapeSelection(p, r.Shape)
	if err != nil {
		return "", err
	}
	// Checked before the run is recorded (or continued), so a missing
	// secret refuses the request with nothing written to the run.
	prep, err := runcore.Prepare(runcore.Input{Plan: p, Shape: engine.RunQueuedRequest{Selection: sel}, Secrets: x.lookup})
	if err != nil {
		return "", err
	}
	if err := prep.CheckSecrets(); err != nil {
		return "", err
	}
	if x.tmp != nil && r.Shape.Target != "" && r.Shape.Target != x.c.targetName() {
		// The workflow's activities run on this worker's warehouse.
		return "", engine.Errorf(engine.CodeConfigInvalid, "the request runs on target %s; this worker starts Temporal workflows for target %s only", engine.QuoteText(r.Shape.Target), engine.QuoteText(x.c.targetName()))
	}
	wh, done, err := x.requestWarehouse(ctx, r.Shape.Target)
	if err != nil {
		return "", err
	}
	defer done()
	eng := x.engine(r)
	resume := true
	switch snap, err := eng.GetRunStatus(ctx, runID); {
	case errors.Is(err, engine.ErrRunNotFound):
		// First claim, or the last holder died before the run existed.
		if _, err := eng.StartRun(ctx, engine.StartRequest{Plan: p, Ref: b.Ref, RunRequestID: r.RunRequestID, RunID: runID,
			Selection: sel, FullRefresh: r.Shape.FullRefresh, Target: r.Shape.Target, Vars: r.Shape.Vars, DataInterval: r.Shape.DataInterval}); err != nil && !errors.Is(err, engine.ErrRunAlreadyExists) {
			return "", err
		}
		resume = false
	case err != nil:
		return "", err
	case snap.Status.Terminal():
		// The last holder finished the run but not the request.
		return snap.Status, nil
	case snap.Status == engine.StatusQueued:
		resume = false
	}
	if x.tmp != nil {
		// Started or joined: the workflow id is the run id recorded with
		// the claim, so a request claimed again has one workflow.
		snap, err := x.tmp.run(ctx, eng, x.f, runID, dvtemporal.StartRun)
		x.ended(p.PlanID, snap)
		return snap.Status, err
	}
	rn := x.c.newRunner(x.st, x.f, nil, x.lookup)
	rn.Config.Config = eng.Config
	rn.Config.Owner = x.owner
	rn.Pulse = x.pulse
	var snap engine.Snapshot
	if resume {
		snap, err = rn.Resume(ctx, runID, p, wh)
	} else {
		snap, err = rn.Execute(ctx, runID, p, wh)
	}
	x.ended(p.PlanID, snap)
	return snap.Status, err
}

// ended measures a run that reached its end in this worker and, for a
// failed one, logs at ERROR which steps failed and the first error: the
// line an operator's log alert looks for.
func (x *cliExec) ended(planID string, snap engine.Snapshot) {
	if !snap.Status.Terminal() {
		return
	}
	x.runs.observe(planID, snap.Status, time.Duration(snap.DurationMs)*time.Millisecond)
	if snap.Status != engine.StatusFailed || x.log == nil {
		return
	}
	var failed []string
	var first *engine.ErrorInfo
	for _, st := range snap.Steps {
		if st.Status == engine.StepStatusFailed {
			failed = append(failed, st.StepID)
			if first == nil {
				first = st.Error
			}
		}
	}
	if first == nil {
		first = snap.Error
	}
	args := []any{"run", snap.RunID, "plan", planID, "failedSteps", failed}
	if first != nil {
		args = append(args, "code", first.Code, "error", x.c.cleanLine(first.Message))
	}
	x.log.Error("run failed", args...)
}

func cmdScheduler(ctx context.Context, c *cli, args []string) error {
	return c.daemon(ctx, "scheduler", args, true, false)
}

func cmdWorker(ctx context.Context, c *cli, args []string) error {
	return c.daemon(ctx, "worker", args, false, true)
}

func cmdServe(ctx context.Context, c *cli, args []string) error {
	return c.daemon(ctx, "serve", args, true, true)
}

// daemon runs the scheduler and/or the worker until ctx ends (SIGTERM),
// then stops them and exits 0.
func (c *cli) daemon(ctx context.Context, name string, args []string, withScheduler, withWorker bool) error {
	var d daemonFlags
	fs := d.register(c, name, withWorker)
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	if err := d.check(withWorker); err != nil {
		return err
	}
	if withWorker && withScheduler && c.onTemporal(d.exec.engine, "") {
		// The scheduler fills dvtrun's queue, which a Temporal worker does
		// not claim: refuse rather than run the ticks locally.
		return engine.Errorf(engine.CodeInvalidArgument, "serve runs the local worker; for Temporal run `dvtrun worker --engine temporal` and start runs with `dvtrun run --engine temporal`")
	}
	cfg, err := c.queueConfig()
	if err != nil {
		return err
	}
	if d.ui { // a console that would start open is refused before anything runs
		if _, err := c.consoleAuth(cfg.Console, d.uiFlags); err != nil {
			return err
		}
	}
	log := c.jsonLogger(name)
	c.waitLog = log
	if c.takeConfigNote() != "" { // the log's first record, not a line of text
		log.Info("configuration", "file", c.g.config, "target", c.targetName())
	}
	st, err := c.openQueueStore(ctx, false)
	if err != nil {
		return err
	}
	defer st.Close()
	if withWorker {
		if d.exec, err = c.withStateStore(d.exec, cfg.StateStore); err != nil {
			return err
		}
	}
	var group service.Group
	m := &metrics{st: st}
	for _, def := range cfg.Schedules {
		m.schedules = append(m.schedules, def.Name)
	}
	if withScheduler {
		s, err := c.newScheduler(st, cfg, d.poll, log)
		if err != nil {
			return err
		}
		m.sched = s.Metrics
		group = append(group, s)
	}
	var w *worker.Worker
	if withWorker {
		lookup, err := c.secretLookup(d.exec.secretsFile)
		if err != nil {
			return err
		}
		wh, _, err := c.openWarehouse(ctx)
		if err != nil {
			return err
		}
		defer wh.Close()
		var tmp *temporalHost
		if c.onTemporal(d.exec.engine, "") {
			// The worker polls the Temporal task queue, and turns the
			// requests it claims from dvtrun's queue into workflow starts.
			tc := c.temporalBlock(cfg)
			tmp, err = c.hostTemporal(ctx, tc, d.exec, sdkworker.Options{MaxConcurrentActivityExecutionSize: max(d.exec.threads, 1)},
				c.temporalActivities(st, wh, lookup, cfg, tc, d.exec.leaseTTL))
			if err != nil {
				return err
			}
			defer tmp.close()
			log.Info("polling Temporal", "address", tc.Address, "namespace", tc.Namespace, "taskQueue", tc.TaskQueue)
		}
		owner := c.ownerID(name)
		// One pulse for all the process's runs: one request per interval
		// renews every lease and fetches every run's signals. It is not in
		// the group: runs outlive SIGTERM within --grace, and it must beat
		// for them until the worker has stopped.
		pl, err := c.newPulse(st, owner, d.exec, cfg, func(err error) { log.Error("pulse failed", "error", err.Error()) })
		if err != nil {
			return err
		}
		if err := pl.Start(context.WithoutCancel(ctx)); err != nil {
			return err
		}
		defer pl.Stop()
		m.pulse = pl
		w = &worker.Worker{
			Store: st, ID: owner, Limits: claimLimits(cfg.Limits), Slots: d.slots,
			HeartbeatTTL: d.exec.leaseTTL, Poll: d.poll, Wakeups: wakeupsOf(st), Grace: d.grace,
			Clock: engine.ClockFunc(time.Now), IDs: engine.IDFunc(newID), Sleep: sleepCtx, Log: log, Metrics: &worker.Counters{},
			Exec: &cliExec{c: c, st: &timedAppends{queueStore: st, lat: &m.appends}, wh: wh, lookup: lookup, owner: owner,
				f: d.exec, pulse: pl, log: log, runs: &m.runs, cfg: cfg, tmp: tmp},
		}
		m.worker = w.Metrics
		// Delivery and the projector go before the worker, so they stop
		// after it: the events of the runs it finishes within --grace
		// are still delivered and projected.
		if len(cfg.Sinks) > 0 {
			if d.delivery.poll == 0 {
				d.delivery.poll = d.poll
			}
			dsvc, closeSinks, err := c.newDelivery(ctx, cfg, d.delivery, st, log.With("service", "delivery"))
			if err != nil {
				return err
			}
			defer closeSinks()
			m.delivery = dsvc
			group = append(group, dsvc)
		}
		m.projector = &projection.Service{
			Store: st, Clock: engine.ClockFunc(time.Now), Interval: d.poll,
			OnError: func(err error) { log.Error("projection failed", "error", err.Error()) },
		}
		group = append(group, m.projector, w)
	}
	if cfg.Audit.Every > 0 {
		asvc, err := c.newAuditService(st, cfg, log)
		if err != nil {
			return err
		}
		group = append(group, asvc)
	}
	// Ready: every service runs, and the worker has its heartbeat and its
	// runs their pulse.
	ready := func() bool { return group.Running() && (w == nil || w.Ready() && m.pulse.Running()) }
	var ui http.Handler
	if d.ui {
		h, closeUI, err := c.consoleHandler(ctx, st, cfg, d.uiFlags)
		if err != nil {
			return err
		}
		defer closeUI()
		ui = h
	}
	srv, err := c.serveHTTP(d.http, m, ready, ui, d.uiFlags.open(cfg.Console), log)
	if err != nil {
		return err
	}
	if err := group.Start(ctx); err != nil {
		return err
	}
	log.Info("started", "schedules", len(cfg.Schedules), "worker", withWorker, "sinks", len(cfg.Sinks), "projector", m.projector != nil, "http", d.http)
	<-ctx.Done()
	log.Info("stopping")
	group.Stop()
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
	log.Info("stopped")
	return nil
}

// serveHTTP serves /livez, /readyz and /metrics, and the console (ui, when
// not nil) on every other path; addr "" serves nothing.
func (c *cli) serveHTTP(addr string, m *metrics, ready func() bool, ui http.Handler, uiOpen bool, log *slog.Logger) (*http.Server, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "--http %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		if err := m.write(r.Context(), w); err != nil {
			log.Error("metrics failed", "error", err.Error())
		}
	})
	if ui != nil {
		mux.Handle("/", ui)
	}
	srv := newHTTPServer(mux)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server failed", "error", err.Error())
		}
	}()
	log.Info("http listening", "addr", ln.Addr().String())
	if ui != nil {
		log.Info("console", "url", "http://"+ln.Addr().String()+"/runs")
	}
	if !isLoopback(ln.Addr()) {
		if ui != nil && uiOpen {
			log.Warn(openConsoleWarning(ln.Addr())+"; and /metrics (plan and schedule names, queue depth)", "addr", ln.Addr().String())
		} else {
			log.Warn("http is served on a non-loopback address: anyone who reaches it can read /metrics (plan and schedule names, queue depth)", "addr", ln.Addr().String())
		}
	}
	return srv, nil
}

// isLoopback reports whether a listener's address is reachable from this
// machine only.
func isLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// metrics writes the Prometheus text exposition by hand: a handful of
// counters and gauges does not need a client library.
type metrics struct {
	st        queueStore
	sched     *schedule.Counters
	worker    *worker.Counters
	pulse     *pulse.Pulse        // nil: no worker
	delivery  *delivery.Service   // nil: no sinks
	projector *projection.Service // nil: no projector
	appends   latency
	runs      runDurations
	schedules []string // the config's schedule names
	mu        sync.Mutex
}

// runDurationBuckets are the histogram's upper bounds in seconds: batch
// runs take seconds to hours.
var runDurationBuckets = []float64{1, 5, 15, 60, 300, 900, 1800, 3600, 7200, 14400}

// runDurations is the histogram of the run durations a worker saw end, by
// plan and final status: both bounded sets (the plans deployed, the
// terminal statuses), never run ids.
type runDurations struct {
	mu sync.Mutex
	by map[[2]string]*histogram
}

type histogram struct {
	counts []int64 // per bucket, not cumulative
	sum    float64
	count  int64
}

func (r *runDurations) observe(plan string, status engine.RunStatus, d time.Duration) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by == nil {
		r.by = map[[2]string]*histogram{}
	}
	k := [2]string{plan, string(status)}
	h := r.by[k]
	if h == nil {
		h = &histogram{counts: make([]int64, len(runDurationBuckets))}
		r.by[k] = h
	}
	sec := d.Seconds()
	for i, b := range runDurationBuckets {
		if sec <= b {
			h.counts[i]++
			break
		}
	}
	h.sum += sec
	h.count++
}

// write prints the histogram in the text exposition format.
func (r *runDurations) write(p func(format string, args ...any)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p("# HELP dvtrun_run_duration_seconds Duration of the runs this worker saw end (RunStarted to the terminal event), by plan and final status.")
	p("# TYPE dvtrun_run_duration_seconds histogram")
	keys := make([][2]string, 0, len(r.by))
	for k := range r.by {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i][0] < keys[j][0] || keys[i][0] == keys[j][0] && keys[i][1] < keys[j][1]
	})
	for _, k := range keys {
		h := r.by[k]
		labels := fmt.Sprintf(`plan="%s",status="%s"`, promLabel(k[0]), promLabel(k[1]))
		var cum int64
		for i, b := range runDurationBuckets {
			cum += h.counts[i]
			p(`dvtrun_run_duration_seconds_bucket{%s,le="%g"} %d`, labels, b, cum)
		}
		p(`dvtrun_run_duration_seconds_bucket{%s,le="+Inf"} %d`, labels, h.count)
		p(`dvtrun_run_duration_seconds_sum{%s} %g`, labels, h.sum)
		p(`dvtrun_run_duration_seconds_count{%s} %d`, labels, h.count)
	}
}

// promLabel escapes a label value for the text exposition format.
func promLabel(v string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
}

// latency sums durations for a Prometheus summary without quantiles.
type latency struct {
	mu    sync.Mutex
	sum   time.Duration
	count int64
}

func (l *latency) add(d time.Duration) {
	l.mu.Lock()
	l.sum += d
	l.count++
	l.mu.Unlock()
}

func (l *latency) get() (time.Duration, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sum, l.count
}

// timedAppends is the worker's runs' state store, timing each append.
type timedAppends struct {
	queueStore
	lat *latency
}

func (t *timedAppends) AppendAndEnqueue(ctx context.Context, runID string, events []engine.RunEventWrite) (engine.AppendResult, error) {
	start := time.Now()
	res, err := t.queueStore.AppendAndEnqueue(ctx, runID, events)
	t.lat.add(time.Since(start))
	return res, err
}

// AppendFenced is the runner's append once it holds a fenced lease.
func (t *timedAppends) AppendFenced(ctx context.Context, lease engine.Lease, events []engine.RunEventWrite) (engine.AppendResult, error) {
	start := time.Now()
	res, err := t.queueStore.AppendFenced(ctx, lease, events)
	t.lat.add(time.Since(start))
	return res, err
}

func (m *metrics) write(ctx context.Context, w interface{ Write([]byte) (int, error) }) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	list, err := m.st.ListRequests(ctx, true)
	if err != nil {
		return err
	}
	byState := map[string]int{}
	outcomes := map[string]int{}
	var oldest time.Time
	for _, r := range list {
		byState[string(r.State)]++
		if r.Outcome != "" {
			outcomes[r.Outcome]++
		}
		if r.State == queue.StatePending && (oldest.IsZero() || r.EnqueuedAt.Before(oldest)) {
			oldest = r.EnqueuedAt
		}
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("# HELP dvtrun_queue_requests Run requests by state.")
	p("# TYPE dvtrun_queue_requests gauge")
	for _, s := range []queue.State{queue.StatePending, queue.StateClaimed, queue.StateRunning, queue.StateDone, queue.StateCancelled} {
		p(`dvtrun_queue_requests{state="%s"} %d`, s, byState[string(s)])
	}
	p("# HELP dvtrun_queue_oldest_pending_age_seconds Age of the oldest waiting request.")
	p("# TYPE dvtrun_queue_oldest_pending_age_seconds gauge")
	age := 0.0
	if !oldest.IsZero() {
		age = time.Since(oldest).Seconds()
	}
	p("dvtrun_queue_oldest_pending_age_seconds %g", age)
	p("# HELP dvtrun_runs Finished run requests by the run's final status.")
	p("# TYPE dvtrun_runs gauge")
	keys := make([]string, 0, len(outcomes))
	for k := range outcomes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p(`dvtrun_runs{status="%s"} %d`, k, outcomes[k])
	}
	if m.worker != nil {
		s := m.worker.Snapshot()
		counter := func(name, help string, v int64) {
			p("# HELP %s %s", name, help)
			p("# TYPE %s counter", name)
			p("%s %d", name, v)
		}
		counter("dvtrun_worker_claims_total", "Requests this worker claimed.", s.Claims)
		counter("dvtrun_worker_takeovers_total", "Claims of a request whose owner stopped heart-beating.", s.Takeovers)
		counter("dvtrun_worker_runs_completed_total", "Runs this worker saw COMPLETED.", s.Completed)
		counter("dvtrun_worker_runs_failed_total", "Runs this worker saw end otherwise.", s.Failed)
		counter("dvtrun_worker_released_total", "Requests handed back.", s.Released)
		p("# HELP dvtrun_worker_claim_latency_seconds Time of a successful claim transaction.")
		p("# TYPE dvtrun_worker_claim_latency_seconds summary")
		p("dvtrun_worker_claim_latency_seconds_sum %g", s.ClaimLatencySum.Seconds())
		p("dvtrun_worker_claim_latency_seconds_count %d", s.ClaimLatencyCount)
		sum, n := m.appends.get()
		p("# HELP dvtrun_store_append_latency_seconds Time of the runs' event appends (AppendAndEnqueue, AppendFenced).")
		p("# TYPE dvtrun_store_append_latency_seconds summary")
		p("dvtrun_store_append_latency_seconds_sum %g", sum.Seconds())
		p("dvtrun_store_append_latency_seconds_count %d", n)
		p("# HELP dvtrun_worker_running Runs in flight in this worker.")
		p("# TYPE dvtrun_worker_running gauge")
		p("dvtrun_worker_running %d", s.Running)
	}
	if m.pulse != nil {
		p("# HELP dvtrun_pulse_requests_total State-store requests of this process's pulse (each renews every run's lease and fetches their signals).")
		p("# TYPE dvtrun_pulse_requests_total counter")
		p(`dvtrun_pulse_requests_total{outcome="ok"} %d`, m.pulse.Calls()-m.pulse.Failures())
		p(`dvtrun_pulse_requests_total{outcome="failed"} %d`, m.pulse.Failures())
	}
	if m.delivery != nil {
		t := m.delivery.Totals()
		p("# HELP dvtrun_delivery_total Outbox deliveries to the sinks by outcome (failed counts attempts; dead, dead letters).")
		p("# TYPE dvtrun_delivery_total counter")
		p(`dvtrun_delivery_total{outcome="delivered"} %d`, t.Delivered)
		p(`dvtrun_delivery_total{outcome="failed"} %d`, t.Failed)
		p(`dvtrun_delivery_total{outcome="dead"} %d`, t.Dead)
	}
	if m.projector != nil {
		p("# HELP dvtrun_projector_lag_seconds Age of the oldest event the projector's last poll fetched anew (0: nothing new).")
		p("# TYPE dvtrun_projector_lag_seconds gauge")
		p("dvtrun_projector_lag_seconds %g", m.projector.Lag().Seconds())
	}
	if m.worker != nil {
		m.runs.write(p)
	}
	if len(m.schedules) > 0 {
		// From the store, not from this process: whichever replica ran the
		// schedule's last good run, and across restarts.
		p("# HELP dvt_schedule_last_success_timestamp_seconds When the newest COMPLETED run of a schedule ended (absent: none yet).")
		p("# TYPE dvt_schedule_last_success_timestamp_seconds gauge")
		for _, name := range m.schedules {
			runs, err := m.st.ListRuns(ctx, store.RunFilter{Schedule: name, Status: engine.StatusCompleted, Limit: 1})
			if err != nil {
				return err
			}
			if len(runs) == 1 && !runs[0].EndedAt.IsZero() {
				p(`dvt_schedule_last_success_timestamp_seconds{schedule="%s"} %d`, promLabel(name), runs[0].EndedAt.Unix())
			}
		}
	}
	if m.sched != nil {
		s := m.sched.Snapshot()
		p("# HELP dvtrun_schedule_ticks_total Schedule ticks by outcome.")
		p("# TYPE dvtrun_schedule_ticks_total counter")
		p(`dvtrun_schedule_ticks_total{outcome="fired"} %d`, s.Fired)
		p(`dvtrun_schedule_ticks_total{outcome="missed"} %d`, s.Missed)
		p(`dvtrun_schedule_ticks_total{outcome="skipped_overlap"} %d`, s.Skipped)
	}
	return nil
}
