package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/spool"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
)

// The slow-store process tests (issue 11, "Must show"): the real binary
// with the Snowflake store and warehouse on the test server, the store
// made slower than the write-latency budget by holding the answers of its
// appends (the server executes and commits a held request; its client
// waits in vain, and a resend of the same events dedupes).
func TestSlowStoreProcesses(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	plan, err := filepath.Abs(fixture("groupcommit", "plan.yaml")) // the processes run elsewhere
	if err != nil {
		t.Fatal(err)
	}
	t.Run("SlowStoreSpoolsStepStarted", func(t *testing.T) { slowStoreSpoolsStepStarted(t, bin, plan) })
	for _, c := range storeGoneCases {
		t.Run("StoreGoneStopsResumable/"+c.name, func(t *testing.T) { storeGoneStopsResumable(t, bin, plan, c) })
	}
}

// slowStoreBudget is the --write-budget of both cases: short, so that a
// held append outlasts it, and no shorter than the CLI allows.
const slowStoreBudget = "300ms"

// slowStoreSpoolsStepStarted: the append carrying sql.setup's StepStarted
// is held longer than the budget. The writer must spool it (fail open) and
// the run go on; the step's own SQL is held in the warehouse meanwhile, so
// its StepCompleted cannot exist before the spooled StepStarted is stored.
// The run completes, the StepStarted lands before its StepCompleted, and
// the spool is cleared.
func slowStoreSpoolsStepStarted(t *testing.T, bin, plan string) {
	h, storeSrv, whSrv, env := snowflakeHarness(t)
	spoolDir := filepath.Join(h.dir, "spool")
	const step = "sql.setup" // the first step: no outcome is queued before its StepStarted
	started := sqlHex(string(engine.StepStarted)) + ", " + sqlHex(step)
	// Every append carrying the StepStarted is held, the writer's retries
	// after its attempt ran out of budget too, until released.
	storeHeld, releaseStore := storeSrv.HoldAnswers(func(q string) bool { return strings.Contains(q, started) })
	defer releaseStore()
	whHeld, releaseWarehouse := whSrv.HoldAnswers(func(q string) bool {
		return strings.Contains(q, "create table if not exists effects")
	})
	defer releaseWarehouse()

	a := startProc(t, bin, env, "run", "--threads", "2", "--lease-ttl", "2s", "--write-budget", slowStoreBudget, "--spool-dir", spoolDir, plan)
	awaitHeld(t, a, storeHeld, "an append carrying "+step+"'s StepStarted")
	awaitHeld(t, a, whHeld, step+"'s SQL in the warehouse")
	runID := h.onlyRun()
	sp, err := spool.Open(spoolDir)
	if err != nil {
		t.Fatal(err)
	}
	waitWhileRunning(t, a, "the spool holding "+step+"'s StepStarted while the store holds its append", func() bool {
		pending, err := sp.Pending(runID)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(pending, func(e engine.RunEventWrite) bool {
			return e.EventType == engine.StepStarted && e.StepID == step
		})
	})
	if evs := storedEvents(t, storeSrv, runID); countEvents(evs, engine.StepCompleted, step) != 0 {
		t.Fatalf("%s completed while its SQL's answer is held", step)
	}

	// The store is back: the writer's next retry stores the spooled
	// StepStarted (a duplicate of the held request's commit) and clears the
	// spool, all before the step can complete.
	releaseStore()
	waitWhileRunning(t, a, "the spool being cleared once the store answers", func() bool { return spoolFiles(t, spoolDir) == 0 })
	evs := storedEvents(t, storeSrv, runID)
	if countEvents(evs, engine.StepStarted, step) != 1 || countEvents(evs, engine.StepCompleted, step) != 0 {
		t.Fatalf("after the spool was cleared the store has %d StepStarted and %d StepCompleted of %s, want 1 and 0",
			countEvents(evs, engine.StepStarted, step), countEvents(evs, engine.StepCompleted, step), step)
	}
	releaseWarehouse()
	if code := a.wait(t); code != 0 {
		t.Fatalf("the run exited %d with a store slower than its budget for one StepStarted, want 0 (fail open)\n%s", code, a.output())
	}

	checkSlowStoreRun(t, h, storeSrv, runID, spoolDir)
}

// storeGone is a case of storeGoneStopsResumable: appends carrying an
// event of a type in pass are answered, every later one is held.
type storeGone struct {
	name string
	pass []engine.EventType
}

var storeGoneCases = []storeGone{
	// The store goes once the run is RUNNING: setup's StepStarted is
	// spooled when it went in a later append than RunStarted (group commit
	// decides), and its completion stops the run.
	{name: "AfterRunStarted", pass: []engine.EventType{engine.RunQueued, engine.RunStarted}},
	// The store goes right after the run was created: RunStarted and
	// setup's StepStarted are always spooled, and the resume appends them
	// first.
	{name: "AfterBootstrap", pass: []engine.EventType{engine.RunQueued}},
}

// storeGoneStopsResumable: every append's answer is held (the store is
// gone) from a point on while steps finish. A completion cannot fail open:
// the run stops with STORE_UNAVAILABLE, exit 4, and stays RUNNING; the
// events before the first unstored completion are in the spool. Once the
// store is back, `dvtrun resume` with the same spool completes the run
// with nothing lost or doubled, in the log or the warehouse.
func storeGoneStopsResumable(t *testing.T, bin, plan string, c storeGone) {
	h, storeSrv, _, env := snowflakeHarness(t)
	spoolDir := filepath.Join(h.dir, "spool")
	const step = "sql.setup"
	started := sqlHex(string(engine.StepStarted)) + ", " + sqlHex(step)
	held, release := storeSrv.HoldAnswers(func(q string) bool {
		return strings.Contains(q, "MERGE INTO dvt_run_events") &&
			!slices.ContainsFunc(c.pass, func(typ engine.EventType) bool { return strings.Contains(q, sqlHex(string(typ))) })
	})
	defer release()
	// Which held appends carried setup's StepStarted, noted as they come.
	var heldStarted atomic.Bool
	go func() {
		for a := range held {
			if strings.Contains(a.SQLText, started) {
				heldStarted.Store(true)
			}
		}
	}()

	a := startProc(t, bin, env, "run", "--threads", "2", "--lease-ttl", "2s", "--write-budget", slowStoreBudget, "--spool-dir", spoolDir, plan)
	if code := a.wait(t); code != exitUnavailable {
		t.Fatalf("the run exited %d with the store gone longer than its budget, want %d (STORE_UNAVAILABLE)\n%s", code, exitUnavailable, a.output())
	}
	if !strings.Contains(a.output(), "dvtrun: "+string(engine.CodeStoreUnavailable)+": ") {
		t.Errorf("the stopped run's stderr does not say %s:\n%s", engine.CodeStoreUnavailable, a.output())
	}
	runID := h.onlyRun()
	if s := h.statusOf(runID); s.Status != engine.StatusRunning {
		t.Fatalf("the stopped run is %s, want RUNNING (resumable)", s.Status)
	}
	sp, err := spool.Open(spoolDir)
	if err != nil {
		t.Fatal(err)
	}
	pending, err := sp.Pending(runID)
	if err != nil {
		t.Fatal(err)
	}
	spooled := func(typ engine.EventType, stepID string) bool {
		return slices.ContainsFunc(pending, func(e engine.RunEventWrite) bool { return e.EventType == typ && e.StepID == stepID })
	}
	outcomes := []engine.EventType{engine.StepCompleted, engine.StepFailed, engine.RunCompleted, engine.RunFailed, engine.RunCancelled}
	for _, e := range pending {
		if slices.Contains(outcomes, e.EventType) {
			t.Errorf("the spool holds %s of %q: an outcome never fails open", e.EventType, e.StepID)
		}
	}
	if heldStarted.Load() && !spooled(engine.StepStarted, step) {
		t.Errorf("an append carrying %s's StepStarted was held, but the stopped run did not spool it (spool: %d events)", step, len(pending))
	}
	// Every event before the first completion that the store never
	// acknowledged is spooled: after the bootstrap, none was.
	if !slices.Contains(c.pass, engine.RunStarted) && (!spooled(engine.RunStarted, "") || !spooled(engine.StepStarted, step)) {
		t.Errorf("every append after the bootstrap was held, but the stopped run did not spool RunStarted and %s's StepStarted (spool: %d events)", step, len(pending))
	}
	t.Logf("the stopped run left %d event(s) in the spool (setup's StepStarted held: %v); the warehouse had effects %v", len(pending), heldStarted.Load(), h.effects())

	release()
	h.resumeUntilDone(t, bin, env, runID, plan, "--write-budget", slowStoreBudget, "--spool-dir", spoolDir)
	checkSlowStoreRun(t, h, storeSrv, runID, spoolDir)
	stored := map[string]bool{}
	for _, e := range storedEvents(t, storeSrv, runID) {
		stored[e.key] = true
	}
	for _, e := range pending {
		if !stored[e.IdempotencyKey] {
			t.Errorf("the spooled %s of %q (key %s) is not in the resumed run's log", e.EventType, e.StepID, e.IdempotencyKey)
		}
	}
}

// checkSlowStoreRun asserts what both cases end with: the run completed,
// run_seq is 1..n without gaps, every idempotency key is stored once,
// every step completed once after its StepStarted, every sql step took
// effect once, the spool is empty and verify agrees.
func checkSlowStoreRun(t *testing.T, h *harness, storeSrv *sftest.Server, runID, spoolDir string) engine.Snapshot {
	t.Helper()
	snap := h.checkLog(runID)
	if snap.Status != engine.StatusCompleted {
		t.Errorf("the run is %s, want COMPLETED", snap.Status)
	}
	evs := storedEvents(t, storeSrv, runID)
	checkSeqAndKeys(t, evs)
	if len(snap.Steps) != 7 {
		t.Errorf("%d steps in the snapshot, want the plan's 7", len(snap.Steps))
	}
	for _, s := range snap.Steps {
		if n := countEvents(evs, engine.StepCompleted, s.StepID); n != 1 {
			t.Errorf("step %s has %d StepCompleted, want 1", s.StepID, n)
		}
		started, completed := int64(0), int64(0)
		for _, e := range evs {
			switch {
			case e.stepID != s.StepID:
			case e.typ == string(engine.StepStarted) && started == 0:
				started = e.seq
			case e.typ == string(engine.StepCompleted):
				completed = e.seq
			}
		}
		if started == 0 || started > completed {
			t.Errorf("step %s: StepStarted at run_seq %d, StepCompleted at %d: the StepStarted must land first", s.StepID, started, completed)
		}
	}
	got := h.effects()
	for _, s := range groupcommitEffects {
		if got[s] != 1 {
			t.Errorf("step %s took effect %d times, want once (effects %v)", s, got[s], got)
		}
	}
	if n := spoolFiles(t, spoolDir); n != 0 {
		t.Errorf("%d spool file(s) left in %s after the run completed", n, spoolDir)
	}
	if r := h.run("verify", "--all"); r.code != 0 {
		t.Errorf("verify --all: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	return snap
}

// snowflakeHarness starts a store and a warehouse test server (two, so
// that a hold sees only one side's requests) and points a harness and a
// child process environment at them.
func snowflakeHarness(t *testing.T) (*harness, *sftest.Server, *sftest.Server, []string) {
	t.Helper()
	// A runner that stops or dies may leave a warehouse transaction open
	// (a ledgered step holds its table locks until COMMIT): Snowflake
	// aborts such a detached transaction once it blocks another and is
	// idle for 5 minutes; here after a second.
	opts := sftest.Options{IdleTxAbort: time.Second}
	storeSrv, whSrv := sftest.StartWith(t, opts), sftest.StartWith(t, opts)
	h := newHarness(t)
	h.env["DVT_STORE"] = "snowflake://" + storeSrv.DSN("DVT", "PUBLIC")
	h.env["DVT_WAREHOUSE"] = "snowflake://" + whSrv.DSN("ANALYTICS", "PUBLIC")
	h.env["DVT_TARGET_PATH"] = filepath.Join(h.dir, "target")
	env := append(os.Environ(), "DVT_STORE="+h.env["DVT_STORE"], "DVT_WAREHOUSE="+h.env["DVT_WAREHOUSE"], "DVT_TARGET_PATH="+h.env["DVT_TARGET_PATH"])
	return h, storeSrv, whSrv, env
}

// awaitHeld waits for a server to hold an answer, failing when the process
// ends first.
func awaitHeld(t *testing.T, p *proc, held <-chan sftest.HeldAnswer, what string) {
	t.Helper()
	select {
	case <-held:
	case <-p.done:
		t.Fatalf("the process ended (exit %d) before the test server held %s\n%s", p.code, what, p.output())
	case <-time.After(60 * time.Second):
		t.Fatalf("the test server held no %s within 60s\n%s", what, p.output())
	}
}

// waitWhileRunning waits for cond, failing when the process ends first.
func waitWhileRunning(t *testing.T, p *proc, what string, cond func() bool) {
	t.Helper()
	waitUntil(t, what, func() bool {
		select {
		case <-p.done:
			t.Fatalf("the process ended (exit %d) before %s\n%s", p.code, what, p.output())
		default:
		}
		return cond()
	})
}

// spoolFiles counts the run files in a spool directory (engine/spool: one
// run-*.jsonl per run with events spooled).
func spoolFiles(t *testing.T, dir string) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "run-*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}
