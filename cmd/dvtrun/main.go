package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf16"

	"github.com/dvtrun/dvtrun/engine"
)

func main() {
	// SIGINT/SIGTERM cancel the context: a run stops scheduling, in-flight SQL
	// is interrupted, and `dvtrun resume` can carry on later.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, restore the default: a second Ctrl-C
		// kills at once if the clean stop takes too long.
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// Exit codes, the one list (README and --help repeat it). An error's exit
// code follows from its contract code alone (exitCode), whatever the
// command and whenever it happens: a script can branch on it.
const (
	exitOK          = 0
	exitFailed      = 1   // a run failed, verify found differences, an operational error (STORE_CORRUPT…)
	exitUsage       = 2   // invalid input or usage: nothing was run
	exitLease       = 3   // LEASE_HELD (another runner owns the run) or LEASE_LOST (taken over): this runner stopped
	exitUnavailable = 4   // STORE_UNAVAILABLE: the warehouse or state store cannot be reached or used now, at start-up or mid-run; a run is left resumable
	exitInterrupted = 130 // SIGINT/SIGTERM: the run can be resumed
	exitQueueFull   = 75  // RUN_QUEUE_FULL: try again after the retry-after (sysexits' EX_TEMPFAIL)
)

// exitCodesHelp is the exit-code line of `dvtrun --help`.
const exitCodesHelp = "Exit codes: 0 ok, 1 a run failed or verify found differences, 2 invalid input, 3 lease held by another runner or lost to one, 4 warehouse or store unavailable, at any moment (a run is left resumable), 75 run queue full (retry later), 130 interrupted (resumable)."

// codeInternal labels an error that carries no contract code, so that the
// one error line always starts with a machine-readable code.
const codeInternal engine.Code = "INTERNAL"

// codeInterrupted labels the end of a command stopped by SIGINT/SIGTERM
// (exit 130): the operator stopped it, no step failed or was cancelled.
const codeInterrupted engine.Code = "INTERRUPTED"

// inputCodes are the codes that mean "the input was refused": exit 2.
// STORE_UNAVAILABLE is not one (exit 4, whenever it happens), nor is
// STORE_CORRUPT (exit 1): a store whose content does not decode is met at
// start-up and mid-run alike, after work may have been done, and no change
// of the command line mends it.
var inputCodes = map[engine.Code]bool{
	engine.CodeInvalidArgument:          true,
	engine.CodePlanInvalid:              true,
	engine.CodePlanHashMismatch:         true,
	engine.CodeRunNotFound:              true,
	engine.CodeRunAlreadyExists:         true,
	engine.CodeCapabilitiesNotSupported: true,
	engine.CodeTargetAdapterMismatch:    true,
	engine.CodeSecretNotFound:           true,
	engine.CodeConfigInvalid:            true,
}

// exitError ends a command with a given exit code. With an empty msg the
// command has already said everything (a failed run prints its summary).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// errHelp is returned after --help printed its text: exit 0.
var errHelp = errors.New("help shown")

// cli is one invocation: its streams, environment and global options.
type cli struct {
	stdout, stderr io.Writer
	env            func(string) string
	g              globals

	help map[*flag.FlagSet]cmdHelp // usage header per command
	// helpSink, when set (`dvtrun help --markdown`), receives each
	// command's flag set instead of its --help text being printed.
	helpSink *helpCapture

	red engine.Redactor // secret values: never printed, in any form it knows

	waitLog *slog.Logger // a daemon's log, for lock-wait progress (nil: plain lines)

	lastPlan string // --plan with RUN_ID last (lastPlanFlag)

	// The configuration file and target, settled by the first parse
	// (applyTarget): configFound says the file was discovered.
	configSettled, configFound bool
	target                     *chosenTarget
	// configNote is said before the first output (noteWriter); rawStderr
	// is stderr without that.
	configNote string
	noteMu     sync.Mutex
	rawStderr  io.Writer
	// targetIsFilter: --target may name no config target (`runs` filters
	// by it).
	targetIsFilter bool
	// temporalKey is the config key of the temporal block temporalBlock
	// chose (temporal, targets.NAME.temporal), for the errors of its
	// secrets.
	temporalKey string
}

// globals are accepted before the command and by every command.
type globals struct {
	store, warehouse             string
	tenant, project, environment string
	config                       string // --config FILE: sinks and the signals policy
	target                       string // --target NAME (DVT_TARGET): one of the config's targets
	// lockWait bounds every wait for a lock another process holds (store,
	// warehouse, migration): then STORE_UNAVAILABLE, exit 4.
	lockWait time.Duration
	// scoped names the scope flags given explicitly (flag or environment):
	// verify --all checks every run unless one narrows it.
	scoped map[string]bool
	// flagged names the flags given on the command line among store,
	// warehouse and environment: they win over the config's target.
	flagged map[string]bool
	// noColor turns colour off even on a terminal (--no-color; NO_COLOR does
	// the same from the environment).
	noColor bool
}

// check refuses scope ids a run could not be recorded under: they become
// part of every event and of every line that shows the run.
func (g *globals) check() error {
	if g.lockWait <= 0 {
		return engine.Errorf(engine.CodeInvalidArgument, "--lock-wait %s is not a positive duration", g.lockWait)
	}
	for _, f := range []struct{ name, v string }{{"tenant", g.tenant}, {"project", g.project}, {"environment", g.environment}} {
		switch {
		case f.v == "":
			return engine.Errorf(engine.CodeInvalidArgument, "--%s is empty", f.name)
		case engine.HasControl(f.v) || strings.Contains(f.v, "|"):
			return engine.Errorf(engine.CodeInvalidArgument, "--%s %s contains a control character or '|'", f.name, engine.QuoteText(f.v))
		}
	}
	return nil
}

// markScoped records which scope flags fs set.
func (g *globals) markScoped(fs *flag.FlagSet) {
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "tenant", "project", "environment":
			g.scoped[f.Name] = true
		}
		switch f.Name {
		case "store", "warehouse", "environment":
			g.flagged[f.Name] = true
		}
	})
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.store, "store", g.store, "state store `URL`: sqlite:PATH, snowflake://DSN or postgres://… (env DVT_STORE)")
	fs.StringVar(&g.warehouse, "warehouse", g.warehouse, "warehouse `URL`: sqlite:PATH, snowflake://DSN or postgres://… (env DVT_WAREHOUSE)")
	// --help prints defaults: a DSN from the environment without its password.
	fs.Lookup("store").DefValue = redactTarget(g.store)
	fs.Lookup("warehouse").DefValue = redactTarget(g.warehouse)
	fs.StringVar(&g.tenant, "tenant", g.tenant, "tenant id (env DVT_TENANT)")
	fs.StringVar(&g.config, "config", g.config, "configuration `FILE`: targets, sinks, signals policy, schedules, limits, pulse (env DVT_CONFIG; default: dvtrun.yaml here or in the nearest parent directory that has one)")
	fs.StringVar(&g.target, "target", g.target, "the config's target `NAME` to run on: its store, warehouse, environment and threads; flags still win (env DVT_TARGET; default: the config's target:)")
	fs.StringVar(&g.project, "project", g.project, "project id (env DVT_PROJECT)")
	fs.StringVar(&g.environment, "environment", g.environment, "environment id (env DVT_ENVIRONMENT)")
	fs.DurationVar(&g.lockWait, "lock-wait", g.lockWait, "longest wait for a lock another process holds, then exit 4 (env DVT_LOCK_WAIT)")
	fs.BoolVar(&g.noColor, "no-color", g.noColor, "never colour the output (colour is used on a terminal only, and never with NO_COLOR set)")
}

func envOr(env func(string) string, key, def string) string {
	if v := env(key); v != "" {
		return v
	}
	return def
}

// command is one verb of the CLI.
type command struct {
	name    string
	args    string // usage after the name
	summary string
	run     func(ctx context.Context, c *cli, args []string) error
}

// outlivesReader names the commands that do work beyond their output
// (runs, deliveries, daemons, writes): a closed stdout must not stop them.
var outlivesReader = map[string]bool{
	"run": true, "resume": true, "retry": true, "project": true, "outbox": true, "enqueue": true,
	"schedule": true, "scheduler": true, "worker": true, "serve": true, "ui": true, "audit": true,
	"cancel": true, "signal": true,
}

func commands() []command {
	return []command{
		{"init", "[DIR]", "create a project: dvtrun.yaml (dev and prod targets), a plan with a seed, a model and a test", cmdInit},
		{"run", "PLAN", "run a plan", cmdRun},
		{"resume", "RUN_ID [PLAN]", "continue an interrupted run (of its stored plan bundle)", cmdResume},
		{"retry", "RUN_ID [PLAN]", "run again what failed or was skipped in a finished run", cmdRetry},
		{"ls", "PLAN", "list the steps a selection picks, in execution order", cmdLs},
		{"cancel", "RUN_ID", "ask a run's runner to cancel it", cmdCancel},
		{"signal", "RUN_ID pause|resume|cancel|retry-step", "send a signal to a run's runner", cmdSignal},
		{"runs", "[--status S --plan P --since T …]", "list runs, newest first: filters, keyset pages", cmdRuns},
		{"status", "RUN_ID [--step ID]", "show a run and its steps (Go reducer), or one step", cmdStatus},
		{"events", "RUN_ID", "list a run's events in runSeq order", cmdEvents},
		{"export", "RUN_ID", "write a run's audit export (JSON bundle or CSV)", cmdExport},
		{"plan", "validate|show|import-dbt", "validate a plan, print what a run ran, import a dbt manifest", cmdPlan},
		{"verify", "[RUN_ID | --all]", "compare the SQL projection with the Go reducer", cmdVerify},
		{"audit", "verify|checkpoint|retain|prove|key|doctor", "tamper-evident log: verify chains and signed checkpoints, prove an event", cmdAudit},
		{"project", "[--once]", "keep the live snapshot table current", cmdProject},
		{"outbox", "deliver|list|dead|retry", "deliver outbox events to sinks, inspect and replay", cmdOutbox},
		{"enqueue", "PLAN", "ask for a run of a plan; a worker starts it", cmdEnqueue},
		{"queue", "[cancel ID]", "list the run queue, or cancel a waiting request", cmdQueue},
		{"schedule", "list|trigger|backfill", "show schedules, fire one now, backfill a range", cmdSchedule},
		{"scheduler", "", "fire the configured schedules into the run queue (daemon)", cmdScheduler},
		{"worker", "", "claim queued run requests and run them (daemon)", cmdWorker},
		{"serve", "", "scheduler and worker in one process (daemon)", cmdServe},
		{"ui", "[--listen ADDR]", "serve the operator console in the browser (read-only)", cmdUI},
		{"warehouse", "cleanup [--apply]", "list and remove the per-run fence tables ended runs left in a Snowflake warehouse", cmdWarehouse},
	}
}

// run is the whole CLI; main only adds the process around it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, env func(string) string) int {
	c := &cli{rawStderr: stderr, env: env}
	c.helpSink, _ = ctx.Value(helpCaptureKey{}).(*helpCapture)
	c.stdout, c.stderr = noteWriter{stdout, c}, noteWriter{stderr, c}
	c.g = globals{
		store:       envOr(env, "DVT_STORE", "sqlite:.dvt/state.db"),
		warehouse:   envOr(env, "DVT_WAREHOUSE", "sqlite:.dvt/warehouse.db"),
		tenant:      envOr(env, "DVT_TENANT", "default"),
		project:     envOr(env, "DVT_PROJECT", "default"),
		environment: envOr(env, "DVT_ENVIRONMENT", "dev"),
		config:      env("DVT_CONFIG"),
		target:      env("DVT_TARGET"),
		flagged:     map[string]bool{},
		lockWait:    engine.DefaultLockWait,
		scoped:      map[string]bool{},
	}
	if v := env("DVT_LOCK_WAIT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return c.fail(engine.Errorf(engine.CodeInvalidArgument, "DVT_LOCK_WAIT %s is not a positive duration (like 30s or 2m)", engine.QuoteText(v)))
		}
		c.g.lockWait = d
	}
	for name, key := range map[string]string{"tenant": "DVT_TENANT", "project": "DVT_PROJECT", "environment": "DVT_ENVIRONMENT"} {
		c.g.scoped[name] = env(key) != ""
	}
	top := flag.NewFlagSet("dvtrun", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	c.g.register(top)
	showVersion := top.Bool("version", false, "print the version and the revision dvtrun was built from, and exit")
	top.Usage = func() {}
	err := top.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.usage(stdout, top)
		return exitOK
	case err != nil:
		return c.fail(engine.Errorf(engine.CodeInvalidArgument, "%v%s (see dvtrun --help)", err, didYouMeanFlag(top, err)))
	case *showVersion:
		fmt.Fprintln(stdout, version())
		return exitOK
	}
	c.g.markScoped(top)
	if err := c.g.check(); err != nil {
		return c.fail(err)
	}
	rest := top.Args()
	if len(rest) == 0 {
		c.usage(stderr, top)
		return exitUsage
	}
	if rest[0] == "help" {
		if len(rest) > 1 && (rest[1] == "--markdown" || rest[1] == "config") {
			return c.fail(c.helpReference(ctx, rest[1:]))
		}
		if len(rest) > 1 {
			rest = []string{rest[1], "--help"}
		} else {
			c.usage(stdout, top)
			return exitOK
		}
	}
	var names []string
	for _, cmd := range commands() {
		if cmd.name == rest[0] {
			if outlivesReader[cmd.name] {
				// A reader that goes away (`dvtrun run … | head -2`) must
				// not kill a runner mid-run: that left the run RUNNING
				// under its lease. Writes to the closed pipe fail with
				// EPIPE instead, output is dropped, and the command
				// finishes its work. A read command still ends with its
				// reader, as cat does.
				signal.Ignore(syscall.SIGPIPE)
			}
			err := cmd.run(ctx, c, rest[1:])
			if err != nil && ctx.Err() != nil && !errors.Is(err, errHelp) {
				err = interrupted(err)
			}
			return c.fail(err)
		}
		names = append(names, cmd.name)
	}
	if s := engine.Suggest(rest[0], names); s != "" {
		return c.fail(engine.Errorf(engine.CodeInvalidArgument, "unknown command %q: did you mean %q? (see dvtrun --help)", rest[0], s))
	}
	return c.fail(engine.Errorf(engine.CodeInvalidArgument, "unknown command %q (see dvtrun --help)", rest[0]))
}

// colored wraps s in the ANSI colour code when colour is on (a terminal,
// no NO_COLOR, no --no-color). Colour only repeats what the text says.
func (c *cli) colored(code, s string) string {
	if c.g.noColor || c.env == nil || !colorEnabled(c.stdout, c.env) {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

func (c *cli) usage(w io.Writer, top *flag.FlagSet) {
	if c.helpSink != nil {
		c.helpSink.top = top
	}
	fmt.Fprintln(w, "dvtrun runs dbt-style plans and records every lifecycle event in a state store.")
	fmt.Fprintln(w, "\nUsage: dvtrun [global flags] COMMAND [flags] [args]")
	fmt.Fprintln(w, "\nCommands:")
	for _, cmd := range commands() {
		fmt.Fprintf(w, "  %-9s %-40s %s\n", cmd.name, cmd.args, cmd.summary)
	}
	fmt.Fprintln(w, "\nGlobal flags (also accepted after the command):")
	printFlags(w, top)
	fmt.Fprintln(w, "\n"+exitCodesHelp)
	fmt.Fprintln(w, "Run `dvtrun COMMAND --help` for a command's flags, `dvtrun help config` for the configuration file's keys.")
}

// fail prints err as one line and returns the exit code it deserves.
func (c *cli) fail(err error) int {
	if err == nil {
		return exitOK
	}
	if errors.Is(err, errHelp) {
		return exitOK
	}
	code := exitCode(err)
	var ex *exitError
	if errors.As(err, &ex) && ex.err == nil {
		return ex.code
	}
	line := c.errorLine(err)
	if n := c.takeConfigNote(); n != "" {
		line += " (" + c.cleanLine(n) + ")"
	}
	fmt.Fprintln(c.rawStderr, line)
	return code
}

// exitCode is the exit code err deserves: it follows from the error's
// contract code (the one table), except for an exitError, which says it.
func exitCode(err error) int {
	var ex *exitError
	if errors.As(err, &ex) {
		return ex.code
	}
	switch code := engine.CodeOf(err); {
	case code == "" && errors.Is(err, context.Canceled):
		return exitInterrupted
	case code == engine.CodeRunQueueFull:
		return exitQueueFull
	case code == engine.CodeLeaseHeld || code == engine.CodeLeaseLost:
		return exitLease
	case code == engine.CodeStoreUnavailable:
		return exitUnavailable
	case inputCodes[code]:
		return exitUsage
	}
	return exitFailed
}

// interrupted is how a command that a signal stopped ends: exit 130 and
// `INTERRUPTED: interrupted`, whatever the cancellation made the command
// return (a lock wait, a login, a query cut short). run and resume say
// more themselves (how to continue), and keep their words.
func interrupted(err error) error {
	var ex *exitError
	if errors.As(err, &ex) && ex.code == exitInterrupted {
		return err
	}
	return &exitError{code: exitInterrupted, err: engine.Errorf(codeInterrupted, "interrupted")}
}

// errorLine is `dvtrun: CODE: sentence` on one line, secrets redacted.
func (c *cli) errorLine(err error) string {
	code := engine.CodeOf(err)
	msg := err.Error()
	if code == "" {
		code = codeInternal
		if errors.Is(err, context.Canceled) {
			code = codeInterrupted
			msg = "interrupted"
		}
	} else {
		// The code already leads the line: drop its first repetition.
		msg = strings.Replace(msg, string(code)+": ", "", 1)
	}
	return "dvtrun: " + string(code) + ": " + c.cleanLine(msg)
}

// reportWait prints a lock wait's progress line on stderr: a line of text,
// or a record of the daemon's JSON log once a daemon set waitLog.
func (c *cli) reportWait(w engine.LockWait) {
	if c.waitLog != nil {
		c.waitLog.Warn(c.cleanLine(w.String()), "resource", w.Resource, "run", w.RunID, "holder", c.cleanLine(w.Holder),
			"waitedMs", w.Waited.Milliseconds(), "budgetMs", w.Budget.Milliseconds())
		return
	}
	fmt.Fprintln(c.stderr, "dvtrun: "+c.cleanLine(w.String()))
}

// addSecret remembers a value that must never be printed.
func (c *cli) addSecret(v string) { c.red.Add(v) }

// redact removes every secret from s (in every form engine.Redactor knows).
func (c *cli) redact(s string) string { return c.red.Redact(s) }

// clean is s fit for the terminal: secrets redacted, control characters
// (ESC, BEL, newline, tab…) escaped so that input or stored text cannot
// move the cursor, ring, recolour or split a table row. Every string the
// CLI prints that came from input or the store goes through it.
func (c *cli) clean(s string) string { return engine.EscapeControl(c.redact(s)) }

// cleanLine is clean on one line: runs of white space (newlines included)
// become one space, after redaction, so a secret with a newline is still
// recognised.
func (c *cli) cleanLine(s string) string { return engine.EscapeControl(oneLine(c.redact(s))) }

// cleanDoc is a whole JSON or CSV document fit for the terminal: secrets
// redacted, and the characters a terminal acts on that the format leaves
// raw (C0 controls but newline, CR and tab; DEL; C1 controls; format
// characters such as bidi overrides) written as \uXXXX. In JSON they occur
// only inside strings, where the escape decodes to the same character.
func (c *cli) cleanDoc(s string) string {
	s = c.redact(s)
	if !strings.ContainsFunc(s, rawControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if !rawControl(r) {
			b.WriteRune(r)
			continue
		}
		for _, u := range utf16.Encode([]rune{r}) {
			fmt.Fprintf(&b, `\u%04x`, u)
		}
	}
	return b.String()
}

func rawControl(r rune) bool {
	return r < 0x20 && r != '\n' && r != '\r' && r != '\t' || r >= 0x7f && r <= 0x9f || unicode.Is(unicode.Cf, r)
}

// newFlagSet returns a command's FlagSet with the global flags registered
// (their defaults are whatever came before the command).
func (c *cli) newFlagSet(name, args, summary string) *flag.FlagSet {
	fs := flag.NewFlagSet("dvtrun "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// The flag package calls Usage on every parse error; parse prints help
	// itself, and only for --help.
	fs.Usage = func() {}
	if c.help == nil {
		c.help = map[*flag.FlagSet]cmdHelp{}
	}
	c.help[fs] = cmdHelp{name, args, summary}
	c.g.register(fs)
	return fs
}

func (c *cli) printHelp(fs *flag.FlagSet) {
	h := c.help[fs]
	if c.helpSink != nil {
		c.helpSink.cmds = append(c.helpSink.cmds, capturedCmd{h, fs})
		return
	}
	fmt.Fprintf(c.stdout, "Usage: dvtrun %s [flags] %s\n\n%s\n\nFlags:\n", h.name, h.args, h.summary)
	printFlags(c.stdout, fs)
}

// parse parses flags and positional arguments in any order (Go's flag
// package stops at the first positional) and checks the positional count.
// didYouMeanFlag is "; did you mean --threads?" for a flag fs does not
// define (err from fs.Parse) close to one it does; "" otherwise.
func didYouMeanFlag(fs *flag.FlagSet, err error) string {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: ")
	if !ok {
		return ""
	}
	name = strings.TrimLeft(name, "-")
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if s := engine.Suggest(name, names); s != "" {
		return fmt.Sprintf("; did you mean --%s?", s)
	}
	return ""
}

func (c *cli) parse(fs *flag.FlagSet, args []string, minPos, maxPos int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				c.printHelp(fs)
				return nil, errHelp
			}
			return nil, engine.Errorf(engine.CodeInvalidArgument, "%s: %v%s (see %s --help)", fs.Name(), err, didYouMeanFlag(fs, err), fs.Name())
		}
		c.g.markScoped(fs)
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		if args[0] == "--" {
			pos = append(pos, args[1:]...)
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if err := c.applyTarget(fs); err != nil {
		return nil, err
	}
	if err := c.g.check(); err != nil {
		return nil, err
	}
	switch {
	case len(pos) < minPos:
		return nil, engine.Errorf(engine.CodeInvalidArgument, "%s: missing arguments (see %s --help)", fs.Name(), fs.Name())
	case maxPos >= 0 && len(pos) > maxPos:
		return nil, engine.Errorf(engine.CodeInvalidArgument, "%s: unexpected argument %q (see %s --help)", fs.Name(), pos[maxPos], fs.Name())
	}
	return pos, nil
}
