package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/runner"
)

func TestExecuteAllSuccess(t *testing.T) {
	h := newHarness(t)
	p := loadShop(t)
	runID := h.start(p)
	snap, evs := h.finish(runID, p, h.rn.Execute)
	if snap.Status != engine.StatusCompleted {
		t.Fatalf("run is %s, want COMPLETED", snap.Status)
	}
	for _, s := range p.Steps {
		if st := stepOf(snap, s.ID); st.Status != engine.StepStatusSuccess || st.LogicalAttemptID != 1 {
			t.Errorf("step %s: %+v, want SUCCESS at logical attempt 1", s.ID, st)
		}
		if n := len(h.wh.requests(s.ID)); n != 1 {
			t.Errorf("step %s ran %d times", s.ID, n)
		}
	}
	if got := []engine.EventType{evs[0].EventType, evs[1].EventType, evs[len(evs)-1].EventType}; !slices.Equal(got, []engine.EventType{engine.RunQueued, engine.RunStarted, engine.RunCompleted}) {
		t.Errorf("run events %v", got)
	}
	checkTwoAppends(t, h.log)

	// Steps start after their dependencies finished.
	seq := map[string]int64{}
	for _, e := range evs {
		seq[string(e.EventType)+" "+e.StepID] = e.RunSeq
	}
	for _, s := range p.Steps {
		for _, d := range s.DependsOn {
			if seq["StepStarted "+s.ID] < seq["StepCompleted "+d] {
				t.Errorf("%s started before %s completed", s.ID, d)
			}
		}
	}

	// The requests the warehouse got.
	seed := h.wh.requests("seed.customers")[0]
	if seed.SeedPath != "customers.csv" || seed.Relation != "customers" || seed.Kind != plan.KindSeed {
		t.Errorf("seed request %+v", seed)
	}
	for id, want := range map[string]string{"model.stg_customers": plan.MaterializedView, "model.orders": plan.MaterializedTable} {
		if got := h.wh.requests(id)[0].Materialized; got != want {
			t.Errorf("%s materialized %q, want %q", id, got, want)
		}
	}
	if got := h.wh.requests("test.not_null_orders_id")[0].Severity; got != plan.SeverityWarn {
		t.Errorf("test severity %q", got)
	}
	var tag map[string]any
	if err := json.Unmarshal([]byte(h.wh.requests("model.orders")[0].QueryTag), &tag); err != nil {
		t.Fatal(err)
	}
	if tag["run_id"] != runID || tag["step_id"] != "model.orders" || tag["logical_attempt"] != 1.0 || tag["engine_attempt"] != 1.0 {
		t.Errorf("query tag %v", tag)
	}
	done := ofType(evs, engine.StepCompleted)
	if pl := payloadOf(t, done[0]); pl["rowsAffected"] != 1.0 || pl["queryIds"] == nil {
		t.Errorf("StepCompleted payload %v", pl)
	}

	// Progress: every step starts and ends once, numbered 1..N in start order.
	starts, ends := h.progress.phase(runner.PhaseStepStarted), h.progress.phase(runner.PhaseStepDone)
	if len(starts) != len(p.Steps) || len(ends) != len(p.Steps) {
		t.Fatalf("%d starts and %d ends reported for %d steps", len(starts), len(ends), len(p.Steps))
	}
	for k, s := range starts {
		if s.Index != k+1 || s.Total != len(p.Steps) {
			t.Errorf("start #%d reported as %d of %d", k+1, s.Index, s.Total)
		}
	}
	if rd := h.progress.phase(runner.PhaseRunDone); len(rd) != 1 || rd[0].Snapshot.Status != engine.StatusCompleted {
		t.Errorf("run done reports %+v", rd)
	}

	// Execute on a finished run changes nothing.
	again, err := h.rn.Execute(h.ctx, runID, p, h.wh)
	if err != nil || again.Status != engine.StatusCompleted || len(h.events(runID)) != len(evs) {
		t.Errorf("second Execute: %v, %s, %d events (had %d)", err, again.Status, len(h.events(runID)), len(evs))
	}
}

func TestTestSeverity(t *testing.T) {
	for _, tc := range []struct {
		severity string
		want     engine.StepStatus
	}{
		{plan.SeverityWarn, engine.StepStatusSuccess},
		{plan.SeverityError, engine.StepStatusFailed},
		{"", engine.StepStatusFailed},
	} {
		t.Run("severity="+tc.severity, func(t *testing.T) {
			h := newHarness(t)
			p := &plan.Plan{PlanID: "p", PlanVersion: "1", Steps: []plan.Step{
				{ID: "test.unique_id", Kind: plan.KindTest, SQL: "select id from t group by id having count(*) > 1", Severity: tc.severity},
			}}
			h.wh.set("test.unique_id", func(context.Context, engine.StepRequest, int) (engine.StepResult, error) {
				return engine.StepResult{Failures: 3}, nil
			})
			runID := h.start(p)
			snap, _ := h.finish(runID, p, h.rn.Execute)
			if got := stepOf(snap, "test.unique_id").Status; got != tc.want {
				t.Fatalf("test step is %s, want %s", got, tc.want)
			}
			done := h.progress.phase(runner.PhaseStepDone)[0]
			if done.Result.Failures != 3 {
				t.Errorf("progress result %+v", done.Result)
			}
			if tc.want == engine.StepStatusSuccess {
				if done.Warning == "" || snap.Status != engine.StatusCompleted {
					t.Errorf("warning %q, run %s", done.Warning, snap.Status)
				}
			} else if engine.CodeOf(done.Err) != engine.CodeStepFailed || snap.Status != engine.StatusFailed {
				t.Errorf("err %v, run %s", done.Err, snap.Status)
			}
		})
	}
}

func TestFailureSkipsDependents(t *testing.T) {
	// a -> b -> c fails at a; d is an independent branch.
	for _, tc := range []struct {
		name        string
		failFast    bool
		wantD       engine.StepStatus
		wantDReason string
	}{
		{"branches continue", false, engine.StepStatusSuccess, ""},
		{"fail-fast", true, engine.StepStatusSkipped, "fail-fast"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.rn.Config.Threads = 1
			h.rn.Config.FailFast = tc.failFast
			p := chain([]string{"a", "b", "c", "d"}, map[string][]string{"b": {"a"}, "c": {"b"}})
			h.wh.set("a", func(context.Context, engine.StepRequest, int) (engine.StepResult, error) {
				return engine.StepResult{}, errors.New("syntax error near selec")
			})
			runID := h.start(p)
			snap, _ := h.finish(runID, p, h.rn.Execute)
			checkTwoAppends(t, h.log)
			if snap.Status != engine.StatusFailed || snap.Error == nil || snap.Error.Code != string(engine.CodeStepFailed) || !strings.Contains(snap.Error.Message, "a") {
				t.Fatalf("run %s error %+v", snap.Status, snap.Error)
			}
			if a := stepOf(snap, "a"); a.Status != engine.StepStatusFailed || a.Error == nil || !strings.Contains(a.Error.Message, "syntax error") || a.Error.Retryable {
				t.Errorf("a: %+v", a)
			}
			for _, id := range []string{"b", "c"} {
				st := stepOf(snap, id)
				if st.Status != engine.StepStatusSkipped || !strings.Contains(st.SkipReason, "upstream step a failed") {
					t.Errorf("%s: %s %q", id, st.Status, st.SkipReason)
				}
				if len(h.wh.requests(id)) != 0 {
					t.Errorf("%s ran", id)
				}
			}
			d := stepOf(snap, "d")
			if d.Status != tc.wantD || !strings.Contains(d.SkipReason, tc.wantDReason) {
				t.Errorf("d: %s %q", d.Status, d.SkipReason)
			}
			if tc.failFast && len(h.wh.requests("d")) != 0 {
				t.Error("fail-fast started d")
			}
			// Skipped steps are reported with an index too.
			for _, x := range h.progress.phase(runner.PhaseStepDone) {
				if x.Index < 1 || x.Index > 4 {
					t.Errorf("%s reported with index %d", x.Step.ID, x.Index)
				}
			}
			// The failure and its skips went in one batch.
			if n := h.log.appendsPerStep()["b"]; n != 1 {
				t.Errorf("b's skip took %d batches", n)
			}
		})
	}
}

func TestTransientRetries(t *testing.T) {
	for _, tc := range []struct {
		name        string
		retries     int // plan step's override; 0 = Config.Retry.Max (3)
		failures    int // transient errors before success
		wantStatus  engine.StepStatus
		wantEngine  int
		wantBackoff []time.Duration
	}{
		{"succeeds on the third engine attempt", 0, 2, engine.StepStatusSuccess, 3, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}},
		{"step retries override", 1, 5, engine.StepStatusFailed, 2, []time.Duration{100 * time.Millisecond}},
		{"config max exhausted", 0, 9, engine.StepStatusFailed, 4, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			p := chain([]string{"flaky"}, nil)
			p.Steps[0].Retries = tc.retries
			h.wh.set("flaky", func(_ context.Context, _ engine.StepRequest, call int) (engine.StepResult, error) {
				if call <= tc.failures {
					return engine.StepResult{}, engine.MarkTransient(errors.New("database is locked"))
				}
				return engine.StepResult{RowsAffected: 7}, nil
			})
			runID := h.start(p)
			snap, evs := h.finish(runID, p, h.rn.Execute)
			checkTwoAppends(t, h.log)
			st := stepOf(snap, "flaky")
			if st.Status != tc.wantStatus || st.EngineAttemptID != tc.wantEngine || st.LogicalAttemptID != 1 {
				t.Fatalf("step %+v, want %s at engine attempt %d, logical 1", st, tc.wantStatus, tc.wantEngine)
			}
			if got := types(evs, "flaky"); len(got) != 2 || got[0] != engine.StepStarted {
				t.Errorf("step events %v, want one StepStarted and one outcome", got)
			}
			last := evs[len(evs)-2]
			if last.StepID != "flaky" || last.EngineAttemptID != tc.wantEngine || last.LogicalAttemptID != 1 {
				t.Fatalf("outcome event %+v", last.RunEventWrite)
			}
			// The key ignores engineAttemptId: it is the first attempt's key.
			want, _ := engine.KeyInput{RunID: runID, StepID: "flaky", LogicalAttemptID: 1, EventType: last.EventType, PlanID: "p", PlanVersion: "1"}.IdempotencyKey()
			if last.IdempotencyKey != want {
				t.Errorf("outcome key %s, want %s", last.IdempotencyKey, want)
			}
			reqs := h.wh.requests("flaky")
			if len(reqs) != tc.wantEngine {
				t.Fatalf("%d warehouse calls, want %d", len(reqs), tc.wantEngine)
			}
			for k, r := range reqs {
				var tag struct {
					Engine  int `json:"engine_attempt"`
					Logical int `json:"logical_attempt"`
				}
				if err := json.Unmarshal([]byte(r.QueryTag), &tag); err != nil || tag.Engine != k+1 || tag.Logical != 1 {
					t.Errorf("call %d query tag %s", k+1, r.QueryTag)
				}
			}
			if !slices.Equal(h.sleeps, tc.wantBackoff) {
				t.Errorf("backoffs %v, want %v", h.sleeps, tc.wantBackoff)
			}
			if n := len(h.progress.phase(runner.PhaseStepRetry)); n != len(tc.wantBackoff) {
				t.Errorf("%d retry reports", n)
			}
			if tc.wantStatus == engine.StepStatusFailed && (st.Error == nil || !st.Error.Retryable) {
				t.Errorf("exhausted retries: error %+v, want retryable", st.Error)
			}
		})
	}
}

func TestNonTransientErrorIsNotRetried(t *testing.T) {
	h := newHarness(t)
	p := chain([]string{"bad"}, nil)
	h.wh.set("bad", func(context.Context, engine.StepRequest, int) (engine.StepResult, error) {
		return engine.StepResult{}, engine.Errorf(engine.CodePlanInvalid, "no such table: x")
	})
	runID := h.start(p)
	snap, err := h.rn.Execute(h.ctx, runID, p, h.wh)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(h.wh.requests("bad")); n != 1 {
		t.Errorf("ran %d times", n)
	}
	st := stepOf(snap, "bad")
	if st.Error == nil || st.Error.Code != string(engine.CodePlanInvalid) || st.Error.Message != "no such table: x" {
		t.Errorf("error %+v", st.Error)
	}
}

func TestStepTimeout(t *testing.T) {
	h := newHarness(t)
	p := chain([]string{"slow", "after"}, map[string][]string{"after": {"slow"}})
	p.Steps[0].Timeout = plan.Duration{Duration: 20 * time.Millisecond}
	h.wh.set("slow", blockUntilDone(nil))
	runID := h.start(p)
	snap, _ := h.finish(runID, p, h.rn.Execute)
	st := stepOf(snap, "slow")
	if st.Status != engine.StepStatusFailed || st.Error == nil || st.Error.Code != string(engine.CodeStepTimeout) {
		t.Fatalf("slow: %+v", st)
	}
	if !errors.Is(h.wh.ctxErr("slow"), context.DeadlineExceeded) {
		t.Errorf("the step's context ended with %v", h.wh.ctxErr("slow"))
	}
	if stepOf(snap, "after").Status != engine.StepStatusSkipped || snap.Status != engine.StatusFailed {
		t.Errorf("after %s, run %s", stepOf(snap, "after").Status, snap.Status)
	}
}

func TestCancelSignalInterruptsRunningStep(t *testing.T) {
	h := newHarness(t)
	p := chain([]string{"long", "next", "other"}, map[string][]string{"next": {"long"}, "other": {"long"}})
	started := make(chan string, 1)
	h.wh.set("long", blockUntilDone(started))
	runID := h.start(p)
	done := h.execAsync(h.ctx, runID, p)
	recv(t, started)
	if err := h.eng.CancelRun(h.ctx, runID, "operator asked"); err != nil {
		t.Fatal(err)
	}
	snap, evs := h.finished(runID, h.wait(done))
	if snap.Status != engine.StatusCancelled {
		t.Fatalf("run %s", snap.Status)
	}
	if !errors.Is(h.wh.ctxErr("long"), context.Canceled) {
		t.Errorf("the step's context ended with %v, want cancelled", h.wh.ctxErr("long"))
	}
	if st := stepOf(snap, "long"); st.Status != engine.StepStatusFailed || st.Error.Code != string(engine.CodeStepCancelled) {
		t.Errorf("long: %+v", st)
	}
	for _, id := range []string{"next", "other"} {
		if st := stepOf(snap, id); st.Status != engine.StepStatusSkipped || !strings.Contains(st.SkipReason, "cancelled") {
			t.Errorf("%s: %s %q", id, st.Status, st.SkipReason)
		}
	}
	acc := ofType(evs, engine.SignalAccepted)
	if len(acc) != 1 || payloadOf(t, acc[0])["signalType"] != "CANCEL" {
		t.Errorf("signal decisions %v", acc)
	}
	checkTwoAppends(t, h.log)
}

func TestPauseDrainsAndResumes(t *testing.T) {
	h := newHarness(t)
	h.rn.Config.Threads = 1
	h.rn.Config.DrainTimeout = time.Minute
	h.rn.Config.LeaseTTL = time.Hour // the clock jumps past DrainTimeout, not past the lease
	log := &pulseLog{countingLog: h.log}
	h.rn.Log = log
	p := chain([]string{"a", "b"}, nil)
	started := make(chan string, 1)
	release := make(chan struct{})
	h.wh.set("a", blockUntilReleased(started, release))
	runID := h.start(p)
	done := h.execAsync(h.ctx, runID, p)
	recv(t, started)
	h.signal(runID, engine.SignalPause, "")
	waitUntil(t, "the run is PAUSED and draining", func() bool {
		s := h.status(runID)
		return s.Status == engine.StatusPaused && s.Substatus == engine.SubstatusDraining
	})
	// A second PAUSE cannot apply.
	h.signal(runID, engine.SignalPause, "")
	waitUntil(t, "the second PAUSE is rejected", func() bool { return len(ofType(h.events(runID), engine.SignalRejected)) == 1 })
	// Draining longer than DrainTimeout raises one alert.
	h.clock.Advance(2 * time.Minute)
	waitUntil(t, "PAUSE_DRAIN_TIMEOUT", func() bool {
		as, _ := h.store.ListAlerts(h.ctx, runID)
		return len(as) == 1 && as[0].Code == engine.CodePauseDrainTimeout
	})
	close(release)
	waitUntil(t, "a drained", func() bool {
		s := h.status(runID)
		return stepOf(s, "a").Status == engine.StepStatusSuccess && s.Status == engine.StatusPaused && s.Substatus == ""
	})
	// b must not start while PAUSED: not with a's completion, nor in the
	// scheduling rounds the runner's pulses drive after it.
	waitPulses(t, log, 3)
	if n := len(h.wh.requests("b")); n != 0 {
		t.Fatalf("b started while the run was PAUSED")
	}
	h.signal(runID, engine.SignalResume, "")
	snap, evs := h.finished(runID, h.wait(done))
	if snap.Status != engine.StatusCompleted {
		t.Fatalf("run %s", snap.Status)
	}
	for _, id := range []string{"a", "b"} {
		if n := len(h.wh.requests(id)); n != 1 {
			t.Errorf("%s ran %d times", id, n)
		}
	}
	if len(ofType(evs, engine.RunPaused)) != 1 || len(ofType(evs, engine.RunResumed)) != 1 || len(ofType(evs, engine.SignalAccepted)) != 2 {
		t.Errorf("events %v", evTypes(evs))
	}
	rej := ofType(evs, engine.SignalRejected)
	if reason, _ := payloadOf(t, rej[0])["reason"].(string); !strings.Contains(reason, "PAUSED") {
		t.Errorf("rejection reason %q", reason)
	}
	checkTwoAppends(t, h.log)
}

func TestRetryStepSignal(t *testing.T) {
	h := newHarness(t)
	p := chain([]string{"a", "slow"}, nil)
	release := make(chan struct{})
	h.wh.set("a", func(_ context.Context, _ engine.StepRequest, call int) (engine.StepResult, error) {
		if call == 1 {
			return engine.StepResult{}, errors.New("divide by zero")
		}
		return engine.StepResult{RowsAffected: 2}, nil
	})
	h.wh.set("slow", func(context.Context, engine.StepRequest, int) (engine.StepResult, error) {
		<-release
		return engine.StepResult{}, nil
	})
	runID := h.start(p)
	done := h.execAsync(h.ctx, runID, p)
	waitUntil(t, "a failed", func() bool { return stepOf(h.status(runID), "a").Status == engine.StepStatusFailed })
	h.signal(runID, engine.SignalRetryStep, "slow") // not FAILED: rejected
	h.signal(runID, engine.SignalRetryStep, "nope") // unknown: rejected
	h.signal(runID, engine.SignalRetryStep, "a")
	waitUntil(t, "a succeeded on retry", func() bool { return stepOf(h.status(runID), "a").Status == engine.StepStatusSuccess })
	close(release)
	snap, evs := h.finished(runID, h.wait(done))
	if snap.Status != engine.StatusCompleted {
		t.Fatalf("run %s (%+v)", snap.Status, snap.Error)
	}
	a := stepOf(snap, "a")
	if a.LogicalAttemptID != 2 || a.EngineAttemptID != 1 {
		t.Errorf("a: %+v", a)
	}
	starts := 0
	for _, e := range evs {
		if e.StepID == "a" && e.EventType == engine.StepStarted {
			starts++
			if e.LogicalAttemptID != starts {
				t.Errorf("StepStarted #%d has logical attempt %d", starts, e.LogicalAttemptID)
			}
		}
	}
	if starts != 2 {
		t.Errorf("a started %d times", starts)
	}
	rej := ofType(evs, engine.SignalRejected)
	if len(rej) != 2 {
		t.Fatalf("%d rejections, want 2: %v", len(rej), evTypes(evs))
	}
	for k, want := range []string{"FAILED", "does not have"} {
		if reason, _ := payloadOf(t, rej[k])["reason"].(string); !strings.Contains(reason, want) {
			t.Errorf("rejection %d reason %q, want %q in it", k, reason, want)
		}
	}
}

func TestAdapterStartFailure(t *testing.T) {
	h := newHarness(t)
	h.wh.pingErr = errors.New("unable to open database file")
	p := chain([]string{"a"}, nil)
	runID := h.start(p)
	snap, err := h.rn.Execute(h.ctx, runID, p, h.wh)
	if err != nil {
		t.Fatal(err)
	}
	evs := h.events(runID)
	checkLog(t, evs, snap)
	if got := evTypes(evs); !slices.Equal(got, []engine.EventType{engine.RunQueued, engine.RunFailed}) {
		t.Fatalf("events %v, want RunQueued, RunFailed", got)
	}
	if snap.Status != engine.StatusFailed || snap.Error == nil || !strings.Contains(snap.Error.Message, "unable to open") {
		t.Errorf("snapshot %s %+v", snap.Status, snap.Error)
	}
	if len(h.wh.requests("a")) != 0 {
		t.Error("a step ran")
	}
}

func TestLeaseHeldByAnotherRunner(t *testing.T) {
	h := newHarness(t)
	p := chain([]string{"a"}, nil)
	runID := h.start(p)
	if err := h.store.AcquireLease(h.ctx, runID, "runner-b", time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err := h.rn.Execute(h.ctx, runID, p, h.wh)
	if !errors.Is(err, engine.ErrLeaseHeld) {
		t.Fatalf("err %v, want LEASE_HELD", err)
	}
	if n := len(h.events(runID)); n != 1 {
		t.Errorf("%d events written", n)
	}
}

func TestResumeAfterCrash(t *testing.T) {
	h := newHarness(t)
	ids := []string{"s1", "s2", "s3", "s4"}
	p := chain(ids, map[string][]string{"s2": {"s1"}, "s3": {"s2"}, "s4": {"s3"}})
	started := make(chan string, 1)
	h.wh.set("s3", func(ctx context.Context, req engine.StepRequest, call int) (engine.StepResult, error) {
		if call == 1 {
			return blockUntilDone(started)(ctx, req, call)
		}
		return engine.StepResult{RowsAffected: 3}, nil
	})
	runID := h.start(p)
	ctx, crash := context.WithCancel(h.ctx)
	done := h.execAsync(ctx, runID, p)
	recv(t, started)
	crash()
	res := h.wait(done)
	if !errors.Is(res.err, context.Canceled) {
		t.Fatalf("interrupted Execute returned %v", res.err)
	}
	before := h.events(runID)
	if s := engine.Project(runID, before); s.Status != engine.StatusRunning || stepOf(s, "s3").Status != engine.StepStatusRunning {
		t.Fatalf("after the crash: run %s, s3 %s", s.Status, stepOf(s, "s3").Status)
	}

	snap, evs := h.finish(runID, p, h.rn.Resume)
	if snap.Status != engine.StatusCompleted {
		t.Fatalf("run %s", snap.Status)
	}
	for id, want := range map[string]int{"s1": 1, "s2": 1, "s3": 2, "s4": 1} {
		if n := len(h.wh.requests(id)); n != want {
			t.Errorf("%s ran %d times, want %d", id, n, want)
		}
		if n := len(slices.DeleteFunc(types(evs, id), func(t engine.EventType) bool { return t != engine.StepStarted })); n != 1 {
			t.Errorf("%s has %d StepStarted", id, n)
		}
	}
	// The interrupted step ran again as engine attempt 2 of logical attempt 1.
	if s3 := stepOf(snap, "s3"); s3.EngineAttemptID != 2 || s3.LogicalAttemptID != 1 {
		t.Errorf("s3 %+v", s3)
	}
	if !slices.EqualFunc(evs[:len(before)], before, func(a, b engine.RunEventRecord) bool { return a.EventID == b.EventID && a.RunSeq == b.RunSeq }) {
		t.Error("resume changed the events written before the crash")
	}
	if n := len(ofType(evs, engine.RunStarted)); n != 1 {
		t.Errorf("%d RunStarted", n)
	}
	checkTwoAppends(t, h.log)
}

func TestSecretsNeverLeak(t *testing.T) {
	// Every character that changes when the value is escaped (SQL, JSON).
	const secret = "hun'ter2\"very\\secret\nend"
	h := newHarness(t)
	h.rn.Secrets = func(name string) (string, bool) { return secret, name == "API_KEY" }
	p := &plan.Plan{PlanID: "p", PlanVersion: "1", Steps: []plan.Step{
		{ID: "sql.fails", Kind: plan.KindSQL, SQL: "select * from api where key = {{ secret('API_KEY') }}", Secrets: []plan.SecretRef{{Name: "API_KEY"}}},
		{ID: "sql.echoes", Kind: plan.KindSQL, SQL: "select {{ secret('API_KEY') }}", Secrets: []plan.SecretRef{{Name: "API_KEY"}}},
		{ID: "sql.undeclared", Kind: plan.KindSQL, SQL: "select {{ secret('OTHER') }}", Secrets: []plan.SecretRef{{Name: "OTHER"}}},
		// Declares no secret, but reads back what sql.echoes stored: its
		// warehouse error quotes the value SQL-escaped, upper-cased too.
		{ID: "sql.readback", Kind: plan.KindSQL, SQL: "select * from audit_log"},
	}}
	h.wh.set("sql.readback", func(context.Context, engine.StepRequest, int) (engine.StepResult, error) {
		return engine.StepResult{}, errors.New("bad value '" + strings.ReplaceAll(secret, "'", "''") + "' (" + strings.ToUpper(secret) + ")")
	})
	h.wh.set("sql.fails", func(_ context.Context, req engine.StepRequest, call int) (engine.StepResult, error) {
		if call == 1 {
			return engine.StepResult{}, engine.MarkTransient(errors.New("locked while binding " + req.Params[0].(string)))
		}
		return engine.StepResult{}, errors.New("bad key '" + req.Params[0].(string) + "'")
	})
	h.wh.set("sql.echoes", func(_ context.Context, req engine.StepRequest, _ int) (engine.StepResult, error) {
		return engine.StepResult{Outputs: map[string]any{"value": req.Params[0]}}, nil
	})
	runID := h.start(p)
	snap, err := h.rn.Execute(h.ctx, runID, p, h.wh)
	if err != nil {
		t.Fatal(err)
	}
	checkLog(t, h.events(runID), snap)
	req := h.wh.requests("sql.fails")[0]
	if req.SQL != "select * from api where key = ?" || !slices.Equal(req.Params, []any{secret}) {
		t.Errorf("request SQL %q params %v", req.SQL, req.Params)
	}
	if len(h.wh.requests("sql.undeclared")) != 0 || stepOf(snap, "sql.undeclared").Error.Code != string(engine.CodeSecretNotFound) {
		t.Errorf("undeclared secret: %+v", stepOf(snap, "sql.undeclared"))
	}
	forms := []string{secret, strings.ReplaceAll(secret, "'", "''"), strings.ToUpper(secret), strings.ToLower(secret), "hun'ter2", "HUN''TER2", `hun'ter2\"very`}
	for _, e := range h.events(runID) {
		b, _ := json.Marshal(e)
		for _, f := range forms {
			if strings.Contains(string(b), f) || strings.Contains(string(e.Payload), f) {
				t.Errorf("%s of %s carries the secret as %q: %s", e.EventType, e.StepID, f, b)
			}
		}
	}
	if msg := stepOf(snap, "sql.readback").Error.Message; strings.Count(msg, engine.Redacted) != 2 {
		t.Errorf("a step that did not declare the secret stored %q", msg)
	}
	reported := 0
	for _, x := range append(h.progress.phase(runner.PhaseStepDone), h.progress.phase(runner.PhaseStepRetry)...) {
		if x.Err == nil {
			continue
		}
		reported++
		for _, f := range forms {
			if strings.Contains(x.Err.Error(), f) {
				t.Errorf("progress of %s leaks the secret: %v", x.Step.ID, x.Err)
			}
		}
		if errors.Unwrap(x.Err) != nil && strings.Contains(errors.Unwrap(x.Err).Error(), secret) {
			t.Errorf("progress of %s wraps the secret", x.Step.ID)
		}
	}
	if reported < 3 {
		t.Errorf("%d progress errors, want the retry, the failure and the missing secret", reported)
	}
	if msg := stepOf(snap, "sql.fails").Error.Message; !strings.Contains(msg, "[REDACTED]") {
		t.Errorf("failure message %q, want the secret redacted", msg)
	}
}

func TestStoreGoesAwayMidRun(t *testing.T) {
	h := newHarness(t)
	h.rn.Config.Threads = 1
	h.rn.Config.WriteBudget = 200 * time.Millisecond // of the fake clock, which each reading moves 1ms on
	ids := []string{"a", "b", "c", "d", "e"}
	p := chain(ids, map[string][]string{"b": {"a"}, "c": {"b"}, "d": {"c"}, "e": {"d"}})
	runID := h.start(p)
	// b's outcome cannot be stored: b ends once a's is (group commit would
	// otherwise join them), and its StepStarted went with a's outcome.
	h.wh.set("b", func(context.Context, engine.StepRequest, int) (engine.StepResult, error) {
		waitUntil(t, "a's outcome stored", func() bool {
			return stepOf(engine.Project(runID, h.events(runID)), "a").Status == engine.StepStatusSuccess
		})
		return engine.StepResult{}, nil
	})
	refuse := func(evs []engine.RunEventWrite) bool {
		return slices.ContainsFunc(evs, func(e engine.RunEventWrite) bool { return e.EventType == engine.StepCompleted && e.StepID == "b" })
	}
	h.log.refuse.Store(&refuse)
	snap, err := h.rn.Execute(h.ctx, runID, p, h.wh)
	if engine.CodeOf(err) != engine.CodeStoreUnavailable {
		t.Fatalf("Execute returned %v, want STORE_UNAVAILABLE", err)
	}
	if snap.Status != engine.StatusRunning {
		t.Errorf("snapshot after the failure: %s", snap.Status)
	}
	if rd := h.progress.phase(runner.PhaseRunDone); len(rd) != 0 {
		t.Error("a run that stopped was reported done")
	}
	if s := engine.Project(runID, h.events(runID)); stepOf(s, "b").Status != engine.StepStatusRunning || stepOf(s, "a").Status != engine.StepStatusSuccess {
		t.Fatalf("log after the failure: a %s, b %s", stepOf(s, "a").Status, stepOf(s, "b").Status)
	}

	h.log.refuse.Store(nil)
	snap, err = h.rn.Resume(h.ctx, runID, p, h.wh)
	if err != nil {
		t.Fatal(err)
	}
	snap = checkLog(t, h.events(runID), snap)
	if snap.Status != engine.StatusCompleted {
		t.Fatalf("resumed run %s", snap.Status)
	}
	if n := len(h.wh.requests("a")); n != 1 {
		t.Errorf("a ran %d times", n)
	}
}

func evTypes(evs []engine.RunEventRecord) []engine.EventType {
	out := make([]engine.EventType, len(evs))
	for i, e := range evs {
		out[i] = e.EventType
	}
	return out
}

func TestLeaseLostStopsTheRun(t *testing.T) {
	h := newHarness(t)
	// The runner learns of the takeover at its next pulse (every
	// SignalPoll), whatever its TTL: a long one, so that a slow machine
	// (-race, load) never makes it fence itself off first.
	h.rn.Config.LeaseTTL = time.Minute
	p := chain([]string{"long", "next"}, map[string][]string{"next": {"long"}})
	started := make(chan string, 1)
	h.wh.set("long", blockUntilDone(started))
	runID := h.start(p)
	done := h.execAsync(h.ctx, runID, p)
	recv(t, started)
	// Another runner takes over, as if this one had stalled past its TTL.
	if err := h.store.ReleaseLease(h.ctx, runID, "runner-a"); err != nil {
		t.Fatal(err)
	}
	if err := h.store.AcquireLease(h.ctx, runID, "runner-b", time.Minute); err != nil {
		t.Fatal(err)
	}
	res := h.wait(done)
	if !errors.Is(res.err, engine.ErrLeaseLost) {
		t.Fatalf("Execute returned %v, want LEASE_LOST", res.err)
	}
	if !errors.Is(h.wh.ctxErr("long"), context.Canceled) {
		t.Errorf("the running step's context ended with %v", h.wh.ctxErr("long"))
	}
	// long's StepStarted may or may not have been stored before the
	// takeover (steps do not wait for it); its outcome never is.
	if got := types(h.events(runID), "long"); len(got) > 1 || (len(got) == 1 && got[0] != engine.StepStarted) {
		t.Errorf("long's events %v: a runner without the lease wrote its outcome", got)
	}
}

func TestExecuteRefuses(t *testing.T) {
	h := newHarness(t)
	p := chain([]string{"a"}, nil)
	runID := h.start(p)
	other := chain([]string{"a"}, nil)
	other.PlanVersion = "2"
	cyclic := chain([]string{"a", "b"}, map[string][]string{"a": {"b"}, "b": {"a"}})
	for _, tc := range []struct {
		name  string
		runID string
		plan  *plan.Plan
		wh    engine.Warehouse
		want  engine.Code
	}{
		{"another plan version", runID, other, h.wh, engine.CodePlanHashMismatch},
		{"invalid plan", runID, cyclic, h.wh, engine.CodePlanInvalid},
		{"no warehouse", runID, p, nil, engine.CodeInvalidArgument},
		{"unknown run", "00000000-0000-4000-8000-ffffffffffff", p, h.wh, engine.CodeRunNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.rn.Execute(h.ctx, tc.runID, tc.plan, tc.wh)
			if engine.CodeOf(err) != tc.want {
				t.Errorf("err %v, want %s", err, tc.want)
			}
		})
	}
	if n := len(h.events(runID)); n != 1 {
		t.Errorf("refused Executes wrote %d events", n-1)
	}
}

func TestResumeOfPausedRunWaitsForResume(t *testing.T) {
	h := newHarness(t)
	h.rn.Config.Threads = 1
	p := chain([]string{"a", "b"}, nil)
	started := make(chan string, 1)
	h.wh.set("a", func(ctx context.Context, req engine.StepRequest, call int) (engine.StepResult, error) {
		if call == 1 {
			return blockUntilDone(started)(ctx, req, call)
		}
		return engine.StepResult{}, nil
	})
	log := &pulseLog{countingLog: h.log}
	h.rn.Log = log
	runID := h.start(p)
	ctx, crash := context.WithCancel(h.ctx)
	done := h.execAsync(ctx, runID, p)
	recv(t, started)
	h.signal(runID, engine.SignalPause, "")
	waitUntil(t, "PAUSED", func() bool { return h.status(runID).Status == engine.StatusPaused })
	crash()
	if res := h.wait(done); res.err == nil {
		t.Fatal("interrupted Execute returned no error")
	}

	done = h.execAsync(h.ctx, runID, p)
	// The resumed runner finishes the step that was in flight (draining)
	// but starts nothing new and does not handle the PAUSE again.
	waitUntil(t, "a drained", func() bool { return stepOf(h.status(runID), "a").Status == engine.StepStatusSuccess })
	waitPulses(t, log, 3) // scheduling rounds in which b would have started
	if s := h.status(runID); s.Status != engine.StatusPaused || len(h.wh.requests("b")) != 0 {
		t.Fatalf("run %s, b ran %d times", s.Status, len(h.wh.requests("b")))
	}
	h.signal(runID, engine.SignalResume, "")
	snap, evs := h.finished(runID, h.wait(done))
	if snap.Status != engine.StatusCompleted || len(ofType(evs, engine.RunPaused)) != 1 || len(ofType(evs, engine.SignalAccepted)) != 2 {
		t.Errorf("run %s, events %v", snap.Status, evTypes(evs))
	}
	if a := stepOf(snap, "a"); a.EngineAttemptID != 2 {
		t.Errorf("a %+v, want engine attempt 2", a)
	}
}

func TestResumeStartsAnAcceptedRetry(t *testing.T) {
	h := newHarness(t)
	h.rn.Config.WriteBudget = 200 * time.Millisecond
	p := chain([]string{"a", "slow"}, nil)
	h.wh.set("a", func(_ context.Context, _ engine.StepRequest, call int) (engine.StepResult, error) {
		if call == 1 {
			return engine.StepResult{}, errors.New("divide by zero")
		}
		return engine.StepResult{}, nil
	})
	h.wh.set("slow", func(ctx context.Context, req engine.StepRequest, call int) (engine.StepResult, error) {
		if call == 1 {
			return blockUntilDone(nil)(ctx, req, call)
		}
		return engine.StepResult{}, nil
	})
	// The runner stops between accepting RETRY_STEP and starting the retry.
	cut := func(evs []engine.RunEventWrite) int {
		return slices.IndexFunc(evs, func(e engine.RunEventWrite) bool { return e.EventType == engine.StepStarted && e.LogicalAttemptID == 2 })
	}
	h.log.cut.Store(&cut)
	runID := h.start(p)
	done := h.execAsync(h.ctx, runID, p)
	waitUntil(t, "a failed", func() bool { return stepOf(h.status(runID), "a").Status == engine.StepStatusFailed })
	h.signal(runID, engine.SignalRetryStep, "a")
	if res := h.wait(done); engine.CodeOf(res.err) != engine.CodeStoreUnavailable {
		t.Fatalf("Execute returned %v, want STORE_UNAVAILABLE", res.err)
	}
	if n := len(ofType(h.events(runID), engine.SignalAccepted)); n != 1 {
		t.Fatalf("%d SignalAccepted before the resume", n)
	}

	h.log.cut.Store(nil)
	snap, evs := h.finish(runID, p, h.rn.Resume)
	if a := stepOf(snap, "a"); a.Status != engine.StepStatusSuccess || a.LogicalAttemptID != 2 || snap.Status != engine.StatusCompleted {
		t.Errorf("a %+v, run %s", a, snap.Status)
	}
	if n := len(ofType(evs, engine.SignalAccepted)); n != 1 {
		t.Errorf("the RETRY_STEP was handled %d times", n)
	}
}
