// Package runresults builds dbt's run_results.json (run-results schema v6)
// for a dvtrun run, from the run's event log and its plan. It is a pure
// function of them: the runner writes the document when a run ends, and
// `dvtrun export RUN_ID --format run-results` rebuilds the same bytes from
// the log later.
//
// Mapping (dbt's own where dbt has one):
//   - one result per step the log mentions (ephemeral models are inlined,
//     never steps, and get none, as in dbt), in the order the steps ended;
//   - unique_id: the dbt node a step was imported from (PlanStep's
//     dbtUniqueId), else <kind>.<planId>.<name> in dbt's form;
//   - status: models, seeds and sql steps success | error | skipped; tests
//     pass | fail (error severity, rows returned) | warn (warn severity,
//     rows returned) | error (the query failed) | skipped; a step still
//     RUNNING when the log ends is error;
//   - timing: one "execute" entry, StepStarted to StepCompleted/StepFailed
//     (emittedAt; a step run again after a resume from its outcome's
//     attemptStartedAt, as the snapshot); execution_time is that span in
//     seconds;
//   - adapter_response: rows_affected, and the warehouse's query ids
//     (query_id is the last, as dbt-snowflake reports it; query_ids all);
//   - failures: a test's returned rows, null for other steps;
//   - message: the error, a test's "Got N results…", the skip reason;
//   - compiled_code: the step's SQL as the plan gives it (secrets stay
//     {{ secret('NAME') }}), null without the plan or for seeds;
//   - relation_name: the relation a seed or model builds;
//   - metadata.generated_at: when the run ended (its closing event), so
//     that the document is a function of the log; invocation_id: the run id;
//   - elapsed_time: RunStarted to the closing event, in seconds;
//   - args: dbt's which/threads/full_refresh/select/exclude and the run's
//     dvtrun identity (plan, tenancy, trigger, parent run).
package runresults

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// SchemaVersion is metadata.dbt_schema_version.
const SchemaVersion = "https://schemas.getdbt.com/dbt/run-results/v6.json"

// DbtVersion is metadata.dbt_version: the dbt release whose artifact
// format the document follows (v6 is dbt 1.8's), marked as dvtrun's in
// semver build metadata so that tools parsing a version still can.
const DbtVersion = "1.8.0+dvtrun"

// ArtifactKind is the ArtifactRef kind of a run_results.json.
const ArtifactKind = "dbt-run-results"

// FileName is the document's file name, dbt's.
const FileName = "run_results.json"

// Document is a run_results.json.
type Document struct {
	Metadata    Metadata       `json:"metadata"`
	Results     []Result       `json:"results"`
	ElapsedTime float64        `json:"elapsed_time"`
	Args        map[string]any `json:"args"`
}

// Metadata is the document's metadata (dbt's BaseArtifactMetadata).
type Metadata struct {
	DbtSchemaVersion string            `json:"dbt_schema_version"`
	DbtVersion       string            `json:"dbt_version"`
	GeneratedAt      string            `json:"generated_at"`
	InvocationID     string            `json:"invocation_id"`
	Env              map[string]string `json:"env"`
}

// Result is one step's result (dbt's RunResultOutput).
type Result struct {
	Status          string         `json:"status"`
	Timing          []Timing       `json:"timing"`
	ThreadID        string         `json:"thread_id"`
	ExecutionTime   float64        `json:"execution_time"`
	AdapterResponse map[string]any `json:"adapter_response"`
	Message         *string        `json:"message"`
	Failures        *int64         `json:"failures"`
	UniqueID        string         `json:"unique_id"`
	Compiled        *bool          `json:"compiled"`
	CompiledCode    *string        `json:"compiled_code"`
	RelationName    *string        `json:"relation_name"`
}

// Timing is one phase of a step (dbt's TimingInfo).
type Timing struct {
	Name        string  `json:"name"`
	StartedAt   *string `json:"started_at"`
	CompletedAt *string `json:"completed_at"`
}

// timeFormat is dbt's: microseconds, Z.
const timeFormat = "2006-01-02T15:04:05.000000Z"

// threadID: dvtrun does not record which worker ran a step.
const threadID = "dvtrun"

// stepEvents is what the log says of one step beyond its snapshot.
type stepEvents struct {
	kind, relation string
	outcome        json.RawMessage // payload of the StepCompleted/StepFailed that set its status
	endSeq         int64           // runSeq of the event that ended it
}

// Build makes the document of run runID from its log (in runSeq order)
// and the plan it executed (nil when it is not at hand: compiled_code is
// then null). Events after the run's closing event change nothing.
func Build(runID string, events []engine.RunEventRecord, runPlan *plan.Plan) *Document {
	snap := engine.Project(runID, events)
	steps := map[string]*stepEvents{}
	var started json.RawMessage
scan:
	for _, ev := range events {
		switch ev.EventType {
		case engine.RunStarted:
			if started == nil {
				started = ev.Payload
			}
		case engine.RunCompleted, engine.RunFailed, engine.RunCancelled:
			break scan // nothing after the run ended counts (Policy A ignores it too)
		}
		if ev.StepID == "" {
			continue
		}
		se := steps[ev.StepID]
		if se == nil {
			se = &stepEvents{}
			steps[ev.StepID] = se
		}
		switch ev.EventType {
		case engine.StepStarted:
			var p struct{ Kind, Relation string }
			if json.Unmarshal(ev.Payload, &p) == nil {
				se.kind, se.relation = p.Kind, p.Relation
			}
		case engine.StepCompleted, engine.StepFailed, engine.StepSkipped:
			se.outcome, se.endSeq = ev.Payload, ev.RunSeq
		}
	}

	doc := &Document{
		Metadata: Metadata{DbtSchemaVersion: SchemaVersion, DbtVersion: DbtVersion, InvocationID: runID, Env: map[string]string{}},
		Results:  []Result{},
		Args:     args(snap, events, started),
	}
	end := snap.CompletedAt
	if end.IsZero() && len(events) > 0 {
		end = events[len(events)-1].EmittedAt
	}
	doc.Metadata.GeneratedAt = end.UTC().Format(timeFormat)
	if !snap.StartedAt.IsZero() && !end.IsZero() {
		doc.ElapsedTime = seconds(end.Sub(snap.StartedAt))
	}

	var planSteps map[string]plan.Step
	if runPlan != nil {
		planSteps = map[string]plan.Step{}
		for _, s := range runPlan.InlineEphemeral().Steps {
			planSteps[s.ID] = s
		}
	}
	type ordered struct {
		r   Result
		seq int64
	}
	var out []ordered
	for _, st := range snap.Steps {
		se := steps[st.StepID]
		if se == nil {
			se = &stepEvents{}
		}
		ps, inPlan := planSteps[st.StepID]
		kind := se.kind
		if kind == "" && inPlan {
			kind = ps.Kind
		}
		r := result(st, se, kind)
		r.UniqueID = uniqueID(kind, planIDOf(events), st.StepID)
		if inPlan && ps.DbtUniqueID != "" {
			r.UniqueID = ps.DbtUniqueID
		}
		if inPlan && ps.Kind != plan.KindSeed {
			r.Compiled, r.CompiledCode = ptr(true), ptr(ps.SQL)
		} else if inPlan {
			r.Compiled = ptr(false)
		}
		seq := se.endSeq
		if seq == 0 {
			seq = 1<<63 - 1 // still running: last
		}
		out = append(out, ordered{r, seq})
	}
	slices.SortStableFunc(out, func(a, b ordered) int { return cmp.Compare(a.seq, b.seq) })
	for _, o := range out {
		doc.Results = append(doc.Results, o.r)
	}
	return doc
}

// outcomePayload is the part of StepCompleted/StepFailed the document uses
// (engine.StepResult and the runner's additions).
type outcomePayload struct {
	RowsAffected int64             `json:"rowsAffected"`
	RowCount     int64             `json:"rowCount"`
	Failures     int64             `json:"failures"`
	QueryIDs     []string          `json:"queryIds"`
	Warning      string            `json:"warning"`
	Error        *engine.ErrorInfo `json:"error"`
	Reason       string            `json:"reason"`
}

func result(st engine.StepSnapshot, se *stepEvents, kind string) Result {
	var p outcomePayload
	if len(se.outcome) > 0 {
		_ = json.Unmarshal(se.outcome, &p) // validated on append; absent fields stay zero
	}
	r := Result{Timing: []Timing{}, ThreadID: threadID, AdapterResponse: map[string]any{}}
	if se.relation != "" {
		r.RelationName = ptr(se.relation)
	}
	if !st.StartedAt.IsZero() {
		t := Timing{Name: "execute", StartedAt: ptr(st.StartedAt.UTC().Format(timeFormat))}
		if !st.CompletedAt.IsZero() {
			t.CompletedAt = ptr(st.CompletedAt.UTC().Format(timeFormat))
			r.ExecutionTime = seconds(st.CompletedAt.Sub(st.StartedAt))
		}
		r.Timing = append(r.Timing, t)
	}
	if st.Status == engine.StepStatusSuccess || st.Status == engine.StepStatusFailed {
		r.AdapterResponse["rows_affected"] = p.RowsAffected
		if n := len(p.QueryIDs); n > 0 {
			r.AdapterResponse["query_id"] = p.QueryIDs[n-1]
			r.AdapterResponse["query_ids"] = p.QueryIDs
		}
	}
	test := kind == plan.KindTest
	if test && (st.Status == engine.StepStatusSuccess || p.Failures > 0) {
		// pass, warn, fail; an error or a skip has no count (dbt's null)
		r.Failures = ptr(p.Failures)
	}
	errMsg := func() *string {
		if st.Error != nil {
			return ptr(st.Error.Code + ": " + st.Error.Message)
		}
		if p.Error != nil {
			return ptr(p.Error.Code + ": " + p.Error.Message)
		}
		return nil
	}
	switch st.Status {
	case engine.StepStatusSuccess:
		switch {
		case test && p.Failures > 0:
			r.Status, r.Message = "warn", ptr(gotResults(p.Failures))
		case test:
			r.Status = "pass"
		default:
			r.Status = "success"
			r.AdapterResponse["_message"] = "OK"
			r.AdapterResponse["code"] = "SUCCESS"
			r.Message = ptr("OK")
		}
	case engine.StepStatusFailed:
		r.Status, r.Message = "error", errMsg()
		if test && p.Failures > 0 {
			r.Status, r.Message = "fail", ptr(gotResults(p.Failures))
		}
	case engine.StepStatusSkipped:
		r.Status = "skipped"
		if st.SkipReason != "" {
			r.Message = ptr(st.SkipReason)
		}
	default:
		r.Status = "error"
		r.Message = ptr("the run ended while the step was " + strings.ToLower(string(st.Status)))
	}
	return r
}

// gotResults is dbt's message for a test that returned rows.
func gotResults(n int64) string {
	return "Got " + strconv.FormatInt(n, 10) + " result" + map[bool]string{true: "", false: "s"}[n == 1] + ", configured to fail if != 0"
}

// uniqueID is dbt's <resource_type>.<package>.<name>: the step id's part
// after "<kind>." (the whole id when it does not start so) under the plan
// id.
func uniqueID(kind, planID, stepID string) string {
	name := stepID
	if kind != "" {
		name = strings.TrimPrefix(stepID, kind+".")
	} else if k, rest, ok := strings.Cut(stepID, "."); ok {
		kind, name = k, rest
	}
	if kind == "" {
		kind = "step"
	}
	return kind + "." + planID + "." + name
}

func planIDOf(events []engine.RunEventRecord) string {
	if len(events) > 0 {
		return events[0].PlanID
	}
	return ""
}

// args is dbt's args object: which command, its threads, full refresh and
// selection, and the run's dvtrun identity.
func args(snap engine.Snapshot, queued []engine.RunEventRecord, started json.RawMessage) map[string]any {
	a := map[string]any{"which": "run"}
	q, _ := engine.QueuedRequest(queued) // a payload that does not decode gives no args
	a["full_refresh"] = q.FullRefresh
	if s := q.Selection; s != nil {
		if len(s.Select) > 0 {
			a["select"] = s.Select
		}
		if len(s.Exclude) > 0 {
			a["exclude"] = s.Exclude
		}
		if s.IndirectSelection != "" {
			a["indirect_selection"] = s.IndirectSelection
		}
	}
	var st struct {
		Threads int `json:"threads"`
	}
	_ = json.Unmarshal(started, &st)
	if st.Threads > 0 {
		a["threads"] = st.Threads
	}
	dvt := map[string]any{"run_id": snap.RunID, "status": string(snap.Status)}
	for k, v := range map[string]string{
		"plan_id": q.PlanRef.PlanID, "plan_version": q.PlanRef.PlanVersion, "plan_sha256": q.PlanRef.SHA256, "plan_uri": q.PlanRef.URI,
		"tenant_id": snap.TenantID, "project_id": snap.ProjectID, "environment_id": snap.EnvironmentID,
		"triggered_by": q.TriggeredBy, "trigger_source": q.TriggerSource, "parent_run_id": q.ParentRunID,
	} {
		if v != "" {
			dvt[k] = v
		}
	}
	a["dvtrun"] = dvt
	return a
}

// JSON is the document as written to run_results.json: indented, keys in
// a fixed order, so that the same log always gives the same bytes.
func (d *Document) JSON() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func seconds(d time.Duration) float64 { return d.Seconds() }

func ptr[T any](v T) *T { return &v }
