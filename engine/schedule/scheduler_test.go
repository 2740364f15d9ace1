package schedule_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/queue"
	"github.com/dvtrun/dvtrun/engine/schedule"
	"github.com/dvtrun/dvtrun/engine/service/servicetest"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

var ctx = context.Background()

// clock is the schedulers' injected clock.
type clock = servicetest.Clock

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

type fixture struct {
	path      string
	clock     *clock
	store     *sqlite.Store
	cancelled []string
}

func newFixture(t *testing.T, start time.Time) *fixture {
	f := &fixture{path: filepath.Join(t.TempDir(), "state.db"), clock: servicetest.NewClock(start)}
	f.store = f.open(t)
	return f
}

func (f *fixture) open(t *testing.T) *sqlite.Store {
	t.Helper()
	return servicetest.OpenSQLite(t, f.path)
}

func (f *fixture) scheduler(st schedule.Store, defs ...schedule.Def) *schedule.Scheduler {
	return &schedule.Scheduler{
		Store: st, Clock: f.clock, IDs: engine.IDFunc(uuid.NewString), Defs: defs,
		TenantID: "acme", ProjectID: "shop", EnvironmentID: "dev",
		Resolve: func(context.Context, string) (schedule.PlanInfo, error) {
			return schedule.PlanInfo{PlanID: "shop", PlanVersion: "1", SHA256: "ab12"}, nil
		},
		CancelRun: func(_ context.Context, runID, _ string) error {
			f.cancelled = append(f.cancelled, runID)
			return nil
		},
	}
}

func def(t *testing.T, name, expr, tz, overlap string, window time.Duration) schedule.Def {
	t.Helper()
	sp, err := schedule.Parse(expr, tz)
	if err != nil {
		t.Fatal(err)
	}
	return schedule.Def{Name: name, Spec: sp, PlanPath: "plans/shop/plan.yaml", Overlap: overlap, CatchupWindow: window}
}

func (f *fixture) requests(t *testing.T) []queue.Request {
	t.Helper()
	list, err := f.store.ListRequests(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func pass(t *testing.T, s *schedule.Scheduler) schedule.PassResult {
	t.Helper()
	r, err := s.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Three replicas pass at every step, concurrently: one request per tick.
func TestReplicasEnqueueOneRequestPerTick(t *testing.T) {
	f := newFixture(t, utc("2026-04-01T00:00:30Z"))
	d := def(t, "every-minute", "@every 1m", "", schedule.OverlapAllowAll, time.Hour)
	replicas := []*schedule.Scheduler{f.scheduler(f.open(t), d), f.scheduler(f.open(t), d), f.scheduler(f.open(t), d)}
	pass(t, replicas[0]) // creates the cursor
	const ticks = 30
	fired := 0
	var mu sync.Mutex
	for range ticks {
		f.clock.Advance(time.Minute)
		var wg sync.WaitGroup
		for _, s := range replicas {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := s.Pass(ctx)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				fired += r.Fired
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	list := f.requests(t)
	if len(list) != ticks || fired != ticks {
		t.Fatalf("%d requests, %d fired, want %d", len(list), fired, ticks)
	}
	seen := map[string]bool{}
	for i, r := range list {
		want := schedule.TickRequestID("every-minute", utc("2026-04-01T00:01:30Z").Add(time.Duration(i)*time.Minute))
		if r.RunRequestID != want || seen[r.RunRequestID] || r.Schedule != "every-minute" || r.Serial {
			t.Fatalf("request %d: %+v, want runRequestId %s", i, r, want)
		}
		seen[r.RunRequestID] = true
	}
	cur, _, _ := f.store.GetCursor(ctx, "every-minute")
	if cur.Fired != ticks || cur.Missed != 0 || !cur.NextTick.Equal(f.clock.Now().Add(time.Minute)) {
		t.Fatalf("cursor %+v", cur)
	}
}

// Two days of downtime with a one-hour catch-up window: one run, the rest
// recorded as missed with an alert carrying the count.
func TestDowntimeBeyondCatchupWindow(t *testing.T) {
	f := newFixture(t, utc("2026-04-01T00:10:00Z"))
	s := f.scheduler(f.store, def(t, "hourly", "@hourly", "", schedule.OverlapSkip, time.Hour))
	pass(t, s) // cursor at 01:00
	f.clock.Set(utc("2026-04-03T00:40:00Z"))
	r := pass(t, s)
	// Ticks 04-01T01:00 .. 04-03T00:00 are 48; only 04-03T00:00 is within
	// the hour before 00:40.
	if r.Fired != 1 || r.Missed != 47 {
		t.Fatalf("pass %+v, want 1 fired, 47 missed", r)
	}
	list := f.requests(t)
	if len(list) != 1 || list[0].RunRequestID != schedule.TickRequestID("hourly", utc("2026-04-03T00:00:00Z")) {
		t.Fatalf("requests %+v", list)
	}
	alerts, err := f.store.ListAlerts(ctx, "")
	if err != nil || len(alerts) != 1 || alerts[0].Code != schedule.CodeTickMissed {
		t.Fatalf("alerts %+v %v", alerts, err)
	}
	var p struct {
		Missed          int    `json:"missed"`
		FirstMissedTick string `json:"firstMissedTick"`
		LastMissedTick  string `json:"lastMissedTick"`
	}
	if err := json.Unmarshal(alerts[0].Payload, &p); err != nil || p.Missed != 47 || p.FirstMissedTick != "2026-04-01T01:00:00Z" || p.LastMissedTick != "2026-04-02T23:00:00Z" {
		t.Fatalf("alert payload %s (%v)", alerts[0].Payload, err)
	}
	cur, _, _ := f.store.GetCursor(ctx, "hourly")
	if cur.Missed != 47 || cur.Fired != 1 || !cur.NextTick.Equal(utc("2026-04-03T01:00:00Z")) {
		t.Fatalf("cursor %+v", cur)
	}
	// The next pass finds nothing to do.
	if r := pass(t, s); r != (schedule.PassResult{}) {
		t.Fatalf("second pass %+v", r)
	}
}

// The scheduler, stepping its clock every 10 minutes across DST changes,
// fires a skipped local time once after the gap and a repeated one once.
func TestSchedulerAcrossDST(t *testing.T) {
	cases := []struct {
		name, expr, tz string
		from, to       string
		want           []string
	}{
		{"berlin spring", "30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z", "2026-03-30T12:00:00Z", []string{"2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		{"berlin fall", "30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", "2026-10-26T12:00:00Z", []string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"los angeles spring", "0 2 * * *", "America/Los_Angeles", "2026-03-07T12:00:00Z", "2026-03-09T12:00:00Z", []string{"2026-03-08T10:00:00Z", "2026-03-09T09:00:00Z"}},
		{"los angeles fall", "30 1 * * *", "America/Los_Angeles", "2026-10-31T12:00:00Z", "2026-11-02T12:00:00Z", []string{"2026-11-01T08:30:00Z", "2026-11-02T09:30:00Z"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, utc(tc.from))
			s := f.scheduler(f.store, def(t, "nightly", tc.expr, tc.tz, schedule.OverlapAllowAll, time.Hour))
			for now := utc(tc.from); !now.After(utc(tc.to)); now = now.Add(10 * time.Minute) {
				f.clock.Set(now)
				pass(t, s)
			}
			list := f.requests(t)
			if len(list) != len(tc.want) {
				t.Fatalf("%d requests, want %d: %+v", len(list), len(tc.want), list)
			}
			for i, w := range tc.want {
				if list[i].RunRequestID != schedule.TickRequestID("nightly", utc(w)) {
					t.Errorf("request %d: %s, want tick %s", i, list[i].RunRequestID, w)
				}
			}
		})
	}
}

func TestOverlapPolicies(t *testing.T) {
	cases := []struct {
		overlap string
		// After tick 1 is claimed and running, ticks 2 and 3 fire.
		wantStates  []queue.State // of the requests in enqueue order
		wantSkipped int
		wantCancel  int
		// whether tick 2's request may start while tick 1 runs
		secondStartsAtOnce bool
	}{
		{schedule.OverlapSkip, []queue.State{queue.StateRunning}, 2, 0, false},
		{schedule.OverlapBufferOne, []queue.State{queue.StateRunning, queue.StatePending}, 1, 0, false},
		{schedule.OverlapBufferAll, []queue.State{queue.StateRunning, queue.StatePending, queue.StatePending}, 0, 0, false},
		{schedule.OverlapCancelOther, []queue.State{queue.StateRunning, queue.StateCancelled, queue.StatePending}, 0, 2, false},
		{schedule.OverlapAllowAll, []queue.State{queue.StateRunning, queue.StatePending, queue.StatePending}, 0, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.overlap, func(t *testing.T) {
			f := newFixture(t, utc("2026-04-01T00:00:30Z"))
			s := f.scheduler(f.store, def(t, "s", "@every 1m", "", tc.overlap, time.Hour))
			pass(t, s)
			f.clock.Advance(time.Minute)
			if r := pass(t, s); r.Fired != 1 {
				t.Fatalf("tick 1: %+v", r)
			}
			first, ok, err := f.store.ClaimRequest(ctx, "worker", time.Minute, queue.ClaimLimits{})
			if err != nil || !ok {
				t.Fatalf("claim tick 1: %v %v", ok, err)
			}
			if err := f.store.SetRequestRun(ctx, first.RequestID, "worker", "run-1"); err != nil {
				t.Fatal(err)
			}
			skipped := 0
			for range 2 {
				f.clock.Advance(time.Minute)
				skipped += pass(t, s).Skipped
			}
			list := f.requests(t)
			if len(list) != len(tc.wantStates) {
				t.Fatalf("%d requests, want %d: %+v", len(list), len(tc.wantStates), list)
			}
			for i, r := range list {
				if r.State != tc.wantStates[i] {
					t.Errorf("request %d is %s, want %s", i, r.State, tc.wantStates[i])
				}
			}
			if skipped != tc.wantSkipped || len(f.cancelled) != tc.wantCancel {
				t.Fatalf("skipped %d (want %d), cancelled runs %v (want %d)", skipped, tc.wantSkipped, f.cancelled, tc.wantCancel)
			}
			cur, _, _ := f.store.GetCursor(ctx, "s")
			if cur.Skipped != int64(tc.wantSkipped) {
				t.Fatalf("cursor skipped %d", cur.Skipped)
			}
			if len(list) < 2 {
				return
			}
			_, ok, err = f.store.ClaimRequest(ctx, "worker-2", time.Minute, queue.ClaimLimits{})
			if err != nil || ok != tc.secondStartsAtOnce {
				t.Fatalf("a second request started while tick 1 runs: %v (want %v) %v", ok, tc.secondStartsAtOnce, err)
			}
			if tc.secondStartsAtOnce {
				return
			}
			// When tick 1's run ends, the next waiting request starts.
			if err := f.store.FinishRequest(ctx, first.RequestID, "worker", "COMPLETED"); err != nil {
				t.Fatal(err)
			}
			next, ok, err := f.store.ClaimRequest(ctx, "worker-2", time.Minute, queue.ClaimLimits{})
			if err != nil || !ok || next.State != queue.StateClaimed {
				t.Fatalf("after tick 1 finished: %+v %v %v", next, ok, err)
			}
			if want := list[len(list)-1]; tc.overlap != schedule.OverlapBufferAll && next.RequestID != want.RequestID {
				t.Fatalf("started %s, want %s", next.RunRequestID, want.RunRequestID)
			}
			if tc.overlap == schedule.OverlapBufferAll && next.RequestID != list[1].RequestID {
				t.Fatalf("buffer_all starts in order: got %s, want %s", next.RunRequestID, list[1].RunRequestID)
			}
		})
	}
}

func TestBackfillAndTriggerUseTheRequestPath(t *testing.T) {
	f := newFixture(t, utc("2026-04-01T12:00:00Z"))
	d := def(t, "nightly", "0 2 * * *", "Europe/Berlin", schedule.OverlapAllowAll, time.Hour)
	s := f.scheduler(f.store, d)
	q := &queue.Queue{Store: f.store, IDs: engine.IDFunc(uuid.NewString)}
	got, created, err := schedule.Backfill(ctx, q, s, d, utc("2026-03-01T00:00:00Z"), utc("2026-03-05T00:00:00Z"))
	if err != nil || created != 4 || len(got) != 4 {
		t.Fatalf("backfill: %d created, %d requests, %v", created, len(got), err)
	}
	if got[0].RunRequestID != schedule.TickRequestID("nightly", utc("2026-03-01T01:00:00Z")) {
		t.Fatalf("first backfilled tick %s", got[0].RunRequestID)
	}
	// The cursor counts what the backfill fired, as `schedule list` and
	// the console show it: the last tick, its request, fired.
	cursor := func() schedule.Cursor {
		t.Helper()
		c, ok, err := f.store.GetCursor(ctx, "nightly")
		if err != nil || !ok {
			t.Fatalf("cursor: %v %v", ok, err)
		}
		return c
	}
	c := cursor()
	if c.Fired != 4 || !c.LastTick.Equal(utc("2026-03-04T01:00:00Z")) || c.LastRequestID != got[3].RequestID || !c.NextTick.Equal(utc("2026-04-02T00:00:00Z")) {
		t.Fatalf("cursor after the backfill: %+v", c)
	}
	// The same range again: every tick is already requested, none counted.
	if _, created, err := schedule.Backfill(ctx, q, s, d, utc("2026-03-01T00:00:00Z"), utc("2026-03-05T00:00:00Z")); err != nil || created != 0 {
		t.Fatalf("second backfill created %d (%v)", created, err)
	}
	if c2 := cursor(); c2.Fired != 4 || c2.Version != c.Version {
		t.Fatalf("cursor after a backfill that enqueued nothing: %+v", c2)
	}
	r, isNew, err := schedule.Trigger(ctx, q, s, d)
	if err != nil || !isNew || r.Schedule != "nightly" {
		t.Fatalf("trigger: %+v %v %v", r, isNew, err)
	}
	if n := len(f.requests(t)); n != 5 {
		t.Fatalf("%d requests", n)
	}
	if c = cursor(); c.Fired != 5 || c.LastRequestID != r.RequestID || !c.LastTick.Equal(utc("2026-04-01T00:00:00Z")) {
		t.Fatalf("cursor after the trigger: %+v", c)
	}
	// An older backfill counts but leaves the last tick and request.
	if _, created, err := schedule.Backfill(ctx, q, s, d, utc("2026-02-01T00:00:00Z"), utc("2026-02-02T00:00:00Z")); err != nil || created != 1 {
		t.Fatalf("older backfill: %d %v", created, err)
	}
	if c = cursor(); c.Fired != 6 || c.LastRequestID != r.RequestID || !c.LastTick.Equal(utc("2026-04-01T00:00:00Z")) {
		t.Fatalf("cursor after an older backfill: %+v", c)
	}
	// The cron goes on from its own next tick: the next pass fires it.
	f.clock.Set(utc("2026-04-02T00:00:30Z"))
	if res := pass(t, s); res.Fired != 1 {
		t.Fatalf("pass after the trigger: %+v", res)
	}
	if c = cursor(); c.Fired != 7 || !c.LastTick.Equal(utc("2026-04-02T00:00:00Z")) {
		t.Fatalf("cursor after the next tick: %+v", c)
	}
}

// countingStore counts the scheduler's reads.
type countingStore struct {
	schedule.Store
	lists, gets, advances, requestLists int
}

func (c *countingStore) ListRequests(ctx context.Context, all bool) ([]queue.Request, error) {
	c.requestLists++
	return c.Store.ListRequests(ctx, all)
}

func (c *countingStore) ListCursors(ctx context.Context) ([]schedule.Cursor, error) {
	c.lists++
	return c.Store.ListCursors(ctx)
}

func (c *countingStore) GetCursor(ctx context.Context, name string) (schedule.Cursor, bool, error) {
	c.gets++
	return c.Store.GetCursor(ctx, name)
}

func (c *countingStore) AdvanceCursor(ctx context.Context, a schedule.Advance) (bool, error) {
	c.advances++
	return c.Store.AdvanceCursor(ctx, a)
}

// An idle pass over many schedules is one query: on Snowflake every query
// wakes a warehouse.
func TestIdlePassIsOneRead(t *testing.T) {
	f := newFixture(t, utc("2026-04-01T00:00:30Z"))
	cs := &countingStore{Store: f.store}
	var defs []schedule.Def
	for _, n := range []string{"a", "b", "c", "d"} {
		defs = append(defs, def(t, n, "@hourly", "", schedule.OverlapSkip, time.Hour))
	}
	s := f.scheduler(cs, defs...)
	pass(t, s) // creates the cursors
	*cs = countingStore{Store: f.store}
	for range 3 {
		f.clock.Advance(time.Minute)
		pass(t, s)
	}
	if cs.lists != 3 || cs.gets != 0 || cs.advances != 0 {
		t.Fatalf("3 idle passes over 4 schedules: %d lists, %d gets, %d advances", cs.lists, cs.gets, cs.advances)
	}
}

// A pass in which several schedules are due reads the open requests once,
// not once per schedule, and each schedule still sees only its own.
func TestDuePassReadsOpenRequestsOnce(t *testing.T) {
	f := newFixture(t, utc("2026-04-01T00:00:30Z"))
	cs := &countingStore{Store: f.store}
	names := []string{"a", "b", "c", "d"}
	var defs []schedule.Def
	for _, n := range names {
		defs = append(defs, def(t, n, "@hourly", "", schedule.OverlapSkip, time.Hour))
	}
	s := f.scheduler(cs, defs...)
	pass(t, s) // creates the cursors
	*cs = countingStore{Store: f.store}
	f.clock.Advance(time.Hour)
	if r := pass(t, s); r.Fired != len(names) {
		t.Fatalf("first due pass fired %d, want %d", r.Fired, len(names))
	}
	if cs.requestLists != 1 {
		t.Fatalf("a pass with %d due schedules listed the requests %d times, want 1", len(names), cs.requestLists)
	}
	// Each schedule's request is still waiting: under skip, none fires again.
	f.clock.Advance(time.Hour)
	if r := pass(t, s); r.Fired != 0 || r.Skipped != len(names) {
		t.Fatalf("second due pass: %+v, want every schedule skipped", r)
	}
}

// The ticks handled at one moment (a backfill, a pass firing several ticks
// under buffer_all) read the plan once, not once per tick: Resolve reads and
// hashes the plan file.
func TestTicksOfOneMomentResolveThePlanOnce(t *testing.T) {
	f := newFixture(t, utc("2026-04-01T00:00:30Z"))
	d := def(t, "hourly", "@hourly", "", schedule.OverlapBufferAll, 24*time.Hour)
	s := f.scheduler(f.store, d)
	resolves := 0
	resolve := s.Resolve
	s.Resolve = func(ctx context.Context, path string) (schedule.PlanInfo, error) {
		resolves++
		return resolve(ctx, path)
	}
	q := &queue.Queue{Store: f.store, IDs: engine.IDFunc(uuid.NewString)}
	_, created, err := schedule.Backfill(ctx, q, s, d, utc("2026-03-01T00:00:00Z"), utc("2026-03-01T05:00:00Z"))
	if err != nil || created != 6 || resolves != 1 {
		t.Fatalf("backfill of 6 ticks: %d created, %d resolves, %v", created, resolves, err)
	}
	pass(t, s) // creates the cursor
	resolves = 0
	f.clock.Advance(3 * time.Hour)
	if r := pass(t, s); r.Fired != 3 || resolves != 1 {
		t.Fatalf("a pass firing 3 ticks: %+v, %d resolves", r, resolves)
	}
}

// Each backfilled tick is its own run with its own data interval, [the
// previous tick, the tick) in the schedule's zone; the schedule's shape
// and target environment ride along; a fired tick and a trigger get theirs.
func TestRequestsCarryTheirDataInterval(t *testing.T) {
	f := newFixture(t, utc("2026-03-31T21:30:00Z"))
	d := def(t, "daily", "0 0 * * *", "Europe/Berlin", schedule.OverlapAllowAll, time.Hour)
	d.Shape = queue.Shape{Target: "prod", Select: []string{"tag:nightly"}, Vars: map[string]any{"region": "eu"}}
	d.EnvironmentID = "production"
	s := f.scheduler(f.store, d)
	q := &queue.Queue{Store: f.store, IDs: engine.IDFunc(uuid.NewString)}
	// Seven Berlin midnights, 03-25 to 03-31, across the spring-forward
	// of 03-29 (that day has 23 hours).
	got, created, err := schedule.Backfill(ctx, q, s, d, utc("2026-03-24T23:00:00Z"), utc("2026-03-30T22:00:00Z"))
	if err != nil || created != 7 {
		t.Fatalf("backfill: %d created, %v", created, err)
	}
	want := [][2]string{
		{"2026-03-23T23:00:00Z", "2026-03-24T23:00:00Z"},
		{"2026-03-24T23:00:00Z", "2026-03-25T23:00:00Z"},
		{"2026-03-25T23:00:00Z", "2026-03-26T23:00:00Z"},
		{"2026-03-26T23:00:00Z", "2026-03-27T23:00:00Z"},
		{"2026-03-27T23:00:00Z", "2026-03-28T23:00:00Z"},
		{"2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"},
		{"2026-03-29T22:00:00Z", "2026-03-30T22:00:00Z"},
	}
	stored := f.requests(t)
	if len(stored) != 7 {
		t.Fatalf("%d requests stored", len(stored))
	}
	for i, r := range stored {
		di := r.Shape.DataInterval
		if di == nil || di.Start != utc(want[i][0]).Format(engine.TimeFormat) || di.End != utc(want[i][1]).Format(engine.TimeFormat) || di.Timezone != "Europe/Berlin" {
			t.Errorf("request %d (%s): interval %+v, want [%s, %s) Europe/Berlin", i, got[i].RunRequestID, di, want[i][0], want[i][1])
		}
		if r.Shape.Target != "prod" || r.Shape.Select[0] != "tag:nightly" || r.Shape.Vars["region"] != "eu" || r.EnvironmentID != "production" {
			t.Errorf("request %d lost the schedule's shape: %+v env %s", i, r.Shape, r.EnvironmentID)
		}
	}
	// The tick due at 03-31 00:00 CEST fires with its day.
	pass(t, s) // creates the cursor
	f.clock.Advance(time.Hour)
	pass(t, s)
	all := f.requests(t)
	if len(all) != 8 {
		t.Fatalf("%d requests after the tick", len(all))
	}
	if di := all[7].Shape.DataInterval; di == nil || di.Start != utc("2026-03-30T22:00:00Z").Format(engine.TimeFormat) || di.End != utc("2026-03-31T22:00:00Z").Format(engine.TimeFormat) {
		t.Errorf("fired tick's interval %+v", di)
	}
	r, _, err := schedule.Trigger(ctx, q, s, d)
	if err != nil {
		t.Fatal(err)
	}
	if di := r.Shape.DataInterval; di == nil || di.End != utc("2026-03-31T22:00:00Z").Format(engine.TimeFormat) {
		t.Errorf("trigger's interval %+v, want the latest tick's", di)
	}
}
