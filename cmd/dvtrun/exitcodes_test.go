package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine/service/servicetest"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

// exitPassword is the password of the unreachable Snowflake DSNs: no
// output may carry it.
const exitPassword = "Sup3r-Secret-PW"

// unreachableDSN is a snowflake:// target at addr, whose login gives up
// after loginTimeout seconds.
func unreachableDSN(addr, loginTimeout string) string {
	return "snowflake://alice:" + exitPassword + "@" + addr + "/db/sch?account=acme&loginTimeout=" + loginTimeout
}

// exitCase is one command, the state it meets and the exit it must give.
type exitCase struct {
	family string
	name   string
	args   []string
	// prep readies the harness (seeds the store, points a target at an
	// unreachable host) and may return replacement args.
	prep func(t *testing.T, h *harness, u unreachable) []string
	// stop, when set, runs beside the command and cancels it once the
	// command is where the case wants it (SIGINT/SIGTERM in main).
	stop func(t *testing.T, h *harness, u unreachable, cancel context.CancelFunc)
	exit int
	code string   // the error line's code; "" for exit 0
	msgs []string // more the error line must say
}

// unreachable are the two Snowflake hosts of a case.
type unreachable struct {
	refused string
	silent  *sftest.Silent
}

func storeAt(dsn func(u unreachable) string) func(t *testing.T, h *harness, u unreachable) []string {
	return func(t *testing.T, h *harness, u unreachable) []string {
		h.env["DVT_STORE"] = dsn(u)
		return nil
	}
}

var (
	refusedStore = storeAt(func(u unreachable) string { return unreachableDSN(u.refused, "1") })
	silentStore  = storeAt(func(u unreachable) string { return unreachableDSN(u.silent.Addr, "20") })
)

// seeded: a state store holding fixedRunID (FAILED).
func seeded(t *testing.T, h *harness, _ unreachable) []string {
	seedFailedRun(t, h.statePath())
	return nil
}

// corrupt: a state store file that is not a database.
func corrupt(t *testing.T, h *harness, _ unreachable) []string {
	if err := os.WriteFile(h.statePath(), []byte(strings.Repeat("not a database\n", 300)), 0o644); err != nil {
		t.Fatal(err)
	}
	return nil
}

// inLogin cancels the command once it is inside its login to the silent
// host: interrupted while it waits, as by Ctrl-C or SIGTERM.
func inLogin(t *testing.T, _ *harness, u unreachable, cancel context.CancelFunc) {
	servicetest.WaitFor(t, "the command to connect to the silent Snowflake port", func() bool { return u.silent.Accepted() > 0 })
	cancel()
}

// whenReady cancels a daemon once its /readyz answers 200: a clean stop.
func whenReady(addr string) func(t *testing.T, _ *harness, _ unreachable, cancel context.CancelFunc) {
	return func(t *testing.T, _ *harness, _ unreachable, cancel context.CancelFunc) {
		servicetest.WaitFor(t, "the daemon's /readyz to answer 200", func() bool {
			code, _ := get("http://" + addr + "/readyz")
			return code == http.StatusOK
		})
		cancel()
	}
}

// leaseHeld: an interrupted run of the slow plan whose lease another
// runner holds; returns resume's args.
func leaseHeld(t *testing.T, h *harness, _ unreachable) []string {
	plan := fixture("slow", "plan.yaml")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &cancelAfter{n: 1, cancel: cancel}
	var errb bytes.Buffer
	if code := run(ctx, []string{"run", "--threads", "1", plan}, out, &errb, func(k string) string { return h.env[k] }); code != exitInterrupted {
		t.Fatalf("the interrupted run exited %d: %s", code, errb.String())
	}
	runID := h.onlyRun()
	st, err := sqlite.Open(context.Background(), h.statePath(), sqlite.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.AcquireLease(context.Background(), runID, "another-runner", time.Minute); err != nil {
		t.Fatal(err)
	}
	return []string{"resume", runID, plan}
}

// exitCases provoke each exit code of README's table from each command
// family that can produce it.
func exitCases(t *testing.T) []exitCase {
	unknown := "11111111-2222-4333-8444-555555555555"
	ok, cycle := fixture("ok", "plan.yaml"), fixture("cycle", "plan.yaml")
	cases := []exitCase{
		// run, resume, retry
		{family: "run", name: "run completes", args: []string{"run", ok}, exit: exitOK},
		{family: "run", name: "run, a step fails", args: []string{"run", fixture("syntax", "plan.yaml")}, exit: exitFailed, code: "STEP_FAILED"},
		{family: "run", name: "run, invalid plan", args: []string{"run", cycle}, exit: exitUsage, code: "PLAN_INVALID"},
		{family: "run", name: "resume, unknown run", args: []string{"resume", unknown, ok}, prep: seeded, exit: exitUsage, code: "RUN_NOT_FOUND"},
		{family: "run", name: "retry, unknown run", args: []string{"retry", unknown, ok}, prep: seeded, exit: exitUsage, code: "RUN_NOT_FOUND"},
		{family: "run", name: "resume, lease held", prep: leaseHeld, exit: exitLease, code: "LEASE_HELD"},
		{family: "run", name: "run, warehouse unreachable", args: []string{"run", ok}, prep: func(t *testing.T, h *harness, u unreachable) []string {
			h.env["DVT_WAREHOUSE"] = unreachableDSN(u.refused, "1")
			return nil
		}, exit: exitUnavailable, code: "STORE_UNAVAILABLE"},
		{family: "run", name: "run, warehouse never answers", args: []string{"run", ok}, prep: func(t *testing.T, h *harness, u unreachable) []string {
			h.env["DVT_WAREHOUSE"] = unreachableDSN(u.silent.Addr, "1")
			return nil
		}, exit: exitUnavailable, code: "STORE_UNAVAILABLE", msgs: []string{"within 1s"}},
		{family: "run", name: "resume, store unreachable", args: []string{"resume", unknown, ok}, prep: refusedStore, exit: exitUnavailable, code: "STORE_UNAVAILABLE"},
		{family: "run", name: "retry, store unreachable", args: []string{"retry", unknown, ok}, prep: refusedStore, exit: exitUnavailable, code: "STORE_UNAVAILABLE"},
		{family: "run", name: "run, interrupted in the warehouse login", args: []string{"run", ok}, prep: func(t *testing.T, h *harness, u unreachable) []string {
			h.env["DVT_WAREHOUSE"] = unreachableDSN(u.silent.Addr, "20")
			return nil
		}, stop: inLogin, exit: exitInterrupted, code: "INTERRUPTED"},
		{family: "run", name: "resume, interrupted in the store login", args: []string{"resume", unknown, ok}, prep: silentStore, stop: inLogin, exit: exitInterrupted, code: "INTERRUPTED"},

		// plan
		{family: "plan", name: "validate, valid", args: []string{"plan", "validate", ok}, exit: exitOK},
		{family: "plan", name: "validate, invalid", args: []string{"plan", "validate", cycle}, exit: exitUsage, code: "PLAN_INVALID"},

		// queue: enqueue, queue, signal, cancel
		{family: "queue", name: "enqueue", args: []string{"enqueue", ok}, exit: exitOK},
		{family: "queue", name: "queue", args: []string{"queue"}, prep: seeded, exit: exitOK},
		{family: "queue", name: "enqueue, queue full", args: []string{"enqueue", ok}, prep: func(t *testing.T, h *harness, _ unreachable) []string {
			h.env["DVT_CONFIG"] = h.writeConfig("limits: {maxConcurrentRuns: 1, policy: REJECT, retryAfter: 45s}\n")
			if r := h.run("enqueue", ok); r.code != 0 {
				t.Fatalf("first enqueue: %+v", r)
			}
			return nil
		}, exit: exitQueueFull, code: "RUN_QUEUE_FULL"},
		{family: "queue", name: "cancel, unknown run", args: []string{"cancel", unknown}, prep: seeded, exit: exitUsage, code: "RUN_NOT_FOUND"},
		{family: "queue", name: "signal, unknown signal", args: []string{"signal", fixedRunID, "jump"}, prep: seeded, exit: exitUsage, code: "INVALID_ARGUMENT"},
		{family: "queue", name: "queue cancel, unknown request", args: []string{"queue", "cancel", "no-such"}, prep: seeded, exit: exitUsage, code: "RUN_NOT_FOUND"},

		// read
		{family: "read", name: "runs, no store there", args: []string{"runs"}, exit: exitUsage, code: "INVALID_ARGUMENT", msgs: []string{"no state store"}},
		{family: "read", name: "status, unknown run", args: []string{"status", unknown}, prep: seeded, exit: exitUsage, code: "RUN_NOT_FOUND"},
		{family: "read", name: "runs, store never answers", args: []string{"runs"}, prep: storeAt(func(u unreachable) string { return unreachableDSN(u.silent.Addr, "1") }),
			exit: exitUnavailable, code: "STORE_UNAVAILABLE", msgs: []string{"within 1s"}},
	}
	reads := [][]string{{"runs"}, {"status", fixedRunID}, {"events", fixedRunID}, {"export", fixedRunID}, {"verify", "--all"}}
	for _, args := range reads {
		cases = append(cases,
			exitCase{family: "read", name: args[0], args: args, prep: seeded, exit: exitOK},
			exitCase{family: "read", name: args[0] + ", corrupt store", args: args, prep: corrupt, exit: exitFailed, code: "STORE_CORRUPT"})
	}
	// Every command that opens the store: unreachable (4), interrupted
	// while it logs in (130).
	needStore := append(reads, []string{"enqueue", ok}, []string{"queue"}, []string{"signal", fixedRunID, "pause"}, []string{"cancel", fixedRunID},
		[]string{"worker"}, []string{"scheduler"}, []string{"serve"})
	family := map[string]string{"enqueue": "queue", "queue": "queue", "signal": "queue", "cancel": "queue", "worker": "daemon", "scheduler": "daemon", "serve": "daemon"}
	for _, args := range needStore {
		f := family[args[0]]
		if f == "" {
			f = "read"
		}
		cases = append(cases,
			exitCase{family: f, name: args[0] + ", store unreachable", args: args, prep: refusedStore, exit: exitUnavailable, code: "STORE_UNAVAILABLE"},
			exitCase{family: f, name: args[0] + ", interrupted in the store login", args: args, prep: silentStore, stop: inLogin, exit: exitInterrupted, code: "INTERRUPTED"})
	}
	// Daemons: SIGTERM once started is their normal stop.
	for _, d := range []string{"worker", "scheduler", "serve"} {
		addr := freeAddr(t)
		cases = append(cases,
			exitCase{family: "daemon", name: d + ", stopped", args: []string{d, "--poll", "100ms", "--http", addr}, stop: whenReady(addr), exit: exitOK},
			exitCase{family: "daemon", name: d + ", bad flag", args: []string{d, "--poll", "1ms"}, exit: exitUsage, code: "INVALID_ARGUMENT"})
	}
	return cases
}

// TestExitCodes is README's exit-code table, provoked from each command
// family (in-process; TestExitCodesOnSignals sends real signals). An
// exit code follows from the error's code alone: STORE_UNAVAILABLE is 4
// at start-up as mid-run, an interrupted command says INTERRUPTED, and a
// Snowflake host that refuses or never answers fails within loginTimeout
// with the host named and never the password.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	for _, c := range exitCases(t) {
		t.Run(c.family+"/"+c.name, func(t *testing.T) {
			h := newHarness(t)
			refused, silent := sftest.Unreachable(t)
			u := unreachable{refused, silent}
			args := c.args
			if c.prep != nil {
				if a := c.prep(t, h, u); a != nil {
					args = a
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan result, 1)
			start := time.Now()
			go func() { done <- h.runCtx(ctx, args...) }()
			if c.stop != nil {
				c.stop(t, h, u, cancel)
			}
			// A login gives up after loginTimeout (1s here), an interrupt
			// at once; the slowest case runs a plan.
			bound := time.NewTimer(30 * time.Second)
			defer bound.Stop()
			var r result
			select {
			case r = <-done:
			case <-bound.C:
				t.Fatalf("%v did not end within 30s", args)
			}
			took := time.Since(start)
			if c.exit == exitOK {
				if r.code != 0 {
					t.Fatalf("%v: exit %d, want 0\n%s", args, r.code, r.stderr)
				}
				return
			}
			wantError(t, r, c.exit, c.code, c.msgs...)
			if strings.Contains(r.stdout+r.stderr, exitPassword) {
				t.Errorf("the output carries the password:\n%s%s", r.stdout, r.stderr)
			}
			switch c.exit {
			case exitUnavailable:
				// Every unavailable target of the table is a Snowflake host.
				if !strings.Contains(r.stderr, "cannot log in to Snowflake at 127.0.0.1:") {
					t.Errorf("the error does not name the host: %q", r.stderr)
				}
				if took > 8*time.Second {
					t.Errorf("took %s to fail, want about the 1s loginTimeout", took)
				}
			case exitInterrupted:
				if c.family != "run" && r.stderr != "dvtrun: INTERRUPTED: interrupted\n" {
					t.Errorf("stderr %q, want only `dvtrun: INTERRUPTED: interrupted`", r.stderr)
				}
			}
		})
	}
}

// TestExitCodesOnSignals: the real binary, SIGTERM while a command waits
// for a Snowflake host that never answers: exit 130 and one line,
// `dvtrun: INTERRUPTED: interrupted`, from read commands, the queue's,
// a daemon starting and a run.
func TestExitCodesOnSignals(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	plan, err := filepath.Abs(fixture("ok", "plan.yaml")) // the process runs in a directory of its own
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"runs"}, {"status", fixedRunID}, {"events", fixedRunID}, {"export", fixedRunID}, {"verify", "--all"},
		{"queue"}, {"cancel", fixedRunID}, {"worker"}, {"run", plan},
	} {
		t.Run(args[0], func(t *testing.T) {
			h := newHarness(t)
			_, silent := sftest.Unreachable(t)
			dsn := unreachableDSN(silent.Addr, "20")
			env := append(os.Environ(), "DVT_STORE="+dsn, "DVT_WAREHOUSE="+h.env["DVT_WAREHOUSE"])
			if args[0] == "run" {
				env = append(os.Environ(), "DVT_STORE="+h.env["DVT_STORE"], "DVT_WAREHOUSE="+dsn)
			}
			p := startProc(t, bin, env, args...)
			servicetest.WaitFor(t, "dvtrun to connect to the silent Snowflake port", func() bool { return silent.Accepted() > 0 })
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t); code != exitInterrupted {
				t.Fatalf("exit %d, want %d\n%s", code, exitInterrupted, p.output())
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			if got := p.stderr.String(); got != "dvtrun: INTERRUPTED: interrupted\n" {
				t.Errorf("stderr %q, want only `dvtrun: INTERRUPTED: interrupted`", got)
			}
		})
	}
}

// TestResumeWaitsForTheLease: resume of a run whose lease another runner
// holds exits 3 at once, saying until when and how to wait; with --wait
// longer than the lease it waits, saying for whom, and then resumes; with
// a shorter --wait it gives up with exit 3 when the wait runs out.
func TestResumeWaitsForTheLease(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		lease time.Duration
		wait  string
		exit  int
		want  []string // in stderr
	}{
		{"no wait", time.Minute, "", exitLease, []string{"LEASE_HELD", "another-runner", "--wait"}},
		{"wait shorter than the lease", time.Minute, "1s", exitLease, []string{"waiting for the lease", "--wait 1s ran out"}},
		{"wait outlasts the lease", 2 * time.Second, "30s", exitOK, []string{"waiting for the lease of run", "held by another-runner"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			plan := fixture("slow", "plan.yaml")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out := &cancelAfter{n: 1, cancel: cancel}
			var errb bytes.Buffer
			if code := run(ctx, []string{"run", "--threads", "1", plan}, out, &errb, func(k string) string { return h.env[k] }); code != exitInterrupted {
				t.Fatalf("the interrupted run exited %d: %s", code, errb.String())
			}
			runID := h.onlyRun()
			st, err := sqlite.Open(context.Background(), h.statePath(), sqlite.Options{MustExist: true})
			if err != nil {
				t.Fatal(err)
			}
			err = st.AcquireLease(context.Background(), runID, "another-runner", tc.lease)
			st.Close()
			if err != nil {
				t.Fatal(err)
			}
			args := []string{"resume", runID}
			if tc.wait != "" {
				args = append(args, "--wait", tc.wait)
			}
			r := h.run(args...)
			if r.code != tc.exit {
				t.Fatalf("exit %d, want %d: %s", r.code, tc.exit, r.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
		})
	}
}
