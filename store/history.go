package store

import (
	"encoding/base64"
	"strings"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// Trigger is how a run came to be, as the run history shows and filters it:
// derived from its RunQueued payload (parentRunId, triggerSource).
type Trigger string

const (
	TriggerManual   Trigger = "manual"   // started by hand (dvtrun run, the engine API)
	TriggerSchedule Trigger = "schedule" // a schedule's tick, through the queue
	TriggerQueue    Trigger = "queue"    // a queued request (dvtrun enqueue)
	TriggerRetry    Trigger = "retry"    // dvtrun retry of the run in ParentRunID
)

// Triggers are the values RunFilter.Trigger accepts.
var Triggers = []Trigger{TriggerManual, TriggerSchedule, TriggerQueue, TriggerRetry}

// RunFilter narrows ListRuns. Empty fields match everything; every filter
// is applied in the store's query (keyset paging, never OFFSET).
type RunFilter struct {
	TenantID      string
	ProjectID     string
	EnvironmentID string
	// RunIDPrefix keeps runs whose id starts with it (resolving a short id).
	RunIDPrefix string
	Status      engine.RunStatus
	PlanID      string
	Schedule    string
	Trigger     Trigger
	// Target is the target the RunQueued payload records (when it does).
	Target string
	// Since and Until bound created_at: Since <= created_at < Until.
	Since, Until time.Time
	// After continues a listing: only runs older than the cursor, in the
	// listing's order (created_at, then run id, both descending). Runs
	// created meanwhile sort before it, so a page never repeats or skips.
	After *Cursor
	Limit int // <= 0: 100
}

// Cursor is a position in ListRuns' order: the last row of a page.
type Cursor struct {
	CreatedAt time.Time
	RunID     string
}

// String encodes the cursor for a command line or a URL.
func (c Cursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.CreatedAt.UTC().Format(engine.TimeFormat) + "|" + c.RunID))
}

// ParseCursor decodes Cursor.String; anything else is INVALID_ARGUMENT.
func ParseCursor(s string) (Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	ts, id, ok := strings.Cut(string(b), "|")
	if err != nil || !ok || id == "" {
		return Cursor{}, engine.Errorf(engine.CodeInvalidArgument, "cursor %s is not one a run listing printed", engine.QuoteText(s))
	}
	t, err := time.Parse(engine.TimeFormat, ts)
	if err != nil {
		return Cursor{}, engine.Errorf(engine.CodeInvalidArgument, "cursor %s is not one a run listing printed", engine.QuoteText(s))
	}
	return Cursor{CreatedAt: t, RunID: id}, nil
}

// Bounds of created_at when a filter sets none: the queries always bind
// both ends and the cursor, so no statement is assembled from the filter.
// Both lie within every backend's timestamp range (nanosecond timestamps
// end in 2262).
var (
	minTime = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)
	maxTime = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

// HistoryArgs are the bound values of the list_runs queries (one order
// for every dialect): scope, run id prefix, plan, the time window and the
// keyset cursor (always bound: an unset cursor is the end of time, which
// every run precedes), then status, trigger, schedule, target and the
// limit. timeArg binds a timestamp the dialect's way.
func (f RunFilter) HistoryArgs(timeArg func(time.Time) any) []any {
	since, until, afterAt, afterID := minTime, maxTime, maxTime, ""
	if !f.Since.IsZero() {
		since = f.Since
	}
	if !f.Until.IsZero() {
		until = f.Until
	}
	if f.After != nil {
		afterAt, afterID = f.After.CreatedAt, f.After.RunID
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	return []any{
		f.TenantID, f.TenantID, f.ProjectID, f.ProjectID, f.EnvironmentID, f.EnvironmentID,
		f.RunIDPrefix, f.RunIDPrefix, f.RunIDPrefix,
		f.PlanID, f.PlanID,
		timeArg(since), timeArg(until), timeArg(afterAt), timeArg(afterAt), afterID,
		string(f.Status), string(f.Status), string(f.Trigger), string(f.Trigger),
		f.Schedule, f.Schedule, f.Target, f.Target,
		limit,
	}
}

// ScanRunSummary reads a list_runs row. timeDest returns a scan
// destination for a timestamp column (NULL or ” allowed but for
// created_at) and timeOf reads it, zero for none.
func ScanRunSummary(row Row, timeDest func() any, timeOf func(any) (time.Time, error)) (RunSummary, error) {
	var r RunSummary
	var status, trigger, failStep, failCode, failMsg string
	created, queued, started, ended := timeDest(), timeDest(), timeDest(), timeDest()
	if err := row.Scan(&r.RunID, &r.TenantID, &r.ProjectID, &r.EnvironmentID, &r.PlanID, &r.PlanVersion, &r.PlanSHA256,
		&r.TargetAdapter, &r.ProviderRunRef, &r.RunRequestID, created,
		&status, &trigger, &r.TriggeredBy, &r.ParentRunID, &r.Schedule, &r.Target,
		&r.IntervalStart, &r.IntervalEnd, queued, started, ended, &failStep, &failCode, &failMsg); err != nil {
		return r, err
	}
	r.Status, r.Trigger = engine.RunStatus(status), Trigger(trigger)
	for _, t := range []struct {
		dest any
		to   *time.Time
	}{{created, &r.CreatedAt}, {queued, &r.QueuedAt}, {started, &r.StartedAt}, {ended, &r.EndedAt}} {
		v, err := timeOf(t.dest)
		if err != nil {
			return r, engine.Errorf(engine.CodeStoreCorrupt, "run %s: a time in its history row does not decode: %v", r.RunID, err)
		}
		*t.to = v
	}
	if failStep != "" {
		r.FirstFailure = &StepFailure{StepID: failStep, Code: failCode, Message: failMsg}
	}
	return r, nil
}

// StepFailure is a run's first failing step: the first StepFailed event in
// its log, with the error it carries.
type StepFailure struct {
	StepID  string `json:"stepId"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// RunSummary is a row of the run history: the run's metadata and what the
// history shows of it, read in one query with the filters.
type RunSummary struct {
	engine.RunMetadata
	// Status is the run's status as the store's append authority keeps it
	// (the transition checks' mirror of the reducer's).
	Status      engine.RunStatus `json:"status"`
	Trigger     Trigger          `json:"trigger"`
	TriggeredBy string           `json:"triggeredBy,omitempty"`
	ParentRunID string           `json:"parentRunId,omitempty"`
	Schedule    string           `json:"schedule,omitempty"`
	Target      string           `json:"target,omitempty"`
	// IntervalStart and IntervalEnd are the data interval the RunQueued
	// payload records (dataInterval.start/end), as written; "" when none.
	IntervalStart string `json:"dataIntervalStart,omitempty"`
	IntervalEnd   string `json:"dataIntervalEnd,omitempty"`
	// QueuedAt is when the run was asked for: its queue request's
	// enqueue time, else its RunQueued. StartedAt is its first RunStarted,
	// EndedAt its first terminal event (zero when none yet).
	QueuedAt     time.Time    `json:"queuedAt"`
	StartedAt    time.Time    `json:"startedAt,omitzero"`
	EndedAt      time.Time    `json:"endedAt,omitzero"`
	FirstFailure *StepFailure `json:"firstFailure,omitempty"`
}

// QueueWait is the time from the request to the start: what the run
// waited for a worker, kept apart from its execution. Zero until it starts.
func (r RunSummary) QueueWait() time.Duration {
	if r.StartedAt.IsZero() || r.QueuedAt.IsZero() || r.StartedAt.Before(r.QueuedAt) {
		return 0
	}
	return r.StartedAt.Sub(r.QueuedAt)
}

// Duration is the execution time, start to end, in whole milliseconds as
// the reducer counts it; zero until the run ended.
func (r RunSummary) Duration() time.Duration {
	if r.StartedAt.IsZero() || r.EndedAt.IsZero() {
		return 0
	}
	return time.Duration(r.EndedAt.UnixMilli()-r.StartedAt.UnixMilli()) * time.Millisecond
}

// TriggerText is how the run came to be, as `dvtrun runs` and the console
// show it: the kind, and what it names.
func (r RunSummary) TriggerText() string {
	switch {
	case r.Trigger == TriggerRetry:
		return "retry of " + r.ParentRunID
	case r.Schedule != "":
		return string(r.Trigger) + ":" + r.Schedule
	case r.TriggeredBy != "":
		return string(r.Trigger) + " by " + r.TriggeredBy
	}
	return string(r.Trigger)
}

// ParseWhen reads a since/until bound of a run listing (name is how the
// caller calls it, for the error): an RFC 3339 time, a date (UTC
// midnight) or a duration before now. "" is no bound.
func ParseWhen(name, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	var t time.Time
	var err error
	if d, derr := time.ParseDuration(v); derr == nil && d >= 0 {
		t = now.Add(-d)
	} else if t, err = time.Parse(time.RFC3339Nano, v); err != nil {
		if t, err = time.Parse("2006-01-02", v); err != nil {
			return time.Time{}, engine.Errorf(engine.CodeInvalidArgument, "%s %s: want an RFC 3339 time, a date YYYY-MM-DD or a duration such as 24h", name, engine.QuoteText(v))
		}
	}
	if t.Year() < 1970 || t.Year() > 2199 {
		return time.Time{}, engine.Errorf(engine.CodeInvalidArgument, "%s %s is outside the years 1970 to 2199", name, engine.QuoteText(v))
	}
	return t.UTC(), nil
}

// Cursor is the position after r, for the next page.
func (r RunSummary) Cursor() Cursor { return Cursor{CreatedAt: r.CreatedAt, RunID: r.RunID} }
