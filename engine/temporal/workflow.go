package temporal

import (
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/dag"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// acts names the activities for ExecuteActivity (a nil receiver is enough).
var acts *Activities

// Names the workflow, its signal and its query are registered under.
const (
	WorkflowName = "dvtrun.run"
	SignalName   = "dvtrun.signal"
	QueryName    = "dvtrun.view"
)

// Change IDs of workflow.GetVersion: the points of the workflow code that
// will change. Workflows run for as long as their runs, across releases:
// code that changes the commands a workflow issues (which activities, in
// what order, with what options or ids) must keep, for the histories in
// flight, the commands they were started with. Each ID is read once, when
// a workflow execution starts (Run), and the branch to take follows from
// it; a history recorded before these call sites has no marker and reads
// workflow.DefaultVersion, which behaves as version 1.
//
// To change one of these points: raise its maxSupported (versions below),
// keep the old branch for the old version, and add a history recorded by
// the release before the change to testdata/ (make record-temporal-history
// writes one; TestReplayRecordedHistories replays every
// testdata/*.history.json against the new code).
const (
	// ChangeStepDispatch: how a step is dispatched — one Step activity
	// per start, its input (StepInput), its activity id (step#logical,
	// .rN for a rerun), StepStarted recorded by that activity. The next
	// change here is one store transaction per step.
	ChangeStepDispatch = "dvtrun.step-dispatch"
	// ChangeActivityOptions: the Start, Step and Emit activities'
	// timeouts, heartbeat and retry policies.
	ChangeActivityOptions = "dvtrun.activity-options"
	// ChangeSignals: how a signal is decided — its policy and the DAG
	// rules in one Emit batch, PAUSE cancelling the steps in flight.
	ChangeSignals = "dvtrun.signals"
)

// versions are the versions of the change IDs a workflow execution runs.
type versions struct {
	dispatch, options, signals workflow.Version
}

// readVersions records (or, replaying, reads) the version of each change.
// Version 1 is the code of this release; DefaultVersion, a history from
// before the call sites, behaves the same.
func readVersions(ctx workflow.Context) versions {
	return versions{
		dispatch: workflow.GetVersion(ctx, ChangeStepDispatch, workflow.DefaultVersion, 1),
		options:  workflow.GetVersion(ctx, ChangeActivityOptions, workflow.DefaultVersion, 1),
		signals:  workflow.GetVersion(ctx, ChangeSignals, workflow.DefaultVersion, 1),
	}
}

// Input is the workflow's input. Durations of zero take the defaults.
type Input struct {
	RunID    string
	Threads  int  // parallel steps (default 4)
	FailFast bool // stop scheduling after the first failure
	// HistoryBudget continues the workflow as new once its history has
	// this many events (0: only when the server suggests it).
	HistoryBudget int
	// StepTimeout is a step's StartToClose when the plan gives it no
	// timeout (default 1h); HeartbeatTimeout is how soon a dead worker's
	// step is retried elsewhere, and, since the SDK sends heartbeats at most
	// every 80% of it, how soon a cancel reaches a step's SQL (default 5s).
	StepTimeout      time.Duration
	HeartbeatTimeout time.Duration
	// Retries is a step's retries after its first attempt when the plan
	// says none (default 3; negative: none); the backoff starts at
	// RetryInitial (default 200ms) and doubles up to RetryCeiling (5s).
	Retries      int
	RetryInitial time.Duration
	RetryCeiling time.Duration
	// Carry is the state a workflow that continued as new carries on from.
	Carry *Carry `json:",omitempty"`
}

// Carry is the scheduling state carried across continue-as-new: the
// statuses of every step, not the events (the store has those).
type Carry struct {
	Steps     []StepInfo
	Status    []engine.StepStatus
	Logical   []int
	Run       engine.RunStatus
	SignalSeq int64
	FailFast  string
	Rerun     []string       // steps to start again as reruns (a PAUSE interrupted them)
	Retry     map[string]int // steps a RETRY_STEP queued, with their attempt
	Continued int            // how many times the run continued as new
}

// View is what the workflow's query answers: its view of the run.
type View struct {
	RunID     string
	Run       engine.RunStatus
	Counts    map[engine.StepStatus]int
	InFlight  []string
	FailFast  string
	Continued int
	// Versions are the versions of the change IDs the execution runs
	// (-1: a history from before the call sites).
	Versions map[string]int
}

func (in Input) withDefaults() Input {
	if in.Threads <= 0 {
		in.Threads = 4
	}
	if in.StepTimeout <= 0 {
		in.StepTimeout = time.Hour
	}
	if in.HeartbeatTimeout <= 0 {
		in.HeartbeatTimeout = 5 * time.Second
	}
	if in.Retries == 0 {
		in.Retries = 3
	}
	if in.RetryInitial <= 0 {
		in.RetryInitial = 200 * time.Millisecond
	}
	if in.RetryCeiling <= 0 {
		in.RetryCeiling = 5 * time.Second
	}
	return in
}

// flight is a step's activity in progress.
type flight struct {
	future workflow.Future
	cancel workflow.CancelFunc
	// paused: a PAUSE cancelled it; it starts again on RESUME.
	paused bool
}

// wf is one workflow execution's state; every method runs on the
// workflow's goroutine and is deterministic.
type wf struct {
	ctx    workflow.Context
	in     Input
	d      *dag.State
	steps  []StepInfo
	sigSeq int64
	// rerun: steps the log shows RUNNING or a PAUSE interrupted.
	rerun     []int
	reruns    []int // per step: how many reruns were started (activity ids)
	inflight  map[int]*flight
	continued int
	// v: the versions of the change IDs this execution runs (readVersions);
	// each branch on one names the versions it serves.
	v versions
}

// Run is the workflow of one dvtrun run (workflow id = run id).
func Run(ctx workflow.Context, in Input) error {
	in = in.withDefaults()
	w := &wf{ctx: ctx, in: in, inflight: map[int]*flight{}, v: readVersions(ctx)}
	if err := w.load(); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, QueryName, func() (View, error) { return w.view(), nil }); err != nil {
		return err
	}
	if w.d.Run.Terminal() {
		return nil
	}
	if err := w.emit(nil, nil, w.skipped(w.d.Blocked())...); err != nil {
		return err
	}
	sigs := workflow.GetSignalChannel(ctx, SignalName)
	for !w.d.Run.Terminal() {
		if x, ok := w.d.Final(len(w.inflight) > 0 || len(w.rerun) > 0); ok {
			if err := w.emit(nil, nil, x); err != nil {
				return err
			}
			w.d.Run = engine.RunStatus(target(x.Type))
			break
		}
		full := w.budgetReached()
		if full && len(w.inflight) == 0 {
			// Signals received but not handled would be lost.
			var sg engine.Signal
			for sigs.ReceiveAsync(&sg) {
				if err := w.signal(sg); err != nil {
					return err
				}
			}
			if !w.d.Run.Terminal() {
				return workflow.NewContinueAsNewError(ctx, WorkflowName, w.carry())
			}
			break
		}
		if !full {
			w.schedule()
		}
		sel := workflow.NewSelector(ctx)
		var stepErr error
		sel.AddReceive(sigs, func(c workflow.ReceiveChannel, _ bool) {
			var sg engine.Signal
			c.Receive(ctx, &sg)
			stepErr = w.signal(sg)
		})
		for _, i := range w.flying() {
			sel.AddFuture(w.inflight[i].future, func(f workflow.Future) { stepErr = w.done(i, f) })
		}
		sel.Select(ctx)
		if stepErr != nil {
			return stepErr
		}
	}
	return nil
}

// load reads the run (Start) or takes the carried state.
func (w *wf) load() error {
	var st StartResult
	if c := w.in.Carry; c != nil {
		st = StartResult{Steps: c.Steps, Status: c.Status, Logical: c.Logical, Run: c.Run, SignalSeq: c.SignalSeq, Retry: c.Retry}
		w.continued = c.Continued
	} else {
		actx := workflow.WithActivityOptions(w.ctx, workflow.ActivityOptions{
			StartToCloseTimeout: time.Minute,
			RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 10},
		})
		if err := workflow.ExecuteActivity(actx, acts.Start, StartInput{RunID: w.in.RunID, Threads: w.in.Threads}).Get(w.ctx, &st); err != nil {
			return err
		}
	}
	w.steps = st.Steps
	p := &plan.Plan{Steps: make([]plan.Step, len(st.Steps))}
	for i, s := range st.Steps {
		p.Steps[i] = plan.Step{ID: s.ID, DependsOn: s.DependsOn}
	}
	w.d = dag.New(p)
	w.d.Run = st.Run
	w.reruns = make([]int, len(st.Steps))
	for i := range st.Steps {
		w.d.Set(i, st.Status[i])
		w.d.SetLogical(i, st.Logical[i])
		if st.Status[i] == engine.StepStatusRunning {
			w.rerun = append(w.rerun, i)
		}
	}
	w.d.Seed()
	w.sigSeq = st.SignalSeq
	if c := w.in.Carry; c != nil {
		w.d.FailFast = c.FailFast
		w.rerun = w.rerun[:0]
		for _, id := range c.Rerun {
			i, _ := w.d.Index(id)
			w.rerun = append(w.rerun, i)
		}
	}
	ids := make([]string, 0, len(st.Retry))
	for id := range st.Retry {
		ids = append(ids, id)
	}
	slices.Sort(ids) // map order is random; workflow code must not be
	for _, id := range ids {
		if i, ok := w.d.Index(id); ok {
			w.d.QueueRetry(i, st.Retry[id])
		}
	}
	return nil
}

func (w *wf) carry() Input {
	in := w.in
	c := &Carry{Steps: w.steps, Run: w.d.Run, SignalSeq: w.sigSeq, FailFast: w.d.FailFast, Retry: map[string]int{}, Continued: w.continued + 1}
	for i, s := range w.steps {
		c.Status = append(c.Status, w.d.Status(i))
		c.Logical = append(c.Logical, w.d.Logical(i))
		if w.d.Retrying(i) {
			c.Retry[s.ID] = w.d.Logical(i)
			c.Status[i] = engine.StepStatusFailed
		}
	}
	for _, i := range w.rerun {
		c.Rerun = append(c.Rerun, w.steps[i].ID)
	}
	in.Carry = c
	return in
}

func (w *wf) budgetReached() bool {
	info := workflow.GetInfo(w.ctx)
	return info.GetContinueAsNewSuggested() || (w.in.HistoryBudget > 0 && info.GetCurrentHistoryLength() >= w.in.HistoryBudget)
}

// flying is the steps in flight in index order (map order is random).
func (w *wf) flying() []int {
	out := make([]int, 0, len(w.inflight))
	for i := range w.inflight {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// schedule starts reruns, then the steps the DAG rules say may start, up
// to Threads in flight.
func (w *wf) schedule() {
	if w.d.Run != engine.StatusRunning {
		return
	}
	for len(w.rerun) > 0 && len(w.inflight) < w.in.Threads {
		i := w.rerun[0]
		w.rerun = w.rerun[1:]
		w.start(i, true, engine.StepStatusRunning)
	}
	for _, i := range w.d.Pick(w.in.Threads - len(w.inflight)) {
		prior := w.d.Status(i)
		w.d.Set(i, engine.StepStatusRunning)
		w.start(i, false, prior)
	}
}

// start schedules step i's activity. Its id is the step id and logical
// attempt (and the rerun count): deterministic, and unique per start.
// ChangeStepDispatch and ChangeActivityOptions: DefaultVersion and 1
// dispatch alike; a change branches on w.v.dispatch / w.v.options here.
func (w *wf) start(i int, rerun bool, prior engine.StepStatus) {
	s := w.steps[i]
	retries := w.in.Retries
	if s.Retries > 0 {
		retries = s.Retries
	}
	maxAttempts := max(retries, 0) + 1
	timeout := w.in.StepTimeout
	if s.TimeoutMs > 0 {
		// The executor's own timeout fires first and records STEP_TIMEOUT;
		// StartToClose only catches a worker that hangs past it.
		timeout = time.Duration(s.TimeoutMs)*time.Millisecond + 30*time.Second
	}
	id := fmt.Sprintf("%s#%d", s.ID, w.d.Logical(i))
	if rerun {
		w.reruns[i]++
		id = fmt.Sprintf("%s.r%d", id, w.reruns[i])
	}
	ctx, cancel := workflow.WithCancel(w.ctx)
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID:          id,
		StartToCloseTimeout: timeout,
		HeartbeatTimeout:    w.in.HeartbeatTimeout,
		WaitForCancellation: true,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: w.in.RetryInitial, BackoffCoefficient: 2, MaximumInterval: w.in.RetryCeiling,
			MaximumAttempts: int32(maxAttempts)},
	})
	f := workflow.ExecuteActivity(ctx, acts.Step, StepInput{RunID: w.in.RunID, StepID: s.ID, Logical: w.d.Logical(i),
		Rerun: rerun, Prior: prior, MaxAttempts: maxAttempts})
	w.inflight[i] = &flight{future: f, cancel: cancel}
}

// done handles step i's finished activity.
func (w *wf) done(i int, f workflow.Future) error {
	fl := w.inflight[i]
	delete(w.inflight, i)
	var out StepOutput
	if err := f.Get(w.ctx, &out); err != nil {
		if fl.paused {
			w.rerun = append(w.rerun, i) // RUNNING in the log; starts again on RESUME
			return nil
		}
		// Out of attempts on an infrastructure error (store, lease): the
		// step stays RUNNING in the log, and the run with it, resumable.
		return fmt.Errorf("run %s: step %s could not complete on Temporal (the run stays RUNNING; resume it): %w", w.in.RunID, w.steps[i].ID, err)
	}
	return w.outcome(i, out)
}

func (w *wf) outcome(i int, out StepOutput) error {
	if !out.Failed {
		w.d.Succeeded(i)
		return nil
	}
	return w.emit(nil, nil, w.skipped(w.d.Failed(i, w.in.FailFast))...)
}

func (w *wf) skipped(skips []dag.Skip) []engine.Emission {
	ems := make([]engine.Emission, 0, len(skips))
	for _, sk := range skips {
		ems = append(ems, engine.Emission{Type: engine.StepSkipped, Step: w.steps[sk.I].ID, Attempt: w.d.Logical(sk.I), Payload: map[string]any{"reason": sk.Reason}})
	}
	return ems
}

// emit records ems through the Emit activity (its options:
// ChangeActivityOptions, DefaultVersion and 1 alike). The view is the run's
// status and each touched step's state before the batch: PENDING for a
// skip, RUNNING otherwise, at the step's logical attempt.
func (w *wf) emit(auth *engine.Signal, refused *string, ems ...engine.Emission) error {
	if len(ems) == 0 {
		return nil
	}
	run := w.d.Run
	if run == engine.StatusQueued || run == engine.StatusApproved {
		run = engine.StatusRunning
	}
	views := map[string]engine.StepState{}
	for _, x := range ems {
		if x.Step == "" {
			continue
		}
		st := engine.StepState{Status: engine.StepStatusRunning, LogicalAttemptID: x.Attempt}
		if x.Type == engine.StepSkipped {
			st.Status = engine.StepStatusPending
		}
		views[x.Step] = st
	}
	actx := workflow.WithActivityOptions(w.ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 20},
	})
	var out EmitOutput
	if err := workflow.ExecuteActivity(actx, acts.Emit, EmitInput{RunID: w.in.RunID, Run: run, Steps: views, Batch: encode(ems...), Authorize: auth}).Get(w.ctx, &out); err != nil {
		return err
	}
	if refused != nil {
		*refused = out.Refused
	}
	return nil
}

// signal decides a dvtrun signal: the signals policy (in the Emit
// activity), then the DAG rules, then its effect. PAUSE is immediate:
// steps in flight are cancelled (their SQL with them) and start again on
// RESUME. ChangeSignals: DefaultVersion and 1 decide alike; a change
// branches on w.v.signals here.
func (w *wf) signal(sg engine.Signal) error {
	if sg.Seq <= w.sigSeq || w.d.Run.Terminal() {
		return nil // decided before (the log or an earlier run of the workflow says so)
	}
	w.sigSeq = sg.Seq
	if why := w.d.Refuse(sg, w.in.RunID, ""); why != "" {
		return w.emit(&sg, nil, dag.Decision(sg, false, why, 0))
	}
	var refused string
	switch sg.Type {
	case engine.SignalPause:
		if err := w.emit(&sg, &refused, dag.Decision(sg, true, "", 0), dag.SignalEvent(sg, engine.RunPaused)); err != nil || refused != "" {
			return err
		}
		w.d.Run = engine.StatusPaused
		for _, i := range w.flying() {
			w.inflight[i].paused = true
			w.inflight[i].cancel()
		}
	case engine.SignalResume:
		if err := w.emit(&sg, &refused, dag.Decision(sg, true, "", 0), dag.SignalEvent(sg, engine.RunResumed)); err != nil || refused != "" {
			return err
		}
		w.d.Run = engine.StatusRunning
	case engine.SignalRetryStep:
		i, _ := w.d.Index(sg.StepID)
		next := w.d.Logical(i) + 1
		if err := w.emit(&sg, &refused, dag.Decision(sg, true, "", next)); err != nil || refused != "" {
			return err
		}
		w.d.QueueRetry(i, next)
	case engine.SignalCancel:
		if err := w.emit(&sg, &refused, dag.Decision(sg, true, "", 0)); err != nil || refused != "" {
			return err
		}
		return w.cancel(sg)
	}
	return nil
}

// cancel cancels the steps in flight (and their SQL), waits for their
// activities, and records their outcome, the StepSkipped of every step not
// started, and RunCancelled.
func (w *wf) cancel(sg engine.Signal) error {
	reason := "run cancelled"
	if sg.Reason != "" {
		reason += ": " + sg.Reason
	}
	var ems []engine.Emission
	for _, i := range w.flying() {
		w.inflight[i].cancel()
	}
	for _, i := range w.flying() {
		fl := w.inflight[i]
		delete(w.inflight, i)
		var out StepOutput
		if err := fl.future.Get(w.ctx, &out); err == nil {
			// It finished before the cancel reached it: its end is recorded.
			if out.Failed {
				ems = append(ems, w.skipped(w.d.Failed(i, false))...)
			} else {
				w.d.Succeeded(i)
			}
			continue
		}
		w.rerun = append(w.rerun, i)
	}
	slices.Sort(w.rerun)
	for _, i := range w.rerun {
		w.d.Set(i, engine.StepStatusFailed)
		ems = append(ems, engine.Emission{Type: engine.StepFailed, Step: w.steps[i].ID, Attempt: w.d.Logical(i), Payload: map[string]any{
			"error": engine.ErrorInfo{Code: string(engine.CodeStepCancelled), Message: reason},
		}})
	}
	w.rerun = nil
	w.d.ClearRetries()
	ems = append(ems, w.skipped(w.d.SkipPending(reason))...)
	ems = append(ems, dag.SignalEvent(sg, engine.RunCancelled))
	if err := w.emit(nil, nil, ems...); err != nil {
		return err
	}
	w.d.Run = engine.StatusCancelled
	return nil
}

func (w *wf) view() View {
	v := View{RunID: w.in.RunID, Run: w.d.Run, Counts: map[engine.StepStatus]int{}, FailFast: w.d.FailFast, Continued: w.continued,
		Versions: map[string]int{ChangeStepDispatch: int(w.v.dispatch), ChangeActivityOptions: int(w.v.options), ChangeSignals: int(w.v.signals)}}
	for _, st := range []engine.StepStatus{engine.StepStatusPending, engine.StepStatusRunning, engine.StepStatusSuccess, engine.StepStatusFailed, engine.StepStatusSkipped} {
		v.Counts[st] = w.d.Count(st)
	}
	for _, i := range w.flying() {
		v.InFlight = append(v.InFlight, w.steps[i].ID)
	}
	return v
}

func target(t engine.EventType) string {
	s, _ := engine.TargetOf(t)
	return s
}
