package main

import (
	"context"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
)

// storedEvent is one row of dvt_run_events as the Snowflake store keeps it.
type storedEvent struct {
	seq      int64
	key, typ string
	stepID   string
}

// TestKilledBetweenAppendAndAnswer (issue 11): a runner with the Snowflake
// store and warehouse on the test server is SIGKILLed while the answer to
// its append carrying a step's StepCompleted is held: the server executed
// and committed the append, the runner never learned it. `dvtrun resume`
// (a new process) must finish the run with every idempotency key stored
// once, run_seq 1..n without gaps, one StepCompleted per step, and the held
// step neither run nor taking effect again. The writer lets steps run
// ahead of the log, so the kill waits until every sql step took effect in
// the warehouse: those whose StepCompleted the store never got must be
// completed from the step ledger on resume, not run again.
func TestKilledBetweenAppendAndAnswer(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	plan, err := filepath.Abs(fixture("groupcommit", "plan.yaml")) // the processes run elsewhere
	if err != nil {
		t.Fatal(err)
	}
	ahead := 0 // steps that took effect unknown to the store, over the cases
	for _, c := range []appendKill{
		{step: "sql.setup"},            // the first completion: the whole plan runs ahead
		{step: "sql.s1", effect: "s1"}, // mid-run
		{step: "test.once"},            // the last step: its append may carry RunCompleted too
	} {
		t.Run(c.step, func(t *testing.T) { ahead += killBetweenAppendAndAnswer(t, bin, plan, c) })
	}
	if ahead == 0 && !t.Failed() {
		t.Error("no sql step ran ahead of a held append in any case: the step ledger's part was not exercised (did the writer stop letting steps run ahead?)")
	}
}

// groupcommitEffects are testdata/groupcommit's rows in effects, one per
// sql step sql.<row> that inserts.
var groupcommitEffects = []string{"s1", "s2", "s3", "s4", "s5"}

// appendKill is one case of TestKilledBetweenAppendAndAnswer.
type appendKill struct {
	step   string // whose StepCompleted the held append carries
	effect string // the step's row in effects, "" for none
}

// killBetweenAppendAndAnswer runs the case and returns how many sql steps
// took effect in the warehouse without the store knowing at the kill.
func killBetweenAppendAndAnswer(t *testing.T, bin, plan string, c appendKill) int {
	step := c.step
	h, storeSrv, _, env := snowflakeHarness(t) // the hold sees only the store's requests

	// An append renders each event as a row of hex literals in which the
	// event type is followed by the step id (store/snowflake/append.go).
	row := sqlHex(string(engine.StepCompleted)) + ", " + sqlHex(step)
	held, release := storeSrv.HoldAnswers(func(q string) bool { return strings.Contains(q, row) })
	defer release()

	// A budget longer than the test waits: the held StepCompleted cannot
	// fail open, and the runner must not stop on its own before the kill.
	a := startProc(t, bin, env, "run", "--threads", "2", "--lease-ttl", "2s", "--write-budget", "2m", plan)
	awaitHeld(t, a, held, "an append carrying "+step+"'s StepCompleted (did the rendering of event rows change?)")
	runID := h.onlyRun()
	// The held append is committed: another session sees its StepCompleted.
	before := storedEvents(t, storeSrv, runID)
	if n := countEvents(before, engine.StepCompleted, step); n != 1 {
		t.Fatalf("while the answer is held the store has %d StepCompleted of %s, want 1 (the append committed)", n, step)
	}
	waitUntil(t, "every sql step taking effect in the warehouse while the answer is held", func() bool {
		got := h.effects()
		for _, s := range groupcommitEffects {
			if got[s] == 0 {
				return false
			}
		}
		return true
	})
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	a.wait(t)
	release()
	// The held append may have completed the run (RunCompleted in the same
	// group commit as the last StepCompleted): resume then has nothing to do.
	s := h.statusOf(runID)
	t.Logf("after SIGKILL the run is %s; the store had %d events when the answer was held", s.Status, len(before))
	if s.Status != engine.StatusRunning && s.Status != engine.StatusCompleted {
		t.Fatalf("after SIGKILL the run is %s, want RUNNING (or COMPLETED by the held append)", s.Status)
	}

	h.resumeUntilDone(t, bin, env, runID, plan)

	snap := h.checkLog(runID)
	if snap.Status != engine.StatusCompleted {
		t.Fatalf("the resumed run is %s, want COMPLETED", snap.Status)
	}
	after := storedEvents(t, storeSrv, runID)
	keys := checkSeqAndKeys(t, after)
	for _, e := range before {
		if keys[e.key] != e.seq {
			t.Errorf("event %s was stored at run_seq %d before the kill, now at %d", e.key, e.seq, keys[e.key])
		}
	}
	if len(snap.Steps) != 7 {
		t.Errorf("%d steps in the snapshot, want the plan's 7", len(snap.Steps))
	}
	for _, s := range snap.Steps {
		if n := countEvents(after, engine.StepCompleted, s.StepID); n != 1 {
			t.Errorf("step %s has %d StepCompleted, want 1", s.StepID, n)
		}
	}
	if n := countEvents(after, engine.StepStarted, step); n != 1 {
		t.Errorf("%s started %d times, want once: its completion was stored before the kill", step, n)
	}
	got := h.effects()
	for _, s := range groupcommitEffects {
		if got[s] != 1 {
			t.Errorf("step %s took effect %d times, want once (effects %v)", s, got[s], got)
		}
	}
	if c.effect != "" && got[c.effect] != 1 {
		t.Errorf("the held step %s took effect %d times", step, got[c.effect])
	}
	ahead := 0
	for _, s := range groupcommitEffects {
		if countEvents(before, engine.StepCompleted, "sql."+s) > 0 {
			continue
		}
		ahead++
		if !completedFromLedger(h.events(runID), "sql."+s) {
			t.Errorf("sql.%s committed in the warehouse before the kill, unknown to the store, but its StepCompleted does not carry the ledger's result", s)
		}
	}
	t.Logf("%d sql steps ran ahead of the held append and were completed from the ledger", ahead)
	if r := h.run("verify", "--all"); r.code != 0 {
		t.Errorf("verify --all: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	return ahead
}

// sqlHex is a string as the Snowflake store renders it into a block: a
// quoted hex literal.
func sqlHex(s string) string { return "'" + hex.EncodeToString([]byte(s)) + "'" }

// storedEvents reads a run's rows of dvt_run_events on the store's server,
// in run_seq order, through a session of its own.
func storedEvents(t *testing.T, srv *sftest.Server, runID string) []storedEvent {
	t.Helper()
	db := srv.OpenDB(t, "DVT", "PUBLIC")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, `SELECT run_seq, idempotency_key, event_type, step_id
FROM dvt_run_events WHERE run_id = ? ORDER BY run_seq`, runID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []storedEvent
	for rows.Next() {
		var e storedEvent
		var stepID *string
		if err := rows.Scan(&e.seq, &e.key, &e.typ, &stepID); err != nil {
			t.Fatal(err)
		}
		if stepID != nil {
			e.stepID = *stepID
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkSeqAndKeys: run_seq is 1..n without gaps and every idempotency key
// is stored once; it returns each key's run_seq.
func checkSeqAndKeys(t *testing.T, evs []storedEvent) map[string]int64 {
	t.Helper()
	keys := map[string]int64{}
	for i, e := range evs {
		if e.seq != int64(i+1) {
			t.Errorf("event %d has run_seq %d: run_seq is not 1..n without gaps", i+1, e.seq)
		}
		if prev, dup := keys[e.key]; dup {
			t.Errorf("idempotency key %s is stored twice (run_seq %d and %d)", e.key, prev, e.seq)
		}
		keys[e.key] = e.seq
	}
	return keys
}

func countEvents(evs []storedEvent, typ engine.EventType, stepID string) int {
	n := 0
	for _, e := range evs {
		if e.typ == string(typ) && e.stepID == stepID {
			n++
		}
	}
	return n
}

// completedFromLedger: the step's StepCompleted in evs carries the ledger's
// result.
func completedFromLedger(evs []engine.RunEventRecord, stepID string) bool {
	for _, e := range evs {
		if e.StepID == stepID && fromLedger(e) {
			return true
		}
	}
	return false
}
