package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/config"
	"github.com/dvtrun/dvtrun/engine/plan"
	runcore "github.com/dvtrun/dvtrun/engine/run"
	"github.com/dvtrun/dvtrun/engine/runner"
	"github.com/dvtrun/dvtrun/engine/spool"
)

func newID() string      { return uuid.NewString() }
func randFloat() float64 { return rand.Float64() }

// sleepCtx is the services' Sleep: a real timer.
var sleepCtx = engine.Sleep

// osSource reads plan files from the file system.
type osSource = plan.OSFiles

// loadPlan reads the plan bundle (the plan and every file it references)
// and runs every check a run makes before anything is written; with wantSHA
// it also refuses a bundle whose sha256 is not that.
func loadPlan(path, wantSHA string) (*plan.Bundle, error) {
	b, err := plan.LoadBundle(osSource{}, path)
	if err != nil {
		return nil, err
	}
	if wantSHA != "" {
		if err := b.Ref.CheckSHA256(wantSHA); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// secretLookup resolves secrets at step time: DVT_SECRET_<NAME> from the
// environment first, then the secrets file. Every value handed out is
// remembered for redaction.
func (c *cli) secretLookup(file string) (plan.SecretLookup, error) {
	fileVals := map[string]string{}
	if file != "" {
		var err error
		if fileVals, err = readSecretsFile(file); err != nil {
			return nil, err
		}
		for _, v := range fileVals {
			c.addSecret(v)
		}
	}
	return func(name string) (string, bool) {
		if v := c.env("DVT_SECRET_" + name); v != "" {
			c.addSecret(v)
			return v, true
		}
		v, ok := fileVals[name]
		return v, ok
	}, nil
}

// varsHelp is --vars' usage, the same wherever it is taken.
const varsHelp = "the run's variables for {{ var('NAME') }}: a `YAML` or JSON mapping, e.g. '{\"region\": \"eu\"}' (dbt's --vars)"

// readSecretsFile reads KEY=VALUE lines; blank lines and # comments are
// skipped. Errors name the line, never a value.
func readSecretsFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "cannot read the secrets file %s: %v", path, plan.PathErr(err))
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || !secretKeyRE.MatchString(k) {
			return nil, engine.Errorf(engine.CodeInvalidArgument, "secrets file %s line %d: want KEY=VALUE with KEY of letters, digits and _", path, n)
		}
		out[k] = strings.TrimSpace(v)
	}
	return out, nil
}

var secretKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// runFlags are shared by run and resume.
type runFlags struct {
	threads     int
	failFast    bool
	secretsFile string
	leaseTTL    time.Duration
	pulse       time.Duration // 0: the config's, else the store's default
	targetPath  string
	// writeBudget and spoolDir: 0/"" defer to the config file's
	// stateStore section; withStateStore resolves them and opens spool.
	writeBudget time.Duration
	spoolDir    string
	spool       *spool.Dir
	// engine is --engine: local (the runner in this process) or temporal.
	engine string
	// ranOn (retry) is the engine the retried run started on: the new run
	// executes there unless --engine says otherwise.
	ranOn string
}

func (f *runFlags) register(fs *flag.FlagSet) {
	f.registerExec(fs)
	fs.BoolVar(&f.failFast, "fail-fast", false, "stop scheduling new steps after the first failure")
	fs.StringVar(&f.targetPath, "target-path", "", "write run_results.json into `DIR` (env DVT_TARGET_PATH; default runs/RUN_ID next to an SQLite state store, else .dvt/runs/RUN_ID)")
}

// registerExec defines how a run executes: the flags `run`/`resume` share
// with the worker, which runs its claimed requests the same way.
func (f *runFlags) registerExec(fs *flag.FlagSet) {
	fs.IntVar(&f.threads, "threads", 4, "run up to `N` steps in parallel")
	fs.StringVar(&f.engine, "engine", "", "`ENGINE` that executes the run: local or temporal, a workflow per run on the target's (else the config's) temporal server (env DVT_ENGINE; default: the target's engine, else local)")
	fs.StringVar(&f.secretsFile, "secrets-file", "", "`FILE` of KEY=VALUE secrets (DVT_SECRET_<NAME> in the environment wins)")
	// A runner that dies keeps its lease until it expires; then `resume`
	// (from any machine) or another worker may take the run over.
	fs.DurationVar(&f.leaseTTL, "lease-ttl", 30*time.Second, "how long a run's lease (and a worker's claim) outlives a runner that stopped heart-beating")
	fs.DurationVar(&f.pulse, "pulse-interval", 0, pulseHelp)
	// ExecutionSemantics §5; a flag wins over the config's stateStore.
	fs.DurationVar(&f.writeBudget, "write-budget", 0, "how long an event may wait to be stored: a StepStarted that waits longer is spooled, a completion never is (default: the config's stateStore.writeLatencyBudgetMs, else 3s)")
	fs.StringVar(&f.spoolDir, "spool-dir", "", "keep StepStarted events the store did not take within the budget in `DIR` until they are appended (env DVT_SPOOL_DIR; default: the config's stateStore.spoolDir, else spool/ next to the runs' artifacts): put it on another disk than the store's")
}

func (f runFlags) check() error {
	if err := checkEngine(f.engine); err != nil {
		return err
	}
	if f.threads < 1 {
		return engine.Errorf(engine.CodeInvalidArgument, "--threads must be at least 1")
	}
	if f.leaseTTL < time.Second {
		return engine.Errorf(engine.CodeInvalidArgument, "--lease-ttl must be at least 1s")
	}
	if f.pulse != 0 && (f.pulse < config.MinPulseInterval || f.pulse > f.leaseTTL/3) {
		return engine.Errorf(engine.CodeInvalidArgument, "--pulse-interval must be between %s and a third of --lease-ttl (%s)", config.MinPulseInterval, f.leaseTTL/3)
	}
	if f.writeBudget != 0 && (f.writeBudget < config.WriteBudgetMin || f.writeBudget > config.WriteBudgetMax) {
		return engine.Errorf(engine.CodeInvalidArgument, "--write-budget must be between %v and %v", config.WriteBudgetMin, config.WriteBudgetMax)
	}
	return nil
}

// withStateStore resolves the write budget and the spool directory (the
// flags, else DVT_SPOOL_DIR for the spool, else the config file's
// stateStore section, else the defaults)
// and opens the spool. The default spool sits next to the runs' artifact
// directories: spool/ beside runs/.
func (c *cli) withStateStore(f runFlags, s config.StateStore) (runFlags, error) {
	f.writeBudget = cmp.Or(f.writeBudget, s.WriteBudget())
	dir := cmp.Or(f.spoolDir, c.env("DVT_SPOOL_DIR"), relativeTo(c.g.config, s.SpoolDir), filepath.Join(c.localStoreDir(), "spool"))
	sp, err := spool.Open(dir)
	var e *engine.Error
	switch {
	case err == nil:
		f.spool = sp
		return f, nil
	case f.spoolDir != "":
		return f, fmt.Errorf("--spool-dir: %w", err)
	case c.env("DVT_SPOOL_DIR") != "":
		return f, fmt.Errorf("DVT_SPOOL_DIR: %w", err)
	case s.SpoolDir != "" && errors.As(err, &e):
		return f, engine.Errorf(engine.CodeConfigInvalid, "%s: stateStore.spoolDir: %s", c.g.config, e.Msg)
	}
	return f, fmt.Errorf("the default spool: %w; choose another with --spool-dir or the config's stateStore.spoolDir", err)
}

// newRunner is the runner of `run` and `resume`, with the clock and ID
// source of engineFor.
func (c *cli) newRunner(st stateStore, f runFlags, obs runner.Observer, lookup plan.SecretLookup) *runner.Runner {
	eng := c.engineFor(st)
	host, _ := os.Hostname()
	rn := &runner.Runner{
		Log:       st,
		Clock:     eng.Clock,
		IDs:       eng.IDs,
		Rand:      randFloat,
		Sleep:     sleepCtx,
		Secrets:   lookup,
		Observe:   obs,
		Artifacts: artifactFiles{c: c, dir: cmp.Or(f.targetPath, c.env("DVT_TARGET_PATH")), runs: c.runsDir(), say: c.sayArtifacts()},
		Config: runner.Config{
			Config:      eng.Config,
			Threads:     f.threads,
			FailFast:    f.failFast,
			LeaseTTL:    f.leaseTTL,
			WriteBudget: f.writeBudget,
			Owner:       fmt.Sprintf("dvtrun@%s:%d", host, os.Getpid()),
		},
	}
	if f.spool != nil { // a nil *spool.Dir is not a nil Spool
		rn.Spool = f.spool
	}
	return rn
}

func cmdRun(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("run", "PLAN", "Run a plan: validate it, record the run, execute its steps on the warehouse.\n"+exitCodesHelp)
	var f runFlags
	f.register(fs)
	var sf selectFlags
	sf.register(fs)
	reqID := fs.String("run-request-id", "", "the caller's `ID` for this run request (recorded with the run)")
	wantSHA := fs.String("plan-sha256", "", "refuse the plan unless its file hashes to `HEX` (PLAN_HASH_MISMATCH)")
	fullRefresh := fs.Bool("full-refresh", false, "rebuild incremental models from their full select instead of merging new rows")
	varsFlag := fs.String("vars", "", varsHelp)
	intervalFlag := fs.String("interval", "", "the data interval a run by hand covers, `START/END` (RFC 3339 times or dates, UTC; END excluded), as a schedule's tick gives one: {{ data_interval_start }}, {{ logical_date }}…")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if err := f.check(); err != nil {
		return err
	}
	vars, err := plan.ParseVars(*varsFlag)
	if err != nil {
		return err
	}
	interval, err := parseInterval(*intervalFlag)
	if err != nil {
		return err
	}
	b, err := loadPlan(pos[0], *wantSHA)
	if err != nil {
		return err
	}
	p := b.Plan
	sel, err := c.choose(p, sf, true)
	if err != nil {
		return err
	}
	return c.startAndExecute(ctx, f, b, engine.StartRequest{Plan: p, Ref: b.Ref, RunRequestID: *reqID, Selection: sel, FullRefresh: *fullRefresh, Target: c.targetName(), Vars: vars, DataInterval: interval}, "")
}

// parseInterval reads --interval START/END (ISO 8601's interval notation):
// each end an RFC 3339 time or a date (midnight UTC); "" is none.
func parseInterval(v string) (*engine.DataInterval, error) {
	if v == "" {
		return nil, nil
	}
	bad := func(why string) error {
		return engine.Errorf(engine.CodeInvalidArgument, "--interval %s: %s (want START/END, e.g. 2026-11-25/2026-11-26 or 2026-11-25T00:00:00Z/2026-11-25T06:00:00Z)", engine.QuoteText(v), why)
	}
	a, z, ok := strings.Cut(v, "/")
	if !ok {
		return nil, bad("no '/' between start and end")
	}
	var ends [2]time.Time
	for i, s := range []string{a, z} {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			if t, err = time.Parse(time.DateOnly, s); err != nil {
				return nil, bad(fmt.Sprintf("%q is neither an RFC 3339 time nor a date", s))
			}
		}
		ends[i] = t.UTC()
	}
	if !ends[0].Before(ends[1]) {
		return nil, bad("the start is not before the end")
	}
	return &engine.DataInterval{Start: ends[0].Format(engine.TimeFormat), End: ends[1].Format(engine.TimeFormat), Timezone: "UTC"}, nil
}

// startAndExecute stores the bundle b, records a new run of its plan
// (selected or not) and executes it; intro, when set, is printed once the
// run id is known.
func (c *cli) startAndExecute(ctx context.Context, f runFlags, b *plan.Bundle, req engine.StartRequest, intro string) error {
	p := b.Plan
	lookup, err := c.secretLookup(f.secretsFile)
	if err != nil {
		return err
	}
	// Checked before the run is recorded: the run as the runner will
	// prepare it (no warehouse yet: plain names).
	prep, err := runcore.Prepare(runcore.Input{Plan: p, Secrets: lookup,
		Shape: engine.RunQueuedRequest{Selection: req.Selection, Vars: req.Vars, DataInterval: req.DataInterval}})
	if err != nil {
		return err
	}
	if err := prep.CheckSecrets(); err != nil {
		return err
	}
	if err := prep.CheckContext(); err != nil {
		return err
	}
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	if _, err := c.pulseInterval(f, cfg); err != nil { // refused before the run is recorded
		return err
	}
	st, wh, targetName, err := c.openBoth(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	defer wh.Close()
	// After the store, whose errors say more (the default spool is beside it).
	if f, err = c.withStateStore(f, cfg.StateStore); err != nil {
		return err
	}
	// Before the run is recorded: a run's bundle is always there to resume
	// or retry it from any directory or machine.
	if err := storeBundle(ctx, st, b); err != nil {
		return err
	}
	var host *temporalHost
	if c.onTemporal(f.engine, f.ranOn) {
		// Connected before the run is recorded: a frontend that is down,
		// a wrong TLS file or API key, or a server that refuses them,
		// leaves no run behind.
		if host, err = c.startOnTemporal(ctx, f, cfg, st, wh, lookup); err != nil {
			return err
		}
		defer host.close()
	}
	con := newConsole(c, targetName)
	runID, err := c.engineFor(st).StartRun(ctx, req)
	if err != nil {
		return err
	}
	n := len(prep.Full.Steps) // ephemeral models are not steps of the run
	steps := fmt.Sprintf("%d steps", n)
	if req.Selection != nil {
		steps = fmt.Sprintf("%d of %d steps selected", len(req.Selection.Steps), n)
	}
	fmt.Fprintf(c.stdout, "Running plan %s@%s (%s) as run %s\n", c.clean(p.PlanID), c.clean(p.PlanVersion), steps, c.clean(runID))
	if intro != "" {
		fmt.Fprintln(c.stdout, c.clean(intro))
	}
	con.start = time.Now()
	rn := c.newRunner(st, f, con, lookup)
	if host != nil {
		steps := prep.Full
		con.Report(runner.Progress{Phase: runner.PhaseRunStarted, RunID: runID, Threads: f.threads, Total: len(steps.Steps)})
		snap, err := c.executeOnTemporal(ctx, host, f, st, rn, runID)
		reportSteps(con, steps, snap)
		return c.finishRun(ctx, con, runID, snap, err)
	}
	rn.Signals = cfg.Signals
	stopPulse, err := c.joinPulse(ctx, rn, st, f, cfg)
	if err != nil {
		return err
	}
	defer stopPulse()
	snap, err := rn.Execute(ctx, runID, p, wh)
	return c.finishRun(ctx, con, runID, snap, err)
}

func cmdResume(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("resume", "RUN_ID [PLAN]", "Continue an interrupted run from its event log: no SUCCESS step runs again. It runs the plan bundle\nthe state store kept for the run; given PLAN, it first checks that PLAN is that bundle (same sha256,\nelse PLAN_HASH_MISMATCH naming what changed). A run recorded before bundles were stored needs PLAN.")
	var f runFlags
	f.register(fs)
	wait := fs.Duration("wait", 0, "while another runner's lease holds the run (a runner that died keeps it for --lease-ttl), wait up to `D` for it instead of exiting 3")
	pos, err := c.parse(fs, args, 1, 2)
	if err != nil {
		return err
	}
	if err := f.check(); err != nil {
		return err
	}
	if *wait < 0 {
		return engine.Errorf(engine.CodeInvalidArgument, "--wait must not be negative")
	}
	var b *plan.Bundle
	if len(pos) == 2 {
		if b, err = loadPlan(pos[1], ""); err != nil {
			return err
		}
	}
	lookup, err := c.secretLookup(f.secretsFile)
	if err != nil {
		return err
	}
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	st, err := c.openStore(ctx, true)
	if err != nil {
		return err
	}
	defer st.Close()
	if f, err = c.withStateStore(f, cfg.StateStore); err != nil {
		return err
	}
	meta, err := c.loadRun(ctx, st, pos[0])
	if err != nil {
		return err
	}
	recorded, err := engine.RecordedRequest(ctx, st, meta)
	if err != nil {
		return err
	}
	if b == nil {
		if b, err = c.runBundle(ctx, st, meta, recorded.PlanRef, "resume"); err != nil {
			return err
		}
	} else if err := b.Ref.Compare(recorded.PlanRef); err != nil {
		return fmt.Errorf("run %s: %w", meta.RunID, err)
	} else if err := storeBundle(ctx, st, b); err != nil { // a run from before bundles gets its own
		return err
	}
	p := b.Plan
	// Before the runner takes the lease or writes an event.
	prep, err := runcore.Prepare(runcore.Input{Plan: b.Plan, Shape: recorded, Secrets: lookup})
	if err == nil {
		err = prep.CheckSecrets()
	}
	if err != nil {
		return fmt.Errorf("run %s: %w", meta.RunID, err)
	}
	// Terminal runs are immutable: say so instead of printing an empty run.
	snap, err := c.engineFor(st).GetRunStatus(ctx, meta.RunID)
	if err != nil {
		return err
	}
	switch {
	case snap.Status == engine.StatusCompleted:
		fmt.Fprintf(c.stdout, "Run %s is already COMPLETED: nothing to resume.\n", c.clean(meta.RunID))
		return nil
	case snap.Status.Terminal():
		return engine.Errorf(engine.CodeInvalidArgument, "run %s is already %s and cannot be resumed; start a new run", meta.RunID, snap.Status)
	}
	// The run continues where it ran: its target's warehouse.
	if err := c.useRecordedTarget(meta.RunID, recorded.Target); err != nil {
		return err
	}
	wh, targetName, err := c.openWarehouseHeldBy(ctx, c.previousHolder(ctx, st, meta.RunID))
	if err != nil {
		return err
	}
	defer wh.Close()
	con := newConsole(c, targetName)
	// A run that started on Temporal resumes there (its workflow, joined or
	// started anew), unless --engine says otherwise.
	events, err := st.ListEvents(ctx, meta.RunID, 0, 0)
	if err != nil {
		return err
	}
	if c.onTemporal(f.engine, startedOn(events)) {
		fmt.Fprintf(c.stdout, "Resuming run %s of plan %s@%s on Temporal\n", c.clean(meta.RunID), c.clean(p.PlanID), c.clean(p.PlanVersion))
		con.start = time.Now()
		snap, err := c.resumeOnTemporal(ctx, f, cfg, st, wh, lookup, meta.RunID)
		reportSteps(con, prep.Full, snap)
		return c.finishRun(ctx, con, meta.RunID, snap, err)
	}
	rn := c.newRunner(st, f, con, lookup)
	rn.Signals = cfg.Signals
	stopPulse, err := c.joinPulse(ctx, rn, st, f, cfg)
	if err != nil {
		return err
	}
	defer stopPulse()
	fmt.Fprintf(c.stdout, "Resuming run %s of plan %s@%s\n", c.clean(meta.RunID), c.clean(p.PlanID), c.clean(p.PlanVersion))
	deadline := time.Now().Add(*wait)
	for {
		con.start = time.Now() // the wait for the lease is not the run's
		snap, err = rn.Resume(ctx, meta.RunID, p, wh)
		if !errors.Is(err, engine.ErrLeaseHeld) {
			break
		}
		// Nothing was written: the lease is taken before any event.
		if err := c.waitForLease(ctx, st, meta.RunID, deadline, *wait); err != nil {
			return err
		}
	}
	return c.finishRun(ctx, con, meta.RunID, snap, err)
}

// waitForLease sleeps until the run's lease expires (a step at most, then
// the caller tries again), printing who holds it until when; past deadline
// it returns LEASE_HELD with what to do next.
func (c *cli) waitForLease(ctx context.Context, st stateStore, runID string, deadline time.Time, budget time.Duration) error {
	l, ok, err := st.GetLease(ctx, runID)
	if err != nil {
		return err
	}
	if !ok { // released meanwhile: try again at once
		return nil
	}
	left := time.Until(deadline)
	if left <= 0 {
		hint := "retry once it expires, or wait for it with --wait " + roundUp(time.Until(l.ExpiresAt)+2*time.Second).String()
		if budget > 0 {
			hint = "--wait " + budget.String() + " ran out"
		}
		return engine.Errorf(engine.CodeLeaseHeld, "run %s is owned by %s until %s (in %s); a runner that died keeps its lease that long: %s",
			runID, c.clean(l.Owner), l.ExpiresAt.UTC().Format(time.RFC3339), roundUp(time.Until(l.ExpiresAt)), hint)
	}
	step := min(max(time.Until(l.ExpiresAt)+200*time.Millisecond, 200*time.Millisecond), left, 5*time.Second)
	fmt.Fprintf(c.stderr, "dvtrun: waiting for the lease of run %s: held by %s until %s (%s left of --wait)\n",
		c.clean(runID), c.clean(l.Owner), l.ExpiresAt.UTC().Format(time.RFC3339), roundUp(left))
	return sleepCtx(ctx, step)
}

// roundUp is d rounded up to a whole second, for messages.
func roundUp(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Second - 1).Truncate(time.Second)
}

// previousHolder names, in a wait for the warehouse's lock, the runner
// that held the run's lease before this resume: a stopped runner still
// holding its step's write transaction is the likely holder. nil when the
// store knows of none.
func (c *cli) previousHolder(ctx context.Context, st stateStore, runID string) func(*engine.LockWait) {
	l, ok, err := st.GetLease(ctx, runID)
	if err != nil || !ok || l.Owner == "" {
		return nil
	}
	return func(w *engine.LockWait) {
		w.RunID = runID
		w.Holder = fmt.Sprintf("%s (most likely: the run's runner until its lease ran out at %s)", l.Owner, l.ExpiresAt.UTC().Format(time.RFC3339))
	}
}

// finishRun prints the summary and turns the outcome into an exit code.
// The run's bundle is stored: resuming it needs no plan path.
func (c *cli) finishRun(ctx context.Context, con *console, runID string, snap engine.Snapshot, err error) error {
	resume := "dvtrun resume " + runID
	if ctx.Err() != nil {
		finished := countSteps(snap, engine.StepStatusSuccess) + countSteps(snap, engine.StepStatusFailed) + countSteps(snap, engine.StepStatusSkipped)
		con.summary(runEnd{interrupted: true, resume: resume, inFlight: countSteps(snap, engine.StepStatusRunning), finished: finished})
		return &exitError{code: exitInterrupted, err: engine.Errorf(codeInterrupted, "run %s interrupted; continue it with `%s`", runID, resume)}
	}
	if err != nil {
		// The exit code follows from err's code (exitCode): a store or
		// warehouse outage leaves the run resumable (4), a corrupt store
		// is an operational failure (1).
		switch {
		case engine.CodeOf(err) != engine.CodeStoreUnavailable:
		case snap.Status.Terminal():
			// Failed to start (a workflow Temporal did not start): no
			// resume; the error says what was unreachable.
			fmt.Fprintf(c.stdout, "Run %s %s: it could not start\n", c.clean(runID), snap.Status)
		default:
			// The error line names what is unavailable: the warehouse, the
			// state store or the Temporal frontend.
			fmt.Fprintf(c.stdout, "Stopped: what the error below names is unavailable. Once it is back, continue with: %s\n", resume)
		}
		return err
	}
	end := runEnd{status: snap.Status, resume: resume}
	if snap.Error != nil {
		end.reason = snap.Error.Message
	}
	con.summary(end)
	fmt.Fprintf(c.stdout, "Run %s %s\n", c.clean(runID), snap.Status)
	return runOutcome(runID, snap)
}

// countSteps counts the steps of snap in status st.
func countSteps(snap engine.Snapshot, st engine.StepStatus) int {
	n := 0
	for _, s := range snap.Steps {
		if s.Status == st {
			n++
		}
	}
	return n
}

// runOutcome turns a run's final status into the command's result: nil
// for COMPLETED, an exit-1 error naming what went wrong otherwise. `run`,
// `resume` and `status --follow` end alike.
func runOutcome(runID string, snap engine.Snapshot) error {
	switch snap.Status {
	case engine.StatusCompleted:
		return nil
	case engine.StatusFailed:
		var failed []string
		skipped := 0
		for _, s := range snap.Steps {
			switch s.Status {
			case engine.StepStatusFailed:
				failed = append(failed, s.StepID)
			case engine.StepStatusSkipped:
				skipped++
			}
		}
		msg := fmt.Sprintf("run %s failed", runID)
		if len(failed) > 0 {
			msg += fmt.Sprintf(": %d failed (%s), %d step(s) skipped", len(failed), engine.JoinLimited(failed, ", ", 10), skipped)
		} else if snap.Error != nil {
			msg += ": " + snap.Error.Message
		}
		return &exitError{code: exitFailed, err: engine.Errorf(engine.CodeStepFailed, "%s", msg)}
	case engine.StatusCancelled:
		return &exitError{code: exitFailed, err: engine.Errorf(engine.CodeStepCancelled, "run %s was cancelled", runID)}
	default:
		return &exitError{code: exitFailed, err: engine.Errorf(engine.CodeStepFailed, "run %s stopped in status %s; continue it with `dvtrun resume %s`", runID, snap.Status, runID)}
	}
}

// console prints the runner's progress in dbt's console style. The runner
// reports from several goroutines: every write holds mu.
type console struct {
	c      *cli
	w      io.Writer
	target string // the config's target, "" without one
	// adapter is the warehouse's kind (sqlite, postgres, snowflake).
	adapter string
	start   time.Time

	mu                     sync.Mutex
	total                  int
	pass, warn, errs, skip int
	cancelled              int // steps a CANCEL stopped in flight: not errors
	failures               []string

	// On a terminal, a live line at the bottom names the steps running
	// longer than liveAfter; every other line first erases it.
	tty       bool
	running   map[string]time.Time // step id -> when it started here
	liveShown bool
	stopLive  chan struct{}
}

// liveAfter is how long a step runs before the live line names it: quick
// steps would only flicker.
const liveAfter = 3 * time.Second

func newConsole(c *cli, adapter string) *console {
	o := &console{c: c, w: c.stdout, target: c.targetName(), adapter: adapter, start: time.Now(), running: map[string]time.Time{}}
	if isTerminal(c.stdout) {
		o.tty = true
		o.stopLive = make(chan struct{})
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-o.stopLive:
					return
				case now := <-t.C:
					o.mu.Lock()
					o.drawLive(now)
					o.mu.Unlock()
				}
			}
		}()
	}
	return o
}

// drawLive redraws the live line: the steps running for liveAfter or more,
// longest first, with their time so far. Callers hold mu.
func (o *console) drawLive(now time.Time) {
	type run struct {
		id string
		d  time.Duration
	}
	var long []run
	for id, at := range o.running {
		if d := now.Sub(at); d >= liveAfter {
			long = append(long, run{id, d})
		}
	}
	o.clearLive()
	if len(long) == 0 {
		return
	}
	sort.Slice(long, func(i, j int) bool { return long[i].d > long[j].d || long[i].d == long[j].d && long[i].id < long[j].id })
	parts := make([]string, len(long))
	for i, r := range long {
		parts[i] = fmt.Sprintf("%s %ds", r.id, int(r.d.Seconds()))
	}
	line := "  running: " + strings.Join(parts, ", ")
	if len(line) > 100 {
		line = line[:97] + "..."
	}
	fmt.Fprint(o.w, o.c.clean(line))
	o.liveShown = true
}

// clearLive erases the live line, if shown, so the next line takes its
// place. Callers hold mu.
func (o *console) clearLive() {
	if o.liveShown {
		fmt.Fprint(o.w, "\r\x1b[K")
		o.liveShown = false
	}
}

// statusColors colour a step line's [STATUS] by its first word, on a
// terminal only; the word itself always says it.
var statusColors = map[string]string{
	"OK": "32", "PASS": "32", "INSERT": "32",
	"WARN": "33", "SKIP": "33", "CANCELLED": "33",
	"ERROR": "31", "FAIL": "31",
}

// statusColumn is where the [STATUS] of a step line starts, as in dbt: the
// message is padded with dots so that statuses line up.
const statusColumn = 72

// line writes `left ..... right`, right starting at statusColumn.
func (o *console) line(left, right string) {
	left = o.c.clean(left)
	dots := statusColumn - len(left) - 2
	if dots < 3 {
		dots = 3
	}
	word, _, _ := strings.Cut(strings.TrimPrefix(right, "["), " ")
	if code, ok := statusColors[strings.TrimSuffix(word, "]")]; ok {
		right = o.c.colored(code, right)
	}
	o.clearLive()
	fmt.Fprintf(o.w, "%s %s %s\n", left, strings.Repeat(".", dots), right)
}

func describe(s plan.Step) string {
	rel := s.Relation()
	switch s.Kind {
	case plan.KindSeed:
		return "seed file " + rel
	case plan.KindModel:
		m := s.Materialized
		if m == "" {
			m = plan.MaterializedView // dbt's default, and the runner's
		}
		return "sql " + m + " model " + rel
	case plan.KindTest:
		return "test " + rel
	default:
		return "sql operation " + rel
	}
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

func (o *console) Report(p runner.Progress) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.clearLive() // redrawn within a second
	prefix := ""
	if p.Index > 0 && p.Total > 0 {
		prefix = fmt.Sprintf("%d of %d ", p.Index, p.Total)
	}
	rel := p.Step.Relation()
	switch p.Phase {
	case runner.PhaseRunStarted:
		o.total = p.Total
		// dbt names the target here; the adapter follows, and stands
		// alone when no config target was chosen.
		if o.target != "" {
			fmt.Fprintf(o.w, "Concurrency: %d threads (target='%s', adapter='%s')\n\n", p.Threads, o.c.clean(o.target), o.adapter)
		} else {
			fmt.Fprintf(o.w, "Concurrency: %d threads (adapter='%s')\n\n", p.Threads, o.adapter)
		}
	case runner.PhaseStepStarted:
		again := ""
		if p.EngineAttempt > 1 {
			// A step an earlier runner left in flight, run again on resume.
			again = fmt.Sprintf(" (engine attempt %d)", p.EngineAttempt)
		}
		o.running[p.Step.ID] = time.Now()
		o.line(prefix+"START "+describe(p.Step)+again, "[RUN]")
	case runner.PhaseStepRetry:
		msg := ""
		if p.Err != nil {
			msg = ": " + oneLine(o.c.redact(p.Err.Error()))
		}
		fmt.Fprintf(o.w, "%sRETRY %s (engine attempt %d)%s\n", prefix, o.c.clean(describe(p.Step)), p.EngineAttempt, o.c.clean(msg))
	case runner.PhaseStepDone:
		delete(o.running, p.Step.ID)
		o.stepDone(p, prefix, rel)
	case runner.PhaseSignal:
		o.signal(p)
	case runner.PhaseDrained:
		fmt.Fprintln(o.w, "Drained: no step in flight; the run stays PAUSED until it is resumed")
	case runner.PhaseArtifact:
		if p.Err != nil {
			// The run's end is recorded all the same; say what is missing.
			fmt.Fprintf(o.c.stderr, "dvtrun: warning: %s\n", o.c.redact(oneLine(p.Err.Error())))
		}
	}
}

// signal says what a signal sent from elsewhere did to the run.
func (o *console) signal(p runner.Progress) {
	sg := p.Signal
	by := "by " + engine.EscapeControl(sg.RequestedBy)
	if sg.RequestedBy == "" {
		by = "by an unnamed actor"
	}
	why := ""
	if sg.Reason != "" {
		why = " (" + engine.EscapeControl(oneLine(sg.Reason)) + ")"
	}
	switch {
	case p.Rejected != "":
		fmt.Fprintf(o.w, "Signal %s %s rejected: %s\n", sg.Type, by, o.c.redact(engine.EscapeControl(oneLine(p.Rejected))))
	case sg.Type == engine.SignalPause:
		fmt.Fprintf(o.w, "PAUSED %s%s: no new steps start; %d step(s) in flight draining\n", by, why, p.InFlight)
	case sg.Type == engine.SignalResume:
		fmt.Fprintf(o.w, "RESUMED %s%s\n", by, why)
	case sg.Type == engine.SignalCancel:
		fmt.Fprintf(o.w, "CANCELLED %s%s\n", by, why)
	case sg.Type == engine.SignalRetryStep:
		fmt.Fprintf(o.w, "RETRY of %s requested %s%s\n", engine.EscapeControl(sg.StepID), by, why)
	}
}

func (o *console) stepDone(p runner.Progress, prefix, rel string) {
	in := secs(p.Elapsed)
	s := p.Step
	switch p.Status {
	case engine.StepStatusSuccess:
		switch {
		case s.Kind == plan.KindSeed:
			o.pass++
			o.line(prefix+"OK loaded "+describe(s), fmt.Sprintf("[INSERT %d in %s]", p.Result.RowCount, in))
		case s.Kind == plan.KindTest && p.Result.Failures > 0:
			o.warn++
			o.line(fmt.Sprintf("%sWARN %d %s", prefix, p.Result.Failures, rel), fmt.Sprintf("[WARN %d in %s]", p.Result.Failures, in))
		case s.Kind == plan.KindTest:
			o.pass++
			o.line(prefix+"PASS "+rel, "[PASS in "+in+"]")
		case s.Kind == plan.KindModel:
			o.pass++
			o.line(prefix+"OK created "+describe(s), "[OK in "+in+"]")
		default:
			o.pass++
			o.line(prefix+"OK executed "+describe(s), "[OK in "+in+"]")
		}
	case engine.StepStatusFailed:
		if engine.CodeOf(p.Err) == engine.CodeStepCancelled {
			// A CANCEL stopped it: the operator's decision, not an error.
			o.cancelled++
			o.line(prefix+"CANCELLED "+describe(s), "[CANCELLED after "+in+"]")
			return
		}
		o.errs++
		detail := "failed"
		if p.Err != nil {
			detail = oneLine(o.c.redact(p.Err.Error()))
		}
		if !strings.Contains(detail, s.ID) {
			detail = s.ID + ": " + detail
		}
		o.failures = append(o.failures, detail)
		switch {
		case s.Kind == plan.KindTest && p.Result.Failures > 0:
			o.line(fmt.Sprintf("%sFAIL %d %s", prefix, p.Result.Failures, rel), fmt.Sprintf("[FAIL %d in %s]", p.Result.Failures, in))
		case s.Kind == plan.KindSeed:
			o.line(prefix+"ERROR loading "+describe(s), "[ERROR in "+in+"]")
		case s.Kind == plan.KindModel:
			o.line(prefix+"ERROR creating "+describe(s), "[ERROR in "+in+"]")
		case s.Kind == plan.KindTest:
			o.line(prefix+"ERROR "+describe(s), "[ERROR in "+in+"]")
		default:
			o.line(prefix+"ERROR executing "+describe(s), "[ERROR in "+in+"]")
		}
	case engine.StepStatusSkipped:
		o.skip++
		what := "relation " + rel
		switch s.Kind {
		case plan.KindTest:
			what = "test " + rel
		case plan.KindSQL:
			what = "sql operation " + rel
		}
		if p.SkipReason != "" {
			what += " (" + oneLine(o.c.redact(p.SkipReason)) + ")"
		}
		o.line(prefix+"SKIP "+what, "[SKIP]")
	}
}

// runEnd is how the command saw its run end; the closing summary follows
// it rather than what this process counted.
type runEnd struct {
	status      engine.RunStatus // the run's status when the runner returned
	reason      string           // RunFailed's error message, if any
	interrupted bool             // SIGINT/SIGTERM: the run stays resumable
	resume      string           // the command that continues the run
	// inFlight and finished are the log's counts when interrupted: steps
	// left RUNNING (they run again on resume) and steps already terminal.
	inFlight, finished int
}

// summary prints dbt's closing lines, worded after how the run ended; the
// counts name each outcome, and TOTAL is their sum.
func (o *console) summary(end runEnd) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stopLive != nil {
		close(o.stopLive)
		o.stopLive = nil
	}
	o.clearLive()
	done := o.pass + o.warn + o.errs + o.skip + o.cancelled
	n := done
	if o.total > 0 {
		n = o.total
	}
	counts := fmt.Sprintf("PASS=%d WARN=%d ERROR=%d SKIP=%d", o.pass, o.warn, o.errs, o.skip)
	if o.cancelled > 0 || end.status == engine.StatusCancelled {
		counts += fmt.Sprintf(" CANCELLED=%d", o.cancelled)
	}
	total := done
	if end.interrupted {
		notStarted := max(o.total-end.finished-end.inFlight, 0)
		fmt.Fprintf(o.w, "\nInterrupted after %s: %d step(s) in flight stopped, %d not started.\n", secs(time.Since(o.start)), end.inFlight, notStarted)
		fmt.Fprintf(o.w, "\nThe run is resumable: the stopped steps run again, no finished step does. Continue with: %s\n", o.c.clean(end.resume))
		counts += fmt.Sprintf(" INTERRUPTED=%d NOT_STARTED=%d", end.inFlight, notStarted)
		total += end.inFlight + notStarted
		fmt.Fprintf(o.w, "\nDone. %s TOTAL=%d\n", counts, total)
		return
	}
	fmt.Fprintf(o.w, "\nFinished running %d steps in %s.\n", n, secs(time.Since(o.start)))
	switch {
	case end.status == engine.StatusCancelled:
		fmt.Fprintf(o.w, "\nCancelled: %d step(s) stopped in flight, %d skipped.\n", o.cancelled, o.skip)
	case len(o.failures) > 0:
		fmt.Fprintf(o.w, "\n%s\n", o.c.colored("31", fmt.Sprintf("Completed with %d error(s):", len(o.failures))))
		for _, f := range o.failures {
			fmt.Fprintf(o.w, "  %s\n", o.c.clean(f))
		}
	case end.status == engine.StatusFailed:
		// Failed by an earlier runner of the run, or before any step.
		fmt.Fprintf(o.w, "\nFailed: %s\n", o.c.clean(oneLine(o.c.redact(cmp.Or(end.reason, "the run failed")))))
	case end.status == engine.StatusCompleted:
		fmt.Fprintln(o.w, "\n"+o.c.colored("32", "Completed successfully"))
	default:
		fmt.Fprintf(o.w, "\nStopped with the run %s. Continue with: %s\n", end.status, o.c.clean(end.resume))
	}
	fmt.Fprintf(o.w, "\nDone. %s TOTAL=%d\n", counts, total)
}
