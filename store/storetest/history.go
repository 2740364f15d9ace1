package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/queue"
	"github.com/dvtrun/dvtrun/store"
	"github.com/google/uuid"
)

// historyCases are the run history's (store.Store ListRuns) conformance
// cases. Each works in a tenant of its own on the suite's shared database.
var historyCases = []struct {
	name string
	fn   func(*testing.T, Backend)
}{
	{"HistoryFiltersAndColumns", testHistoryFilters},
	{"HistoryKeysetPagingUnderConcurrentInserts", testHistoryPaging},
	{"HistoryQueuedRunShowsItsRequest", testHistoryRequest},
}

// historyRun creates a run in tenant with the given RunQueued payload and
// further events (step events name their step as "Type:step").
func historyRun(t *testing.T, s store.Store, tenant, plan string, queued map[string]any, then ...string) (*Fixture, []engine.RunEventWrite) {
	t.Helper()
	f := NewFixture()
	f.Meta.TenantID, f.Meta.PlanID = tenant, plan
	q := f.Event(engine.RunQueued, "", 1)
	q.Payload, _ = json.Marshal(queued)
	if _, err := s.BootstrapRun(ctx, f.Meta, []engine.RunEventWrite{q}); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	evs := []engine.RunEventWrite{q}
	for _, spec := range then {
		typ, step, _ := strings.Cut(spec, ":")
		e := f.Event(engine.EventType(typ), step, 1)
		if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{e}); err != nil {
			t.Fatalf("append %s: %v", spec, err)
		}
		evs = append(evs, e)
	}
	return f, evs
}

func testHistoryFilters(t *testing.T, b Backend) {
	s := open(t, b)
	tenant := "hist-" + uuid.NewString()[:8]
	manual, _ := historyRun(t, s, tenant, "p1", map[string]any{"triggeredBy": "ann", "triggerSource": "cli"},
		"RunStarted", "StepStarted:model.a", "StepCompleted:model.a", "RunCompleted")
	nightly, nightlyEvs := historyRun(t, s, tenant, "p2", map[string]any{"triggeredBy": "schedule:nightly", "triggerSource": "schedule"},
		"RunStarted", "StepStarted:model.a", "StepStarted:model.b", "StepFailed:model.b", "StepFailed:model.a", "RunFailed")
	retry, _ := historyRun(t, s, tenant, "p2", map[string]any{"triggeredBy": "ann", "triggerSource": "cli", "parentRunId": nightly.Meta.RunID},
		"RunStarted")
	queued, _ := historyRun(t, s, tenant, "p1", map[string]any{"triggeredBy": "w1", "triggerSource": "queue", "target": "prod",
		"dataInterval": map[string]any{"start": "2026-04-01T00:00:00Z", "end": "2026-04-02T00:00:00Z"}})
	historyRun(t, s, "hist-other-"+tenant, "p1", map[string]any{"triggerSource": "cli"}, "RunStarted") // another tenant's

	all, err := s.ListRuns(ctx, store.RunFilter{TenantID: tenant})
	if err != nil {
		t.Fatal(err)
	}
	// Newest first: created_at, then run id, descending.
	created := map[string]time.Time{}
	for _, r := range all {
		created[r.RunID] = r.CreatedAt
	}
	order := func(fs ...*Fixture) []string {
		var ids []string
		for _, f := range fs {
			ids = append(ids, f.Meta.RunID)
		}
		slices.SortFunc(ids, func(a, b string) int {
			if c := created[b].Compare(created[a]); c != 0 {
				return c
			}
			return strings.Compare(b, a)
		})
		return ids
	}
	if got, want := ids(all), order(manual, nightly, retry, queued); !slices.Equal(got, want) {
		t.Fatalf("all runs of the tenant %v, want %v newest first", got, want)
	}
	byID := map[string]store.RunSummary{}
	for _, r := range all {
		byID[r.RunID] = r
	}

	// The columns.
	n := byID[nightly.Meta.RunID]
	if n.Status != engine.StatusFailed || n.Trigger != store.TriggerSchedule || n.Schedule != "nightly" || n.TriggeredBy != "schedule:nightly" || n.PlanID != "p2" {
		t.Errorf("nightly run: %+v", n)
	}
	if n.FirstFailure == nil || n.FirstFailure.StepID != "model.b" || n.FirstFailure.Code != "STEP_FAILED" || n.FirstFailure.Message != "it's \"broken\"\nline 2" {
		t.Errorf("nightly run's first failure %+v, want model.b's STEP_FAILED (the first StepFailed in the log)", n.FirstFailure)
	}
	queuedAt, startedAt, endedAt := nightlyEvs[0].EmittedAt, nightlyEvs[1].EmittedAt, nightlyEvs[len(nightlyEvs)-1].EmittedAt
	if !n.QueuedAt.Equal(queuedAt) || !n.StartedAt.Equal(startedAt) || !n.EndedAt.Equal(endedAt) {
		t.Errorf("nightly run's times queued %v started %v ended %v, want %v %v %v", n.QueuedAt, n.StartedAt, n.EndedAt, queuedAt, startedAt, endedAt)
	}
	if want := time.Duration(endedAt.UnixMilli()-startedAt.UnixMilli()) * time.Millisecond; n.Duration() != want || n.QueueWait() != startedAt.Sub(queuedAt) {
		t.Errorf("nightly run's duration %v and queue wait %v, want %v and %v", n.Duration(), n.QueueWait(), want, startedAt.Sub(queuedAt))
	}
	if r := byID[retry.Meta.RunID]; r.Trigger != store.TriggerRetry || r.ParentRunID != nightly.Meta.RunID || r.Status != engine.StatusRunning || !r.EndedAt.IsZero() || r.Duration() != 0 || r.FirstFailure != nil {
		t.Errorf("retry run: %+v", r)
	}
	if q := byID[queued.Meta.RunID]; q.Trigger != store.TriggerQueue || q.Status != engine.StatusQueued || q.Target != "prod" ||
		q.IntervalStart != "2026-04-01T00:00:00Z" || q.IntervalEnd != "2026-04-02T00:00:00Z" || !q.StartedAt.IsZero() || q.QueueWait() != 0 {
		t.Errorf("queued run: %+v", q)
	}
	if m := byID[manual.Meta.RunID]; m.Trigger != store.TriggerManual || m.Status != engine.StatusCompleted || m.Target != "" || m.IntervalStart != "" || m.FirstFailure != nil {
		t.Errorf("manual run: %+v", m)
	}

	// The filters, each applied by the store.
	mid := created[order(manual, nightly, retry, queued)[1]]
	cases := []struct {
		name string
		f    store.RunFilter
		want []string
	}{
		{"status", store.RunFilter{Status: engine.StatusFailed}, order(nightly)},
		{"plan", store.RunFilter{PlanID: "p1"}, order(manual, queued)},
		{"schedule", store.RunFilter{Schedule: "nightly"}, order(nightly)},
		{"trigger retry", store.RunFilter{Trigger: store.TriggerRetry}, order(retry)},
		{"trigger manual", store.RunFilter{Trigger: store.TriggerManual}, order(manual)},
		{"trigger queue", store.RunFilter{Trigger: store.TriggerQueue}, order(queued)},
		{"target", store.RunFilter{Target: "prod"}, order(queued)},
		{"plan and status", store.RunFilter{PlanID: "p2", Status: engine.StatusRunning}, order(retry)},
		{"full run id as prefix", store.RunFilter{RunIDPrefix: manual.Meta.RunID}, order(manual)},
		{"nothing matches", store.RunFilter{Status: engine.StatusPaused}, nil},
		{"unknown plan", store.RunFilter{PlanID: "p1' OR '1'='1"}, nil},
		{"limit", store.RunFilter{Limit: 2}, order(manual, nightly, retry, queued)[:2]},
		{"since", store.RunFilter{Since: mid}, within(all, mid, time.Time{})},
		{"until", store.RunFilter{Until: mid}, within(all, time.Time{}, mid)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.f.TenantID = tenant
			got, err := s.ListRuns(ctx, c.f)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids(got), c.want) {
				t.Fatalf("ListRuns(%+v) = %v, want %v", c.f, ids(got), c.want)
			}
		})
	}
	// A prefix selects the runs whose id starts with it, and only those.
	p := manual.Meta.RunID[:1]
	got, err := s.ListRuns(ctx, store.RunFilter{TenantID: tenant, RunIDPrefix: p})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, id := range ids(all) {
		if strings.HasPrefix(id, p) {
			want = append(want, id)
		}
	}
	if !slices.Equal(ids(got), want) {
		t.Fatalf("prefix %q: %v, want %v", p, ids(got), want)
	}
}

// within is the ids of runs (in their order) created in [since, until),
// a zero bound being open.
func within(runs []store.RunSummary, since, until time.Time) []string {
	var out []string
	for _, r := range runs {
		if (since.IsZero() || !r.CreatedAt.Before(since)) && (until.IsZero() || r.CreatedAt.Before(until)) {
			out = append(out, r.RunID)
		}
	}
	return out
}

func ids(runs []store.RunSummary) []string {
	var out []string
	for _, r := range runs {
		out = append(out, r.RunID)
	}
	return out
}

// testHistoryPaging pages through a tenant's runs with the keyset cursor
// while another handle keeps creating runs: the pages hold exactly the
// runs that existed when paging began, in order, none twice (runs created
// meanwhile are newer than the cursor, as the store's clock runs forward).
func testHistoryPaging(t *testing.T, b Backend) {
	s1, s2 := open(t, b), open(t, b)
	tenant := "page-" + uuid.NewString()[:8]
	for range 7 {
		historyRun(t, s1, tenant, "p", map[string]any{"triggerSource": "cli"}, "RunStarted")
	}
	before, err := s1.ListRuns(ctx, store.RunFilter{TenantID: tenant})
	if err != nil || len(before) != 7 {
		t.Fatalf("runs before paging: %d %v", len(before), err)
	}
	var paged []string
	var after *store.Cursor
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for page := 0; ; page++ {
		got, err := s1.ListRuns(ctx, store.RunFilter{TenantID: tenant, Limit: 3, After: after})
		if err != nil {
			t.Fatal(err)
		}
		if page == 0 {
			// Other runs arrive while the next pages are read: all newer
			// than the cursor, whenever they land.
			for i := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					f := NewFixture()
					f.Meta.TenantID, f.Meta.PlanID = tenant, "p"
					if _, err := s2.BootstrapRun(ctx, f.Meta, []engine.RunEventWrite{f.Event(engine.RunQueued, "", 1)}); err != nil {
						errs <- fmt.Errorf("concurrent run %d: %w", i, err)
					}
				}()
			}
		}
		paged = append(paged, ids(got)...)
		if len(got) < 3 {
			break
		}
		c := got[len(got)-1].Cursor()
		after = &c
		if page > 5 {
			t.Fatalf("paging does not end: %v", paged)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if want := ids(before); !slices.Equal(paged, want) {
		t.Fatalf("pages %v, want the %d runs present when paging began, once each, in order %v", paged, len(want), want)
	}
	now, err := s1.ListRuns(ctx, store.RunFilter{TenantID: tenant})
	if err != nil || len(now) != 11 {
		t.Fatalf("runs after: %d %v, want 11", len(now), err)
	}
}

// testHistoryRequest: a run started from a queue request is listed with
// the request's schedule and is queued from the request's enqueue time
// (the queue wait includes the time before a worker claimed it).
func testHistoryRequest(t *testing.T, b Backend) {
	if b.Fresh == nil {
		t.Fatal("storetest.Backend.Fresh is nil")
	}
	st := b.Fresh(t)(t)
	t.Cleanup(func() { st.Close() })
	qs, ok := st.(QueueStore)
	if !ok {
		t.Fatalf("%T does not implement storetest.QueueStore", st)
	}
	r := request("p", "hourly-1", 0)
	r.Schedule = "hourly"
	r = enqueue(t, qs, r)
	claimed, ok := claimRequest(t, qs, "w1", queue.ClaimLimits{})
	if !ok || claimed.RequestID != r.RequestID {
		t.Fatalf("claim: %v %+v", ok, claimed)
	}
	f := NewFixture()
	f.Meta.TenantID, f.Meta.ProjectID, f.Meta.EnvironmentID = r.TenantID, r.ProjectID, r.EnvironmentID
	f.Meta.PlanID, f.Meta.PlanVersion, f.Meta.RunRequestID = r.PlanID, r.PlanVersion, r.RunRequestID
	if err := qs.SetRequestRun(ctx, r.RequestID, "w1", f.Meta.RunID); err != nil {
		t.Fatal(err)
	}
	// The worker records who claimed it, not the schedule: the schedule's
	// name comes from the request.
	q := f.Event(engine.RunQueued, "", 1)
	q.Payload = json.RawMessage(`{"triggerSource":"queue","triggeredBy":"w1"}`)
	if _, err := st.BootstrapRun(ctx, f.Meta, []engine.RunEventWrite{q}); err != nil {
		t.Fatal(err)
	}
	got, err := st.ListRuns(ctx, store.RunFilter{TenantID: r.TenantID, Schedule: "hourly"})
	if err != nil || len(got) != 1 {
		t.Fatalf("runs of schedule hourly: %+v %v", got, err)
	}
	if g := got[0]; g.RunID != f.Meta.RunID || g.Trigger != store.TriggerQueue || g.Schedule != "hourly" || !g.QueuedAt.Equal(r.EnqueuedAt) {
		t.Fatalf("run %+v, want schedule hourly, queued at the request's %v", g, r.EnqueuedAt)
	}
}
