package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/queue"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
)

// The Snowflake kill-recovery process test (issue 16, "Must show", first
// bullet): the real binary, the warehouse on the Snowflake test server with
// a network round trip per request, the state store on Snowflake or SQLite.
// The runner of testdata/groupcommit (ledgered DML steps) is SIGKILLed at a
// uniform random point of its run; a killed runner inside a ledgered step
// leaves its session's transaction open with the step's table locks. Then:
//   - another run (testdata/bystander, ledgered DML steps, same store and
//     warehouse database) must complete before anything took the dead run
//     over: nothing but the server's 5-minute abort could have released a
//     lock it waited for, so it did not wait for the dead run;
//   - `dvtrun resume` (or a `worker` taking the request over from the dead
//     worker) must complete the run within the lease TTL + 30 s of the kill,
//     long before the server's 5-minute abort of a detached transaction
//     (Options.IdleTxAbort stays at its default here);
//   - every effect happened once, run_seq is gapless, verify is clean.

const (
	killTTL   = 4 * time.Second          // --lease-ttl of every process: the bound below is tight
	killRTT   = 75 * time.Millisecond    // per request, within the 50–100 ms
	killBound = killTTL + 30*time.Second // the run completes this long after the kill at the latest
	// bystanderBound is how long the other run may take after the kill. It
	// takes ~3 s; one blocked by the dead transaction waits until its
	// lock-wait budget (1m) runs out or the server's 5-minute abort.
	bystanderBound = 20 * time.Second
)

var killTTLFlag = killTTL.String()

// killBudgetFlag is the --write-budget of the trials' run and resume: the
// store's round trips on a loaded machine can outlast the default 3s, and
// a run stopped STORE_UNAVAILABLE is not what the trials are about.
const killBudgetFlag = "30s"

// killVariant is one setup of TestSnowflakeKillRecovery.
type killVariant struct {
	store string // "snowflake" or "sqlite"
	taker string // "resume" or "worker"
}

func (v killVariant) String() string { return v.store + "-store/" + v.taker }

// killTrial is what one trial observed, logged whatever its outcome.
type killTrial struct {
	n           int
	at, runFor  time.Duration // kill point after the run's start, the measured run duration
	endedBefore bool          // the run ended before the kill point
	openTx      string        // the dead runner's open warehouse transaction: its last statement
	held        []string      // the tables whose locks it held (SHOW LOCKS)
	storeTx     string        // the same on the store's server (Snowflake store)
	storeHeld   []string
	bystander   string        // the other run's outcome
	taker       string        // the taker's outcome
	recovered   time.Duration // kill → run completed
	ledger      int           // StepCompleted taken from the ledger
}

func (r *killTrial) String() string {
	s := fmt.Sprintf("trial %d: kill at %.0f%% (%s of %s)", r.n, 100*float64(r.at)/float64(r.runFor), r.at.Round(time.Millisecond), r.runFor.Round(time.Millisecond))
	if r.endedBefore {
		s += ", the run had ended"
	}
	if r.openTx != "" {
		s += ", died inside a warehouse transaction after " + r.openTx
	}
	if len(r.held) > 0 {
		s += " holding " + strings.Join(r.held, ", ")
	}
	if r.storeTx != "" {
		s += ", died inside a store transaction after " + r.storeTx
	}
	if len(r.storeHeld) > 0 {
		s += " holding " + strings.Join(r.storeHeld, ", ")
	}
	s += "; other run: " + r.bystander
	if r.taker != "" {
		s += "; " + r.taker
	}
	if r.recovered > 0 {
		s += fmt.Sprintf("; completed %s after the kill, %d step(s) from the ledger", r.recovered.Round(time.Millisecond), r.ledger)
	}
	return s
}

func TestSnowflakeKillRecovery(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	plan, err := filepath.Abs(fixture("groupcommit", "plan.yaml")) // the processes run elsewhere
	if err != nil {
		t.Fatal(err)
	}
	other, err := filepath.Abs(fixture("bystander", "plan.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	perVariant := 8 // 24 trials in the variants that run by default; DVT_KILL_TRIALS sets it
	if s := os.Getenv("DVT_KILL_TRIALS"); s != "" {
		fmt.Sscan(s, &perVariant)
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d, %d trials per variant", seed, perVariant)
	for vi, v := range []killVariant{{"snowflake", "resume"}, {"sqlite", "resume"}, {"snowflake", "worker"}, {"sqlite", "worker"}} {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(seed), 16+uint64(vi)))
			// The kill is uniform over the run's wall time, measured per
			// variant.
			runFor := measureKillRun(t, bin, plan, v)
			t.Logf("an undisturbed run takes %s", runFor.Round(time.Millisecond))
			var mu sync.Mutex
			var done []*killTrial
			t.Cleanup(func() {
				slices.SortFunc(done, func(a, b *killTrial) int { return a.n - b.n })
				inTx, holding, ended, slowest := 0, 0, 0, time.Duration(0)
				for _, r := range done {
					t.Log(r)
					if r.openTx != "" {
						inTx++
					}
					if slices.ContainsFunc(r.held, func(l string) bool { return strings.Contains(l, "FENCE") }) {
						holding++
					}
					if r.endedBefore {
						ended++
					}
					slowest = max(slowest, r.recovered)
				}
				t.Logf("%d trials: %d killed inside a warehouse transaction (%d holding the run's fence), %d after the run's end; slowest recovery %s after the kill (bound %s)",
					len(done), inTx, holding, ended, slowest.Round(time.Millisecond), killBound)
			})
			for i := range perVariant {
				r := &killTrial{n: i, runFor: runFor, at: time.Duration(rng.Int64N(int64(runFor)))}
				t.Run(fmt.Sprint(i), func(t *testing.T) {
					// Trials mostly wait (round trips, the lease): run
					// them side by side (-parallel, GOMAXPROCS by default).
					t.Parallel()
					defer func() {
						mu.Lock()
						done = append(done, r)
						mu.Unlock()
					}()
					killTrialRun(t, bin, plan, other, v, r)
				})
			}
		})
	}
}

// killSetup starts the warehouse's test server (and the store's, for the
// Snowflake store) with a round trip per request and the default 5-minute
// abort of idle blocking transactions, and points a harness and a child
// process environment at them.
func killSetup(t *testing.T, store string) (h *harness, storeSrv, whSrv *sftest.Server, env []string) {
	t.Helper()
	opts := sftest.Options{RTT: killRTT}
	h = newHarness(t)
	if store == "snowflake" {
		storeSrv = sftest.StartWith(t, opts)
		h.env["DVT_STORE"] = "snowflake://" + storeSrv.DSN("DVT", "PUBLIC")
	}
	whSrv = sftest.StartWith(t, opts)
	h.env["DVT_WAREHOUSE"] = "snowflake://" + whSrv.DSN("ANALYTICS", "PUBLIC")
	h.env["DVT_TARGET_PATH"] = filepath.Join(h.dir, "target")
	env = append(os.Environ(), "DVT_STORE="+h.env["DVT_STORE"], "DVT_WAREHOUSE="+h.env["DVT_WAREHOUSE"], "DVT_TARGET_PATH="+h.env["DVT_TARGET_PATH"])
	return h, storeSrv, whSrv, env
}

var (
	runIDRE = regexp.MustCompile(`Running plan \S+ \(.*\) as run (\S+)`)
	uuidRE  = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// startKillRun starts the run to kill: `dvtrun run`, or a worker with the
// run's request enqueued. It returns once the run has started (the run
// printed its id; the worker logged its claim), with the run's id ("" when
// a worker runs it: it logs the id only at the end).
func startKillRun(t *testing.T, h *harness, bin string, env []string, plan string, v killVariant, name string) (*proc, string) {
	t.Helper()
	if v.taker == "resume" {
		p := startProc(t, bin, env, "run", "--threads", "2", "--lease-ttl", killTTLFlag, "--write-budget", killBudgetFlag, plan)
		m := runIDRE.FindStringSubmatch(p.waitLine(t, "Running plan "))
		if m == nil {
			t.Fatalf("the run's first line names no run id:\n%s", p.output())
		}
		return p, m[1]
	}
	if r := h.run("enqueue", plan, "--request-id", name); r.code != 0 {
		t.Fatalf("enqueue: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	p := startWorker(t, bin, env)
	waitFor(t, p, "the worker's claim of the request", 30*time.Second, func() bool { return strings.Contains(p.output(), `"msg":"claimed"`) })
	return p, ""
}

// startWorker starts a worker with the trials' lease TTL (also its
// heartbeat's): a dead worker's request is claimed again once it expired.
func startWorker(t *testing.T, bin string, env []string) *proc {
	t.Helper()
	return startProc(t, bin, env, "worker", "--poll", "200ms", "--lease-ttl", killTTLFlag, "--grace", "1s")
}

// workerFinished returns the run id and status of a worker's first
// "run finished" log line, ok false while there is none.
func workerFinished(p *proc) (runID, status string, ok bool) {
	for _, l := range strings.Split(p.output(), "\n") {
		var rec struct{ Msg, Run, Status string }
		if json.Unmarshal([]byte(l), &rec) == nil && rec.Msg == "run finished" {
			return rec.Run, rec.Status, true
		}
	}
	return "", "", false
}

// waitFor polls cond while p runs, at most within, and fails with p's
// output when p ends first or the time is up (waitWhileRunning with a bound
// of its own and the process's output, which a worker's failure needs).
func waitFor(t *testing.T, p *proc, what string, within time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(20 * time.Millisecond) {
		select {
		case <-p.done:
			t.Fatalf("the process ended (exit %d) before %s\n%s", p.code, what, p.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s\n%s", what, within, p.output())
		}
	}
}

// stopWorker sends SIGTERM once the worker has installed its signal
// handling (it logs "started") and wants exit 0.
func stopWorker(t *testing.T, p *proc, name string) {
	t.Helper()
	waitFor(t, p, name+"'s start", 30*time.Second, func() bool { return strings.Contains(p.output(), `"msg":"started"`) })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if code := p.wait(t); code != 0 {
		t.Errorf("%s exited %d on SIGTERM\n%s", name, code, p.output())
	}
}

// measureKillRun runs the plan twice side by side in the variant's setup,
// undisturbed and under the load of the trials (two at a time), and returns
// the shorter wall time from a run's start to its end: on a machine others
// load, a slow measurement would put many kills after the trials' runs
// ended.
func measureKillRun(t *testing.T, bin, plan string, v killVariant) time.Duration {
	t.Helper()
	type run struct {
		p          *proc
		start, end time.Time
	}
	var runs []*run
	for i := range 2 {
		h, _, _, env := killSetup(t, v.store)
		p, _ := startKillRun(t, h, bin, env, plan, v, fmt.Sprint("measure-", i))
		runs = append(runs, &run{p: p, start: time.Now()})
	}
	ended := func(r *run) bool {
		if v.taker == "worker" {
			_, _, ok := workerFinished(r.p)
			return ok
		}
		select {
		case <-r.p.done:
			return true
		default:
			return false
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for pending := len(runs); pending > 0; time.Sleep(20 * time.Millisecond) {
		pending = 0
		for _, r := range runs {
			if r.end.IsZero() && ended(r) {
				r.end = time.Now()
			}
			if r.end.IsZero() {
				pending++
				if time.Now().After(deadline) {
					t.Fatalf("an undisturbed run did not end within 60s\n%s", r.p.output())
				}
			}
		}
	}
	shortest := time.Duration(0)
	for _, r := range runs {
		if d := r.end.Sub(r.start); shortest == 0 || d < shortest {
			shortest = d
		}
		if v.taker == "resume" {
			if code := r.p.wait(t); code != 0 {
				t.Fatalf("an undisturbed run exited %d\n%s", code, r.p.output())
			}
			continue
		}
		if _, status, _ := workerFinished(r.p); status != string(engine.StatusCompleted) {
			t.Fatalf("an undisturbed worker's run is %s\n%s", status, r.p.output())
		}
		stopWorker(t, r.p, "the worker")
	}
	return shortest
}

// killTrialRun is one trial: kill at r.at, the other run, the takeover,
// the checks.
func killTrialRun(t *testing.T, bin, plan, other string, v killVariant, r *killTrial) {
	h, storeSrv, whSrv, env := killSetup(t, v.store)
	a, runID := startKillRun(t, h, bin, env, plan, v, fmt.Sprint("kill-", r.n))
	started := time.Now()
	exited := false
	select {
	case <-a.done:
		exited = true
	case <-time.After(r.at):
	}
	if err := a.cmd.Process.Kill(); err != nil && !exited {
		t.Fatal(err)
	}
	code := a.wait(t)
	killed := time.Now()
	if exited {
		r.endedBefore, r.at = true, killed.Sub(started)
		if code != 0 {
			t.Fatalf("the run ended on its own before the kill with exit %d\n%s", code, a.output())
		}
	}
	if id, _, ok := workerFinished(a); ok {
		r.endedBefore, runID = true, id // a worker logs the run's end before it records the request's
	}
	// A request the process sent before it died may still be executing:
	// look at the warehouse's sessions a few round trips later.
	time.Sleep(3 * killRTT)
	r.openTx = openTransaction(whSrv.QueryLog())
	r.held = heldLocks(t, whSrv, "ANALYTICS")
	if storeSrv != nil {
		r.storeTx = openTransaction(storeSrv.QueryLog())
		r.storeHeld = heldLocks(t, storeSrv, "DVT")
	}
	if runID == "" {
		if ids, err := h.listRuns(); err == nil && len(ids) == 1 {
			runID = ids[0] // the worker had created the run
		}
	}

	// The other run starts now, with the dead runner's transaction (if
	// any) still open, and nothing will take the dead run over before it
	// ended: it must complete on its own.
	b := startProc(t, bin, env, "run", "--threads", "2", "--lease-ttl", killTTLFlag, "--write-budget", killBudgetFlag, other)
	select {
	case <-b.done:
		r.bystander = fmt.Sprintf("exit %d after %s", b.code, time.Since(killed).Round(time.Millisecond))
		if b.code != 0 {
			t.Errorf("the other run exited %d while the dead runner's transaction was open (%s), want 0: it waited for the dead run\n%s", b.code, r.openTx, b.output())
		}
	case <-time.After(bystanderBound):
		r.bystander = "still running after " + bystanderBound.String()
		t.Errorf("the other run did not end within %s of the kill, before anything took the dead run over (dead runner's open transaction: %q): it waits for the dead run\n%s", bystanderBound, r.openTx, b.output())
	}

	// The taker: once the dead runner's lease expired.
	if !r.endedBefore {
		time.Sleep(time.Until(killed.Add(killTTL)))
	}
	deadline := killed.Add(killBound)
	if v.taker == "resume" {
		r.taker = "nothing to take over"
		if !r.endedBefore {
			r.taker = resumeWithin(t, bin, env, runID, plan, deadline)
		}
	} else {
		heir := startWorker(t, bin, env)
		for {
			if id, status, ok := workerFinished(heir); ok {
				r.taker = fmt.Sprintf("heir worker: run %s", status)
				if status != string(engine.StatusCompleted) {
					t.Fatalf("the heir worker's run %s is %s, want COMPLETED\n%s", id, status, heir.output())
				}
				if runID == "" {
					runID = id
				} else if id != runID {
					t.Fatalf("the heir worker finished run %s, want the dead worker's %s", id, runID)
				}
				r.recovered = time.Since(killed)
				break
			}
			// The dead worker had finished the run: if it recorded the
			// request's outcome too, there is nothing to take over.
			if r.endedBefore && requestDone(t, h) {
				r.taker = "nothing to take over"
				break
			}
			select {
			case <-heir.done:
				t.Fatalf("the heir worker exited %d before finishing the dead worker's run\n%s", heir.code, heir.output())
			default:
			}
			if time.Now().After(deadline) {
				r.taker = "heir worker: no run finished at the deadline"
				t.Fatalf("the heir worker did not finish the dead worker's run within %s of the kill (lease TTL %s + 30s)\nheir:\n%s", killBound, killTTL, heir.output())
			}
			time.Sleep(50 * time.Millisecond)
		}
		stopWorker(t, heir, "the heir worker")
	}
	if r.recovered == 0 && !r.endedBefore {
		r.recovered = time.Since(killed)
	}
	if r.recovered > killBound {
		t.Errorf("the run completed %s after the kill, later than the lease TTL %s + 30s", r.recovered.Round(time.Millisecond), killTTL)
	}

	// The other run, had it hung, has had the takeover to free it: it ends
	// now or the trial reports it.
	if code := b.wait(t); code != 0 {
		t.Errorf("the other run exited %d\n%s", code, b.output())
	}
	otherID := runIDRE.FindStringSubmatch(b.output())
	if otherID == nil {
		t.Fatalf("the other run printed no run id\n%s", b.output())
	}
	r.ledger = checkKillRecovery(t, h, runID, otherID[1])
}

// requestDone: the harness's store has one request, DONE with the outcome
// COMPLETED (`dvtrun queue --all --json`).
func requestDone(t *testing.T, h *harness) bool {
	t.Helper()
	r := h.run("queue", "--all", "--json")
	if r.code != 0 {
		t.Fatalf("queue --all --json: exit %d\n%s", r.code, r.stderr)
	}
	var reqs []struct{ State, Outcome string }
	if err := json.Unmarshal([]byte(r.stdout), &reqs); err != nil || len(reqs) != 1 {
		t.Fatalf("queue --all --json: %v, %d requests, want 1:\n%s", err, len(reqs), r.stdout)
	}
	if reqs[0].State == string(queue.StateDone) && reqs[0].Outcome != string(engine.StatusCompleted) {
		t.Fatalf("the request is DONE with outcome %s, want COMPLETED", reqs[0].Outcome)
	}
	return reqs[0].State == string(queue.StateDone)
}

// resumeWithin resumes the run until it completes, retrying while the dead
// runner's lease is still seen (exit 3) or the store is busy (exit 4: the
// run is left resumable), and fails the test at deadline.
func resumeWithin(t *testing.T, bin string, env []string, runID, plan string, deadline time.Time) string {
	t.Helper()
	for tries := 1; ; tries++ {
		p := startProc(t, bin, env, "resume", "--lease-ttl", killTTLFlag, "--write-budget", killBudgetFlag, runID, plan)
		select {
		case <-p.done:
		case <-time.After(time.Until(deadline)):
			p.cmd.Process.Kill()
			<-p.done
			t.Fatalf("resume (try %d) had not completed the run %s after the kill (lease TTL %s + 30s)\n%s", tries, killBound, killTTL, p.output())
		}
		switch {
		case p.code == 0:
			return fmt.Sprintf("resume completed it (try %d)", tries)
		case (p.code == exitLease || p.code == exitUnavailable) && time.Now().Before(deadline):
			time.Sleep(250 * time.Millisecond)
		default:
			t.Fatalf("resume (try %d) exited %d\n%s", tries, p.code, p.output())
		}
	}
}

// checkKillRecovery: both runs completed; the killed run's log is 1..n
// without gaps, every idempotency key once, every step completed once;
// every sql step of both plans took effect once; verify agrees. It returns
// how many steps of the killed run were completed from the ledger.
func checkKillRecovery(t *testing.T, h *harness, runID, otherID string) int {
	t.Helper()
	for _, id := range []string{runID, otherID} {
		if s := h.checkLog(id); s.Status != engine.StatusCompleted {
			t.Errorf("run %s is %s, want COMPLETED", id, s.Status)
		}
	}
	var evs []storedEvent
	for _, e := range h.events(runID) {
		evs = append(evs, storedEvent{seq: e.RunSeq, key: e.IdempotencyKey, typ: string(e.EventType), stepID: e.StepID})
	}
	checkSeqAndKeys(t, evs)
	for _, s := range []string{"sql.setup", "sql.s1", "sql.s2", "sql.s3", "sql.s4", "sql.s5", "test.once"} {
		if n := countEvents(evs, engine.StepCompleted, s); n != 1 {
			t.Errorf("step %s of the killed run has %d StepCompleted, want 1", s, n)
		}
	}
	got := h.effects()
	for _, s := range groupcommitEffects {
		if got[s] != 1 {
			t.Errorf("step %s of the killed run took effect %d times, want once (effects %v)", s, got[s], got)
		}
	}
	// The step ledger holds one row per committed attempt: one per DML step.
	if !uuidRE.MatchString(runID) {
		t.Fatalf("run id %q is not a UUID", runID) // it goes into the query below
	}
	ledger := h.rowsPerStep("SELECT step_id, count(*) FROM dvt_step_ledger WHERE run_id = '" + runID + "' GROUP BY step_id")
	for _, s := range groupcommitEffects {
		if n := ledger["sql."+s]; n != 1 {
			t.Errorf("the step ledger holds %d row(s) of sql.%s, want 1 (ledger %v)", n, s, ledger)
		}
	}
	gotOther := h.rowsPerStep("SELECT step, count(*) FROM bystander GROUP BY step")
	for _, s := range []string{"b1", "b2", "b3"} {
		if gotOther[s] != 1 {
			t.Errorf("step %s of the other run took effect %d times, want once (effects %v)", s, gotOther[s], gotOther)
		}
	}
	if r := h.run("verify", "--all"); r.code != 0 {
		t.Errorf("verify --all: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	return h.ledgerCompletions(runID)
}

var (
	beginRE = regexp.MustCompile(`(?i)^\s*(begin|start\s+transaction)\b`)
	endRE   = regexp.MustCompile(`(?i)^\s*(commit|rollback)\b`)
)

// heldLocks lists the tables whose locks a transaction holds on a
// server, through SHOW LOCKS on a session of the test's own.
func heldLocks(t *testing.T, srv *sftest.Server, database string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := srv.OpenDB(t, database, "PUBLIC").QueryContext(ctx, "SHOW LOCKS")
	if err != nil {
		t.Fatalf("SHOW LOCKS on %s: %v", database, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		row := map[string]string{}
		for i, c := range cols {
			row[strings.ToLower(c)] = vals[i].String
		}
		if strings.EqualFold(row["status"], "HOLDING") {
			out = append(out, row["resource"])
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// openTransaction returns the last statement of a session whose
// transaction the log shows open (BEGIN without COMMIT or ROLLBACK after
// it), shortened, or "" when every transaction ended.
func openTransaction(log []sftest.LoggedQuery) string {
	inTx := map[int64]bool{}
	last := map[int64]string{}
	var order []int64
	for _, q := range log {
		if _, seen := last[q.SessionID]; !seen {
			order = append(order, q.SessionID)
		}
		switch {
		case beginRE.MatchString(q.SQLText):
			inTx[q.SessionID] = q.Err == ""
		case endRE.MatchString(q.SQLText):
			inTx[q.SessionID] = false
		}
		last[q.SessionID] = q.SQLText
	}
	for _, id := range order {
		if inTx[id] {
			s := strings.Join(strings.Fields(last[id]), " ")
			if len(s) > 60 {
				s = s[:60] + "…"
			}
			return s
		}
	}
	return ""
}
