package schedule

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/queue"
	"github.com/dvtrun/dvtrun/engine/service"
)

// CodeTickMissed is the alert a scheduler records when ticks fell outside
// the catch-up window (after downtime); its payload carries the counts.
const CodeTickMissed engine.Code = "SCHEDULE_TICK_MISSED"

// Overlap policies (config.Overlap, decoupled).
const (
	OverlapSkip        = "skip"
	OverlapBufferOne   = "buffer_one"
	OverlapBufferAll   = "buffer_all"
	OverlapCancelOther = "cancel_other"
	OverlapAllowAll    = "allow_all"
)

// PlanInfo is what a request records of a schedule's plan.
type PlanInfo struct {
	PlanID, PlanVersion, SHA256 string
}

// Def is one schedule.
type Def struct {
	Name          string
	Spec          Spec
	PlanPath      string
	Overlap       string
	CatchupWindow time.Duration
	Priority      int
	// Shape is what the schedule's runs do beyond the plan (target,
	// selection, vars, fullRefresh); each request adds its tick's data
	// interval.
	Shape queue.Shape
	// EnvironmentID is the environment of the schedule's target ("": the
	// scheduler's).
	EnvironmentID string
}

// Store is what the scheduler needs of the state store.
type Store interface {
	queue.Store
	CursorStore
	engine.AlertRecorder
}

// Scheduler fires the ticks of its schedules into the run queue. Any
// number of replicas may run against one store: a tick is enqueued by the
// replica whose conditional UPDATE advanced the cursor.
type Scheduler struct {
	Store Store
	Clock engine.Clock
	IDs   engine.IDSource
	Defs  []Def
	// Tenancy of the requests.
	TenantID, ProjectID, EnvironmentID string
	// Resolve reads a schedule's plan at tick time (its id, version and
	// sha256), so a request records the plan as it is when it fires.
	Resolve func(ctx context.Context, path string) (PlanInfo, error)
	// CancelRun asks a run's runner to cancel it (cancel_other).
	CancelRun func(ctx context.Context, runID, reason string) error
	// Poll is the pause between passes (default 5s); one pass serves
	// every schedule.
	Poll  time.Duration
	Sleep func(ctx context.Context, d time.Duration) error
	Log   *slog.Logger
	// Metrics, when set, counts ticks.
	Metrics *Counters

	loop service.Loop
}

// Stats are the scheduler's metrics.
type Stats struct {
	Fired, Missed, Skipped  int64
	Passes, AdvanceConflict int64
}

// Counters collects Stats across passes.
type Counters struct {
	mu sync.Mutex
	s  Stats
}

func (c *Counters) add(p PassResult) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.s.Passes++
	c.s.Fired += int64(p.Fired)
	c.s.Missed += int64(p.Missed)
	c.s.Skipped += int64(p.Skipped)
	c.s.AdvanceConflict += int64(p.Conflicts)
}

// Snapshot returns the current stats.
func (c *Counters) Snapshot() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.s
}

// PassResult sums one pass over the schedules.
type PassResult struct {
	Fired, Missed, Skipped, Conflicts int
}

// Start implements service.Service.
func (s *Scheduler) Start(ctx context.Context) error { return s.loop.Start(ctx, s.run) }

// Stop implements service.Service.
func (s *Scheduler) Stop() { s.loop.Stop() }

// Running reports whether the service runs (for readiness).
func (s *Scheduler) Running() bool { return s.loop.Running() }

func (s *Scheduler) run(ctx context.Context) {
	poll := s.Poll
	if poll <= 0 {
		poll = 5 * time.Second
	}
	for {
		res, err := s.Pass(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			s.log().Error("scheduler pass failed", "error", err.Error(), "code", string(engine.CodeOf(err)))
		case res.Fired+res.Missed+res.Skipped > 0:
			s.log().Info("scheduler pass", "fired", res.Fired, "missed", res.Missed, "skipped", res.Skipped)
		}
		if err := s.Sleep(ctx, poll); err != nil {
			return
		}
	}
}

func (s *Scheduler) log() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}

// Pass handles every schedule once: the ticks due by the clock are fired
// (inside the catch-up window) or recorded as missed (older).
func (s *Scheduler) Pass(ctx context.Context) (PassResult, error) {
	var total PassResult
	// One read of every cursor serves the whole pass: on Snowflake each
	// query wakes a warehouse, so an idle pass costs one query, not one per
	// schedule.
	list, err := s.Store.ListCursors(ctx)
	if err != nil {
		return total, err
	}
	cursors := make(map[string]Cursor, len(list))
	for _, c := range list {
		cursors[c.Name] = c
	}
	var firstErr error
	var open openRequests
	for _, d := range s.Defs {
		cur, ok := cursors[d.Name]
		r, err := s.pass(ctx, d, cur, ok, &open)
		if err != nil {
			if ctx.Err() != nil {
				return total, ctx.Err()
			}
			s.log().Error("schedule failed", "schedule", d.Name, "error", err.Error())
			if firstErr == nil {
				firstErr = fmt.Errorf("schedule %s: %w", d.Name, err)
			}
		}
		total.Fired += r.Fired
		total.Missed += r.Missed
		total.Skipped += r.Skipped
		total.Conflicts += r.Conflicts
	}
	s.Metrics.add(total)
	return total, firstErr
}

// maxTicksPerPass bounds the ticks one pass walks (a seconds schedule
// after a long downtime); the rest are walked by the next pass.
const maxTicksPerPass = 200000

// openRequests reads the queue's open requests at most once per pass: each
// schedule looks only at its own, and what one schedule fires or cancels
// is no other's, so one read serves every due schedule.
type openRequests struct {
	list   []queue.Request
	loaded bool
}

func (o *openRequests) get(ctx context.Context, st queue.Store) ([]queue.Request, error) {
	if !o.loaded {
		list, err := st.ListRequests(ctx, false)
		if err != nil {
			return nil, err
		}
		o.list, o.loaded = list, true
	}
	return o.list, nil
}

func (s *Scheduler) pass(ctx context.Context, d Def, cur Cursor, ok bool, open *openRequests) (PassResult, error) {
	now := s.Clock.Now().UTC()
	if !ok {
		// A new schedule starts with its next tick: it does not replay the past.
		if err := s.Store.InitCursor(ctx, d.Name, d.Spec.Next(now)); err != nil {
			return PassResult{}, err
		}
		var err error
		if cur, _, err = s.Store.GetCursor(ctx, d.Name); err != nil {
			return PassResult{}, err
		}
	}
	if cur.NextTick.IsZero() || cur.NextTick.After(now) {
		return PassResult{}, nil
	}
	window := d.CatchupWindow
	cutoff := now.Add(-window)
	var due []time.Time
	missed := 0
	var firstMissed, lastMissed time.Time
	t := cur.NextTick
	n := 0
	for ; !t.IsZero() && !t.After(now) && n < maxTicksPerPass; t, n = d.Spec.Next(t), n+1 {
		if t.Before(cutoff) {
			if missed == 0 {
				firstMissed = t
			}
			lastMissed = t
			missed++
			continue
		}
		due = append(due, t)
	}
	next := t // the first tick not handled
	res := PassResult{Missed: missed}
	reqs, skipped, err := s.applyOverlap(ctx, d, due, open)
	if err != nil {
		return PassResult{}, err
	}
	res.Skipped = skipped
	res.Fired = len(reqs)
	var last time.Time // a scheduled request's NotBefore is its tick
	if len(reqs) > 0 {
		last = reqs[len(reqs)-1].NotBefore
	}
	won, err := s.Store.AdvanceCursor(ctx, Advance{
		Name: d.Name, Version: cur.Version, NextTick: next, LastTick: last,
		Requests: reqs, Fired: res.Fired, Missed: res.Missed, Skipped: res.Skipped,
	})
	if err != nil {
		return PassResult{}, err
	}
	if !won {
		// Another replica advanced the cursor first; it fired these ticks.
		return PassResult{Conflicts: 1}, nil
	}
	if missed > 0 {
		s.recordMissed(ctx, d, missed, firstMissed, lastMissed)
	}
	for _, r := range reqs {
		s.log().Info("tick fired", "schedule", d.Name, "tick", r.RunRequestID, "request", r.RequestID)
	}
	return res, nil
}

// TickRequestID is the runRequestId of a schedule's tick: one request per
// (schedule, tick in UTC), whichever replica or backfill enqueues it.
func TickRequestID(schedule string, tick time.Time) string {
	return "schedule:" + schedule + ":" + tick.UTC().Format(time.RFC3339Nano)
}

// Request builds the request of schedule d for a tick (the zero time: a
// run outside the cron, with no data interval).
func (s *Scheduler) Request(ctx context.Context, d Def, runRequestID string, notBefore, tick time.Time) (queue.Request, error) {
	p, err := s.Resolve(ctx, d.PlanPath)
	if err != nil {
		return queue.Request{}, err
	}
	return s.request(d, p, runRequestID, notBefore, tick), nil
}

// request builds a request of d for a plan already resolved: the ticks
// handled at one moment share one read of the plan. The run fired at tick
// covers [previous tick, tick).
func (s *Scheduler) request(d Def, p PlanInfo, runRequestID string, notBefore, tick time.Time) queue.Request {
	env := s.EnvironmentID
	if d.EnvironmentID != "" {
		env = d.EnvironmentID
	}
	shape := d.Shape
	if !tick.IsZero() {
		if start, end, ok := d.Spec.Interval(tick); ok {
			shape.DataInterval = &engine.DataInterval{Start: start.Format(engine.TimeFormat), End: end.Format(engine.TimeFormat), Timezone: d.Spec.Loc.String()}
		}
	}
	r := queue.Request{
		RequestID: s.IDs.NewID(), TenantID: s.TenantID, ProjectID: s.ProjectID, EnvironmentID: env,
		PlanID: p.PlanID, PlanVersion: p.PlanVersion, RunRequestID: runRequestID,
		PlanPath: d.PlanPath, PlanSHA256: p.SHA256, Priority: d.Priority, NotBefore: notBefore,
		Schedule: d.Name, Serial: d.Overlap != OverlapAllowAll, State: queue.StatePending, Shape: shape,
	}
	r.Key = queue.Key(r.TenantID, r.ProjectID, r.EnvironmentID, r.PlanID, r.PlanVersion, r.RunRequestID)
	return r
}

// applyOverlap turns the due ticks into requests under the schedule's
// overlap policy, given its requests still waiting or running.
func (s *Scheduler) applyOverlap(ctx context.Context, d Def, due []time.Time, open *openRequests) ([]queue.Request, int, error) {
	if len(due) == 0 {
		return nil, 0, nil
	}
	var pending, active []queue.Request
	if d.Overlap != OverlapAllowAll && d.Overlap != OverlapBufferAll {
		list, err := open.get(ctx, s.Store)
		if err != nil {
			return nil, 0, err
		}
		for _, r := range list {
			switch {
			case r.Schedule != d.Name:
			case r.State == queue.StatePending:
				pending = append(pending, r)
			default:
				active = append(active, r)
			}
		}
	}
	fire := due
	switch d.Overlap {
	case OverlapAllowAll, OverlapBufferAll:
	case OverlapBufferOne:
		// One may run and one wait; the latest due tick is the one kept.
		fire = nil
		if len(pending) == 0 {
			fire = due[len(due)-1:]
		}
	case OverlapCancelOther:
		// The newest tick replaces whatever of the schedule is queued or running.
		for _, r := range pending {
			if _, err := s.Store.CancelRequest(ctx, r.RequestID); err != nil {
				return nil, 0, err
			}
		}
		for _, r := range active {
			if r.RunID != "" && s.CancelRun != nil {
				if err := s.CancelRun(ctx, r.RunID, "schedule "+d.Name+": overlap cancel_other"); err != nil {
					return nil, 0, err
				}
			}
		}
		fire = due[len(due)-1:]
	default: // skip
		fire = nil
		if len(pending)+len(active) == 0 {
			fire = due[len(due)-1:]
		}
	}
	if len(fire) == 0 {
		return nil, len(due), nil
	}
	p, err := s.Resolve(ctx, d.PlanPath)
	if err != nil {
		return nil, 0, err
	}
	reqs := make([]queue.Request, 0, len(fire))
	for _, t := range fire {
		reqs = append(reqs, s.request(d, p, TickRequestID(d.Name, t), t, t))
	}
	return reqs, len(due) - len(fire), nil
}

func (s *Scheduler) recordMissed(ctx context.Context, d Def, n int, first, last time.Time) {
	payload, _ := json.Marshal(map[string]any{
		"schedule": d.Name, "missed": n, "firstMissedTick": first.Format(time.RFC3339Nano),
		"lastMissedTick": last.Format(time.RFC3339Nano), "catchupWindow": d.CatchupWindow.String(),
	})
	a := engine.Alert{
		Key:  fmt.Sprintf("%s:%s:%s:%s", CodeTickMissed, d.Name, first.Format(time.RFC3339Nano), last.Format(time.RFC3339Nano)),
		Code: CodeTickMissed, Severity: "WARNING",
		TenantID: s.TenantID, ProjectID: s.ProjectID, EnvironmentID: s.EnvironmentID,
		Message: fmt.Sprintf("schedule %s missed %d tick(s) from %s to %s: older than its catch-up window of %s",
			d.Name, n, first.Format(time.RFC3339), last.Format(time.RFC3339), d.CatchupWindow),
		Payload:   payload,
		CreatedAt: s.Clock.Now().UTC(),
	}
	if _, err := s.Store.RecordAlert(ctx, a); err != nil {
		s.log().Error("recording SCHEDULE_TICK_MISSED failed", "schedule", d.Name, "error", err.Error())
	}
	s.log().Warn("ticks missed", "schedule", d.Name, "missed", n, "first", first, "last", last)
}

// Trigger enqueues one run of schedule d now, outside its cron, through the
// run queue (its limits apply). As Airflow's manual runs, it covers the
// interval of the schedule's latest tick at or before now.
func Trigger(ctx context.Context, q *queue.Queue, s *Scheduler, d Def) (queue.Request, bool, error) {
	latest := d.Spec.Prev(s.Clock.Now().Add(time.Nanosecond))
	r, err := s.Request(ctx, d, "schedule:"+d.Name+":trigger:"+s.IDs.NewID(), time.Time{}, latest)
	if err != nil {
		return queue.Request{}, false, err
	}
	got, created, err := q.Enqueue(ctx, r)
	if err != nil || !created {
		return got, created, err
	}
	return got, created, s.recordFired(ctx, d, latest, got.RequestID, 1)
}

// recordFired adds what a trigger or backfill enqueued to the schedule's
// cursor, as the scheduler's own ticks are: fired more, the last request,
// and the last tick when tick is later than the cursor's. The next tick is
// left as it is: the cron still fires what it has not. The requests are
// already queued; a cursor another replica keeps advancing is retried a
// few times, then left (its counters only describe the schedule).
func (s *Scheduler) recordFired(ctx context.Context, d Def, tick time.Time, requestID string, fired int) error {
	for range 5 {
		cur, ok, err := s.Store.GetCursor(ctx, d.Name)
		if err != nil {
			return err
		}
		if !ok {
			if err := s.Store.InitCursor(ctx, d.Name, d.Spec.Next(s.Clock.Now().UTC())); err != nil {
				return err
			}
			continue
		}
		a := Advance{Name: d.Name, Version: cur.Version, NextTick: cur.NextTick, Fired: fired}
		if tick.After(cur.LastTick) || cur.LastRequestID == "" {
			a.LastTick, a.LastRequestID = tick, requestID
		}
		won, err := s.Store.AdvanceCursor(ctx, a)
		if err != nil || won {
			return err
		}
	}
	s.log().Warn("schedule cursor kept moving: a trigger or backfill is not counted in it", "schedule", d.Name, "request", requestID)
	return nil
}

// Backfill enqueues the ticks of d in [from, to] through the run queue,
// each with the runRequestId the scheduler gives that tick: a tick already
// fired is not enqueued twice.
func Backfill(ctx context.Context, q *queue.Queue, s *Scheduler, d Def, from, to time.Time) ([]queue.Request, int, error) {
	ticks, more := d.Spec.Ticks(from.Add(-time.Nanosecond), to, 10000)
	if more {
		return nil, 0, engine.Errorf(engine.CodeInvalidArgument, "backfill of %s from %s to %s has more than 10000 ticks; split it", d.Name, from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	var out []queue.Request
	created := 0
	if len(ticks) == 0 {
		return out, created, nil
	}
	p, err := s.Resolve(ctx, d.PlanPath)
	if err != nil {
		return out, created, err
	}
	for _, t := range ticks {
		got, isNew, err := q.Enqueue(ctx, s.request(d, p, TickRequestID(d.Name, t), time.Time{}, t))
		if err != nil {
			if created > 0 {
				_ = s.recordFired(ctx, d, ticks[len(out)-1], out[len(out)-1].RequestID, created)
			}
			return out, created, err
		}
		if isNew {
			created++
		}
		out = append(out, got)
	}
	if created == 0 {
		return out, created, nil
	}
	return out, created, s.recordFired(ctx, d, ticks[len(ticks)-1], out[len(out)-1].RequestID, created)
}
