package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/stepview"
	"github.com/dvtrun/dvtrun/store"
)

// readEngine is an Engine for commands that only read (and record alerts).
func (c *cli) engineFor(st stateStore) *engine.Engine {
	return &engine.Engine{
		Log:    st,
		Clock:  engine.ClockFunc(time.Now),
		IDs:    engine.IDFunc(newID),
		Config: c.config(),
	}
}

func (c *cli) config() engine.Config {
	return engine.Config{
		TenantID:      c.g.tenant,
		ProjectID:     c.g.project,
		EnvironmentID: c.g.environment,
		TriggeredBy:   envOr(c.env, "USER", "dvtrun"),
		TriggerSource: "cli",
	}
}

// loadRun returns the metadata of the run arg names, or RUN_NOT_FOUND when
// none exists in this tenant/project/environment: every read is scoped. arg
// is a run id, a unique prefix of one (as git resolves a short hash; an
// ambiguous one is INVALID_ARGUMENT naming the candidates), or "last", the
// newest run (of the plan --plan names, where the command has that flag).
func (c *cli) loadRun(ctx context.Context, st stateStore, arg string) (engine.RunMetadata, error) {
	scope := store.RunFilter{TenantID: c.g.tenant, ProjectID: c.g.project, EnvironmentID: c.g.environment}
	if arg == "last" {
		f := scope
		f.PlanID, f.Limit = c.lastPlan, 1
		runs, err := st.ListRuns(ctx, f)
		if err != nil {
			return engine.RunMetadata{}, err
		}
		if len(runs) == 0 {
			if c.lastPlan != "" {
				return engine.RunMetadata{}, engine.Errorf(engine.CodeRunNotFound, "no run of plan %s in tenant %s, project %s, environment %s", c.clean(c.lastPlan), c.g.tenant, c.g.project, c.g.environment)
			}
			return engine.RunMetadata{}, engine.Errorf(engine.CodeRunNotFound, "no run in tenant %s, project %s, environment %s", c.g.tenant, c.g.project, c.g.environment)
		}
		return runs[0].RunMetadata, nil
	}
	meta, err := st.GetRun(ctx, arg)
	if err == nil && meta.TenantID == c.g.tenant && meta.ProjectID == c.g.project && meta.EnvironmentID == c.g.environment {
		return meta, nil
	}
	if err != nil && engine.CodeOf(err) != engine.CodeRunNotFound {
		return engine.RunMetadata{}, err
	}
	notFound := engine.Errorf(engine.CodeRunNotFound, "run %s not found in tenant %s, project %s, environment %s", c.clean(arg), c.g.tenant, c.g.project, c.g.environment)
	if arg == "" {
		return engine.RunMetadata{}, notFound
	}
	// Not a whole id of this scope: a prefix of one? At most maxCandidates
	// are named when several match.
	const maxCandidates = 10
	f := scope
	f.RunIDPrefix, f.Limit = arg, maxCandidates+1
	runs, err := st.ListRuns(ctx, f)
	if err != nil {
		return engine.RunMetadata{}, err
	}
	switch len(runs) {
	case 0:
		return engine.RunMetadata{}, notFound
	case 1:
		return runs[0].RunMetadata, nil
	}
	var names []string
	for i, r := range runs {
		if i == maxCandidates {
			names = append(names, "…")
			break
		}
		names = append(names, c.clean(r.RunID)+" ("+c.clean(r.PlanID)+", "+fmtTime(r.CreatedAt)+")")
	}
	return engine.RunMetadata{}, engine.Errorf(engine.CodeInvalidArgument, "run id prefix %s is ambiguous: it starts %s", c.clean(arg), strings.Join(names, ", "))
}

// lastPlanFlag registers --plan on a command that takes a RUN_ID: with
// RUN_ID last, the newest run of that plan.
func (c *cli) lastPlanFlag(fs *flag.FlagSet) {
	fs.StringVar(&c.lastPlan, "plan", "", "with RUN_ID `last`: the newest run of plan ID")
}

// newTable is the one layout of every table the CLI prints: columns two
// spaces apart. Flush it when the rows are written.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

func (c *cli) printJSON(v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := io.WriteString(c.stdout, c.cleanDoc(buf.String()))
	return err
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

func cmdRuns(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("runs", "", "List runs, newest first, filtered by the store (keyset paging: --after the cursor a page prints).\n"+
		"WAIT is the time queued before the start, DURATION the execution; FIRST FAILURE the first step that failed.")
	limit := fs.Int("limit", 20, "at most `N` runs")
	asJSON := fs.Bool("json", false, "print JSON (the next page's cursor goes to stderr)")
	status := fs.String("status", "", "only runs in `STATUS` (QUEUED, RUNNING, PAUSED, COMPLETED, FAILED, CANCELLED)")
	plan := fs.String("plan", "", "only runs of plan `ID`")
	schedule := fs.String("schedule", "", "only runs of schedule `NAME`")
	trigger := fs.String("trigger", "", "only runs triggered by `KIND`: manual, schedule, queue or retry (retry-of)")
	// --target is the global flag: here it also keeps only the runs
	// recorded with that target, and names no config target if the
	// configuration has none of that name.
	fs.Lookup("target").Usage = "only runs recorded with target `NAME` (and, when the config has that target, on its store; env DVT_TARGET)"
	c.targetIsFilter = true
	since := fs.String("since", "", "only runs created at or after `TIME` (RFC 3339, YYYY-MM-DD, or a duration ago such as 24h)")
	until := fs.String("until", "", "only runs created before `TIME` (as --since)")
	after := fs.String("after", "", "the page after `CURSOR` (printed below a page that has more)")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	if *limit <= 0 || *limit > 10000 {
		return engine.Errorf(engine.CodeInvalidArgument, "--limit must be between 1 and 10000")
	}
	f := store.RunFilter{TenantID: c.g.tenant, ProjectID: c.g.project, EnvironmentID: c.g.environment,
		Status: engine.RunStatus(strings.ToUpper(*status)), PlanID: *plan, Schedule: *schedule, Trigger: store.Trigger(strings.ToLower(*trigger)),
		Target: c.g.target, Limit: *limit + 1}
	if f.Status != "" && !slices.Contains(runStatuses, f.Status) {
		return engine.Errorf(engine.CodeInvalidArgument, "--status %s: want one of %v", c.clean(*status), runStatuses)
	}
	if f.Trigger == "retry-of" { // the name for it
		f.Trigger = store.TriggerRetry
	}
	if f.Trigger != "" && !slices.Contains(store.Triggers, f.Trigger) {
		return engine.Errorf(engine.CodeInvalidArgument, "--trigger %s: want one of %v", c.clean(*trigger), store.Triggers)
	}
	var err error
	now := time.Now()
	if f.Since, err = store.ParseWhen("--since", *since, now); err != nil {
		return err
	}
	if f.Until, err = store.ParseWhen("--until", *until, now); err != nil {
		return err
	}
	if *after != "" {
		cur, err := store.ParseCursor(*after)
		if err != nil {
			return err
		}
		f.After = &cur
	}
	c.noteScope("runs")
	st, err := c.openStore(ctx, true)
	if err != nil {
		return err
	}
	defer st.Close()
	runs, err := st.ListRuns(ctx, f)
	if err != nil {
		return err
	}
	var next string
	if len(runs) > *limit {
		runs = runs[:*limit]
		next = runs[len(runs)-1].Cursor().String()
	}
	type row struct {
		store.RunSummary
		Inconsistent bool  `json:"inconsistent,omitempty"`
		Steps        int   `json:"steps"`          // steps the log mentions
		Succeeded    int   `json:"stepsSucceeded"` // of those, SUCCESS
		DurationMs   int64 `json:"durationMs,omitempty"`
		QueueWaitMs  int64 `json:"queueWaitMs,omitempty"`
	}
	rows := make([]row, 0, len(runs))
	extra := false // a target or an interval to show
	for _, m := range runs {
		// The page's runs only: the step counts and Policy A's mark come
		// from the Go reducer over each run's log.
		snap, err := goSnapshot(ctx, st, m.RunID)
		if err != nil {
			return err
		}
		r := row{RunSummary: m, Inconsistent: snap.Inconsistent, Steps: len(snap.Steps), DurationMs: m.Duration().Milliseconds(), QueueWaitMs: m.QueueWait().Milliseconds()}
		for _, s := range snap.Steps {
			if s.Status == engine.StepStatusSuccess {
				r.Succeeded++
			}
		}
		extra = extra || m.Target != "" || m.IntervalStart != ""
		rows = append(rows, r)
	}
	if *asJSON {
		if next != "" {
			fmt.Fprintln(c.stderr, "dvtrun: more runs: --after "+next)
		}
		return c.printJSON(rows)
	}
	tw := newTable(c.stdout)
	head := "RUN_ID\tPLAN\tSTATUS\tSTEPS OK\tDURATION\tWAIT\tTRIGGER\tCREATED\tFIRST FAILURE"
	if extra {
		head = "RUN_ID\tPLAN\tSTATUS\tSTEPS OK\tDURATION\tWAIT\tTRIGGER\tTARGET\tINTERVAL\tCREATED\tFIRST FAILURE"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rows {
		status := string(r.Status)
		if r.Inconsistent {
			status += " (INCONSISTENT)"
		}
		failure := ""
		if ff := r.FirstFailure; ff != nil {
			failure = ff.StepID + ": " + ff.Code + ": " + ff.Message
		}
		cols := []string{c.clean(r.RunID), c.clean(r.PlanID) + "@" + c.clean(r.PlanVersion), status, fmt.Sprintf("%d/%d", r.Succeeded, r.Steps),
			fmtMs(r.DurationMs, !r.EndedAt.IsZero()), fmtMs(r.QueueWaitMs, !r.StartedAt.IsZero()), c.clean(r.TriggerText())}
		if extra {
			interval := ""
			if r.IntervalStart != "" || r.IntervalEnd != "" {
				interval = r.IntervalStart + ".." + r.IntervalEnd
			}
			cols = append(cols, c.clean(r.Target), c.clean(interval))
		}
		cols = append(cols, fmtTime(r.CreatedAt), c.cleanLine(failure))
		fmt.Fprintln(tw, strings.Join(cols, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(c.stdout, "\nMore runs: dvtrun runs --after %s (with the same filters)\n", next)
	}
	if len(rows) == 0 && f.After == nil {
		// Nothing here: say which other targets of this store have runs
		// (one query each, of one row).
		counts := map[string]int{}
		for _, o := range c.otherTargets() {
			if !o.sameStore || o.environment == c.g.environment {
				continue
			}
			of := store.RunFilter{TenantID: c.g.tenant, ProjectID: c.g.project, EnvironmentID: o.environment, Limit: 1}
			if l, err := st.ListRuns(ctx, of); err == nil && len(l) > 0 {
				counts[o.environment] = len(l)
			}
		}
		for _, o := range c.otherTargets() {
			if o.sameStore && counts[o.environment] > 0 {
				fmt.Fprintf(c.stderr, "dvtrun: target %s (environment %s) has runs in this store: dvtrun runs --target %s\n", o.name, o.environment, o.name)
			}
		}
	}
	return nil
}

// runStatuses are the statuses a run can be listed in.
var runStatuses = []engine.RunStatus{engine.StatusQueued, engine.StatusApproved, engine.StatusRunning, engine.StatusPaused,
	engine.StatusCompleted, engine.StatusFailed, engine.StatusCancelled}

func cmdStatus(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("status", "RUN_ID", "Show a run and its steps as the Go reducer derives them from the event log.\nWith --follow, show the run live until it ends; exit as `run` would (0 COMPLETED, 1 FAILED or CANCELLED)."+
		"\nRUN_ID is a run id, a unique prefix of one, or last (with --plan P: the newest run of P).")
	asJSON := fs.Bool("json", false, "print JSON (with --follow: one snapshot per line, per change)")
	follow := fs.Bool("follow", false, "show the run live: steps as they change, PAUSED/DRAINING, until the run ends")
	interval := fs.Duration("interval", 500*time.Millisecond, "with --follow, how often to read the log (each read is one query; see README for Snowflake)")
	c.lastPlanFlag(fs)
	step := fs.String("step", "", "show step `ID`: its SQL as sent to the warehouse, attempts and errors, rows, query ids,\nledger entry, and a failing test's first rows")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if err := checkInterval(*interval); err != nil {
		return err
	}
	if *step != "" && *follow {
		return engine.Errorf(engine.CodeInvalidArgument, "--step and --follow do not go together")
	}
	st, err := c.openStore(ctx, true)
	if err != nil {
		return err
	}
	defer st.Close()
	meta, err := c.loadRun(ctx, st, pos[0])
	if err != nil {
		return err
	}
	if *follow {
		return c.follow(ctx, st, meta, *interval, *asJSON)
	}
	// A read command never writes: the Go reducer over the log, without
	// recording INVALID_TRANSITION alerts (the runner and resume do).
	evs, err := st.ListEvents(ctx, meta.RunID, 0, 0)
	if err != nil {
		return err
	}
	snap := engine.Project(meta.RunID, evs)
	if *step != "" {
		v, err := stepview.Build(meta.RunID, snap, evs, *step)
		if err != nil {
			return err
		}
		q, _ := engine.QueuedRequest(evs)
		c.readLedger(ctx, &v, q.Target)
		if *asJSON {
			return c.printJSON(v)
		}
		c.printStepView(v)
		return nil
	}
	// The run's context as RunQueued recorded it (a payload that does not
	// decode is shown without it: status still shows the run).
	q, _ := engine.QueuedRequest(evs)
	rc := runContext{Target: q.Target, Vars: q.Vars, DataInterval: q.DataInterval}
	if *asJSON {
		return c.printJSON(struct {
			Run      engine.RunMetadata `json:"run"`
			Context  runContext         `json:"context"`
			Snapshot engine.Snapshot    `json:"snapshot"`
		}{meta, rc, snap})
	}
	c.printStatus(meta, snap, rc)
	return nil
}

// runContext is what status shows of a run's context: the target it ran
// on, its variables and its data interval.
type runContext struct {
	Target       string               `json:"target,omitempty"`
	Vars         map[string]any       `json:"vars,omitempty"`
	DataInterval *engine.DataInterval `json:"dataInterval,omitempty"`
}

func (c *cli) printStatus(meta engine.RunMetadata, snap engine.Snapshot, rc runContext) {
	w := c.stdout
	status := string(snap.Status)
	if snap.Substatus != "" {
		status += " (" + snap.Substatus + ")"
	}
	if snap.Inconsistent {
		status += " INCONSISTENT"
	}
	if snap.Stale {
		status += " STALE"
	}
	tw := newTable(w)
	fmt.Fprintf(tw, "Run:\t%s\n", c.clean(meta.RunID))
	fmt.Fprintf(tw, "Plan:\t%s@%s (sha256 %s)\n", c.clean(meta.PlanID), c.clean(meta.PlanVersion), c.clean(meta.PlanSHA256))
	fmt.Fprintf(tw, "Scope:\t%s/%s/%s\n", c.clean(meta.TenantID), c.clean(meta.ProjectID), c.clean(meta.EnvironmentID))
	if rc.Target != "" {
		fmt.Fprintf(tw, "Target:\t%s\n", c.clean(rc.Target))
	}
	if len(rc.Vars) > 0 {
		b, _ := json.Marshal(rc.Vars) // sorted keys
		fmt.Fprintf(tw, "Vars:\t%s\n", c.cleanLine(string(b)))
	}
	if di := rc.DataInterval; di != nil {
		fmt.Fprintf(tw, "Interval:\t[%s, %s) %s\n", c.clean(di.Start), c.clean(di.End), c.clean(di.Timezone))
	}
	fmt.Fprintf(tw, "Status:\t%s\n", status)
	if !snap.StartedAt.IsZero() {
		fmt.Fprintf(tw, "Started:\t%s\n", fmtTime(snap.StartedAt))
	}
	if !snap.CompletedAt.IsZero() {
		fmt.Fprintf(tw, "Completed:\t%s (%d ms)\n", fmtTime(snap.CompletedAt), snap.DurationMs)
	}
	if snap.Error != nil {
		fmt.Fprintf(tw, "Error:\t%s: %s\n", c.clean(snap.Error.Code), c.cleanLine(snap.Error.Message))
	}
	fmt.Fprintf(tw, "Events:\t%d\n", snap.LastEventSeq)
	tw.Flush()
	if len(snap.Violations) > 0 {
		fmt.Fprintf(w, "\nINCONSISTENT: %d event(s) ignored under Policy A (INVALID_TRANSITION):\n", len(snap.Violations))
		tw = newTable(w)
		fmt.Fprintln(tw, "SEQ\tEVENT\tENTITY\tSTEP\tPRIOR\tATTEMPTED")
		for _, v := range snap.Violations {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", v.RunSeq, c.clean(string(v.EventType)), v.Entity, c.clean(v.StepID), v.PriorState, v.AttemptedState)
		}
		tw.Flush()
	}
	fmt.Fprintln(w)
	tw = newTable(w)
	fmt.Fprintln(tw, "STEP\tSTATUS\tATTEMPT\tDURATION\tDETAIL")
	for _, s := range snap.Steps {
		detail := s.SkipReason
		if s.Error != nil {
			detail = s.Error.Code + ": " + s.Error.Message
		}
		fmt.Fprintf(tw, "%s\t%s\t%d.%d\t%s\t%s\n", c.clean(s.StepID), s.Status, s.LogicalAttemptID, s.EngineAttemptID, fmtMs(s.DurationMs, !s.CompletedAt.IsZero()), c.cleanLine(detail))
	}
	tw.Flush()
}

// fmtMs renders a duration in seconds; "" when the thing has not finished.
func fmtMs(ms int64, finished bool) string {
	if !finished {
		return ""
	}
	return strconv.FormatFloat(float64(ms)/1000, 'f', 3, 64) + "s"
}

func oneLine(s string) string {
	var b bytes.Buffer
	space := false
	for _, r := range s {
		if r == '\n' || r == '\r' || r == '\t' || r == ' ' {
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(r)
	}
	return b.String()
}

func cmdEvents(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("events", "RUN_ID", "List a run's events in runSeq order.")
	asJSON := fs.Bool("json", false, "print JSON (payloads whole)")
	full := fs.Bool("full", false, fmt.Sprintf("print payloads whole (the table cuts them at %d characters with …)", payloadWidth))
	after := fs.Int64("after", 0, "only events with runSeq > `SEQ`")
	limit := fs.Int("limit", 0, "at most `N` events (0: all)")
	c.lastPlanFlag(fs)
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *after < 0 || *limit < 0 {
		return engine.Errorf(engine.CodeInvalidArgument, "--after and --limit must not be negative")
	}
	st, err := c.openStore(ctx, true)
	if err != nil {
		return err
	}
	defer st.Close()
	meta, err := c.loadRun(ctx, st, pos[0])
	if err != nil {
		return err
	}
	evs, err := st.ListEvents(ctx, meta.RunID, *after, *limit)
	if err != nil {
		return err
	}
	if *asJSON {
		if evs == nil {
			evs = []engine.RunEventRecord{}
		}
		return c.printJSON(evs)
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "SEQ\tTYPE\tSTEP\tATTEMPT\tEMITTED_AT\tPAYLOAD")
	for _, e := range evs {
		payload := c.clean(string(e.Payload))
		if !*full {
			payload = cutRunes(payload, payloadWidth)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d.%d\t%s\t%s\n", e.RunSeq, c.clean(string(e.EventType)), c.clean(e.StepID), e.LogicalAttemptID, e.EngineAttemptID, fmtTime(e.EmittedAt), payload)
	}
	return tw.Flush()
}

// payloadWidth is where the events table cuts a payload: a row stays about
// one terminal line (a StepCompleted payload ran to 1,400 characters).
const payloadWidth = 100

// cutRunes is s cut to n characters, the last one an ellipsis, when longer.
func cutRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// The audit export of EngineExecutionContract.gw.md: a bundle {run, steps}
// or a CSV with one row per step and these columns, in this order.
var csvColumns = []string{
	"run_id", "workflow_name", "run_status", "run_started_at", "run_finished_at", "run_duration_ms",
	"step_index", "step_name", "step_status", "step_started_at", "step_finished_at", "step_duration_ms",
	"step_error_code", "step_error_message", "step_metrics_json",
}

type auditRun struct {
	RunID        string `json:"run_id"`
	WorkflowName string `json:"workflow_name"`
	Status       string `json:"status"`
	StartedAt    string `json:"started_at"`
	FinishedAt   string `json:"finished_at"`
	DurationMs   int64  `json:"duration_ms"`
	ConfigHash   string `json:"config_hash,omitempty"` // the plan's sha256
	ErrorSummary string `json:"error_summary,omitempty"`
	PlanID       string `json:"plan_id"`
	PlanVersion  string `json:"plan_version"`
	Inconsistent bool   `json:"inconsistent,omitempty"`
}

type auditStep struct {
	StepIndex    int             `json:"step_index"`
	StepName     string          `json:"step_name"`
	Status       string          `json:"status"`
	StartedAt    string          `json:"started_at"`
	FinishedAt   string          `json:"finished_at"`
	DurationMs   int64           `json:"duration_ms"`
	ErrorCode    string          `json:"error_code,omitempty"`
	ErrorMessage string          `json:"error_message,omitempty"`
	SkipReason   string          `json:"skip_reason,omitempty"`
	Metrics      json.RawMessage `json:"metrics,omitempty"`
}

type auditBundle struct {
	Run   auditRun    `json:"run"`
	Steps []auditStep `json:"steps"`
}

// exportStatus maps dvtrun's states onto the contract's OK/FAILED where
// they correspond and keeps dvtrun's name otherwise (SKIPPED, CANCELLED…).
func exportStatus(s string) string {
	switch s {
	case string(engine.StatusCompleted), string(engine.StepStatusSuccess):
		return "OK"
	}
	return s
}

func buildAudit(meta engine.RunMetadata, snap engine.Snapshot, evs []engine.RunEventRecord) auditBundle {
	b := auditBundle{Run: auditRun{
		RunID: meta.RunID, WorkflowName: meta.PlanID, Status: exportStatus(string(snap.Status)),
		StartedAt: fmtTime(snap.StartedAt), FinishedAt: fmtTime(snap.CompletedAt), DurationMs: snap.DurationMs,
		ConfigHash: meta.PlanSHA256, PlanID: meta.PlanID, PlanVersion: meta.PlanVersion, Inconsistent: snap.Inconsistent,
	}, Steps: []auditStep{}}
	if snap.Error != nil {
		b.Run.ErrorSummary = snap.Error.Code + ": " + snap.Error.Message
	}
	metrics := map[string]json.RawMessage{}
	for _, e := range evs {
		if e.EventType == engine.StepCompleted {
			metrics[e.StepID] = stepMetrics(e.Payload)
		}
	}
	for i, s := range snap.Steps {
		as := auditStep{
			StepIndex: i + 1, StepName: s.StepID, Status: exportStatus(string(s.Status)),
			StartedAt: fmtTime(s.StartedAt), FinishedAt: fmtTime(s.CompletedAt), DurationMs: s.DurationMs,
			SkipReason: s.SkipReason,
		}
		if s.Error != nil {
			as.ErrorCode, as.ErrorMessage = s.Error.Code, s.Error.Message
		}
		if s.Status == engine.StepStatusSuccess {
			as.Metrics = metrics[s.StepID]
		}
		b.Steps = append(b.Steps, as)
	}
	return b
}

// stepMetrics keeps the figures of a StepCompleted payload (a StepResult).
func stepMetrics(p json.RawMessage) json.RawMessage {
	var r engine.StepResult
	if len(p) == 0 || json.Unmarshal(p, &r) != nil {
		return nil
	}
	m := map[string]any{}
	if r.RowsAffected != 0 {
		m["rowsAffected"] = r.RowsAffected
	}
	if r.RowCount != 0 {
		m["rowCount"] = r.RowCount
	}
	if r.Failures != 0 {
		m["failures"] = r.Failures
	}
	if len(r.QueryIDs) > 0 {
		m["queryIds"] = r.QueryIDs
	}
	if len(m) == 0 {
		return nil
	}
	out, _ := json.Marshal(m)
	return out
}

func writeCSV(w io.Writer, b auditBundle) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvColumns); err != nil {
		return err
	}
	r := b.Run
	for _, s := range b.Steps {
		rec := []string{
			r.RunID, r.WorkflowName, r.Status, r.StartedAt, r.FinishedAt, strconv.FormatInt(r.DurationMs, 10),
			strconv.Itoa(s.StepIndex), s.StepName, s.Status, s.StartedAt, s.FinishedAt, strconv.FormatInt(s.DurationMs, 10),
			s.ErrorCode, s.ErrorMessage, string(s.Metrics),
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func cmdExport(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("export", "RUN_ID", "Write a run's audit export: a JSON bundle {run, steps} or a CSV with one row per step\n(columns of EngineExecutionContract.gw.md, in its order). Default output is stdout.")
	format := fs.String("format", "json", "`json`, csv or run-results (dbt's run_results.json, schema v6, rebuilt from the log)")
	out := fs.String("o", "", "write to `FILE` (written whole or not at all) instead of stdout")
	planPath := fs.String("plan", "", "run-results: read compiled_code from plan `FILE` (default: the plan bundle the state store keeps for the run)")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *format != "json" && *format != "csv" && *format != "run-results" {
		return engine.Errorf(engine.CodeInvalidArgument, "--format %q: want json, csv or run-results", *format)
	}
	st, err := c.openStore(ctx, true)
	if err != nil {
		return err
	}
	defer st.Close()
	meta, err := c.loadRun(ctx, st, pos[0])
	if err != nil {
		return err
	}
	evs, err := st.ListEvents(ctx, meta.RunID, 0, 0)
	if err != nil {
		return err
	}
	// Build the whole export in memory first: no partial export on error.
	var buf bytes.Buffer
	switch *format {
	case "run-results":
		var data []byte
		data, err = c.runResultsExport(ctx, st, meta, evs, *planPath)
		buf.Write(data)
	case "csv":
		err = writeCSV(&buf, buildAudit(meta, engine.Project(meta.RunID, evs), evs))
	default:
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", "  ")
		err = enc.Encode(buildAudit(meta, engine.Project(meta.RunID, evs), evs))
	}
	if err != nil {
		return err
	}
	data := []byte(c.cleanDoc(buf.String()))
	if *out == "" {
		_, err = c.stdout.Write(data)
		return err
	}
	return writeFileAtomic(*out, data)
}

// writeFileAtomic writes through a temporary file and a rename, so a reader
// never sees half an export.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".dvtrun-export-*")
	if err != nil {
		return engine.Errorf(engine.CodeInvalidArgument, "cannot write %s: %v", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return engine.Errorf(engine.CodeInvalidArgument, "cannot write %s: %v", path, err)
	}
	if err := tmp.Close(); err != nil {
		return engine.Errorf(engine.CodeInvalidArgument, "cannot write %s: %v", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return engine.Errorf(engine.CodeInvalidArgument, "cannot write %s: %v", path, err)
	}
	return nil
}
