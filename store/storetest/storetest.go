// Package storetest is the conformance suite every state store backend
// passes: the append authority of RunEvents v2.0.1 (bootstrap, dedup,
// runSeq, outbox, validation, Layer 2), reads, the event-id registry,
// alerts, signals and leases. A backend's test calls Run.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store"
)

// Backend is one database under test.
type Backend struct {
	// Open returns a new, independent handle (its own connections) on the
	// same database; the suite opens two for the concurrency case and
	// closes what it opens.
	Open func(t *testing.T) store.Store
	// Advance moves the store's clock forward, or is nil when the backend's
	// clock cannot be controlled (lease-expiry cases are then skipped).
	Advance func(d time.Duration)
	// Writers and AppendsPerWriter size the concurrency case
	// (defaults 8 and 25).
	Writers, AppendsPerWriter int
	// Fresh returns an opener of handles on a new, empty database: the run
	// queue cases claim whatever is claimable, so each gets its own.
	Fresh func(t *testing.T) func(t *testing.T) store.Store
}

// OutboxCounter is implemented by backends so the suite can check that the
// outbox holds exactly the appended events.
type OutboxCounter interface {
	CountOutbox(ctx context.Context, runID string) (int, error)
}

// Run runs the suite.
func Run(t *testing.T, b Backend) {
	cases := []struct {
		name string
		fn   func(*testing.T, Backend)
	}{
		{"BootstrapWritesRunAndFirstEvents", testBootstrap},
		{"BootstrapTwiceIsRunAlreadyExists", testBootstrapTwice},
		{"BootstrapWithInvalidEventWritesNothing", testBootstrapInvalid},
		{"BootstrapBindsEventIDs", testBootstrapBindsEventIDs},
		{"RunQueuedSelectionIsCheckedAndKept", testQueuedSelection},
		{"AppendUnknownRunIsRunNotFound", testAppendUnknownRun},
		{"DuplicateAppendReturnsStoredMetadata", testDuplicate},
		{"DuplicatesWithinOneBatch", testBatchDuplicates},
		{"InvalidEnvelopesWriteNothing", testInvalidEnvelopes},
		{"EventOfAnotherPlanIsRefused", testForeignPlan},
		{"InvalidTransitionIsRejectedDeterministically", testLayer2},
		{"RoundTripFidelity", testFidelity},
		{"ListEventsPaging", testPaging},
		{"ListStepEventsOfOneStep", testStepEvents},
		{"ConcurrentWritersOnTwoHandles", testConcurrent},
		{"EventIDRegistryIsStable", testRegistry},
		{"AlertsAreIdempotent", testAlerts},
		{"Signals", testSignals},
		{"Leases", testLeases},
		{"FencedLeases", testFence},
		{"RunsAndProviderRef", testRuns},
		{"LiveSnapshots", testSnapshots},
		{"GetLease", testGetLease},
		{"PulseRenewsHeldLeasesAndFetchesSignals", testPulse},
		{"PlanBundles", testPlanBundles},
	}
	cases = append(append(append(cases, deliveryCases...), queueCases...), historyCases...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, b) })
	}
}

var ctx = context.Background()

// Fixture builds events for one run with valid envelopes.
type Fixture struct {
	Meta  engine.RunMetadata
	clock time.Time
}

// NewFixture returns a fixture for a fresh run id.
func NewFixture() *Fixture {
	id := uuid.NewString()
	return &Fixture{
		Meta: engine.RunMetadata{
			RunID: id, TenantID: "acme", ProjectID: "shop", EnvironmentID: "dev",
			PlanID: "shop_plan", PlanVersion: "7", PlanSHA256: "ab12", TargetAdapter: "local", RunRequestID: "req-" + id[:8],
		},
		clock: time.Date(2026, 4, 1, 8, 0, 0, 0, time.UTC),
	}
}

// Event returns a valid event of the fixture's run.
func (f *Fixture) Event(t engine.EventType, step string, attempt int) engine.RunEventWrite {
	f.clock = f.clock.Add(1234567 * time.Nanosecond)
	e := engine.RunEventWrite{
		EventID: uuid.NewString(), EventType: t, EmittedAt: f.clock, RunID: f.Meta.RunID,
		TenantID: f.Meta.TenantID, ProjectID: f.Meta.ProjectID, EnvironmentID: f.Meta.EnvironmentID,
		PlanID: f.Meta.PlanID, PlanVersion: f.Meta.PlanVersion, EngineAttemptID: 1, LogicalAttemptID: attempt, StepID: step,
	}
	switch t {
	case engine.StepFailed, engine.RunFailed:
		e.Payload = json.RawMessage(`{"error":{"code":"STEP_FAILED","message":"it's \"broken\"\nline 2","retryable":false}}`)
	case engine.StepSkipped:
		e.Payload = json.RawMessage(`{"reason":"dependency failed"}`)
	case engine.StepCompleted:
		e.Payload = json.RawMessage(`{"rowsAffected":42,"queryIds":["q-1"],"outputs":{"relation":"orders","unicode":"ünïcødé ✓"}}`)
	}
	k, err := engine.KeyOf(e).IdempotencyKey()
	if err != nil {
		panic(err)
	}
	e.IdempotencyKey = k
	return e
}

// Bootstrap creates the fixture's run with RunQueued and RunStarted.
func (f *Fixture) Bootstrap(t testing.TB, s store.Store) {
	t.Helper()
	if _, err := s.BootstrapRun(ctx, f.Meta, []engine.RunEventWrite{f.Event(engine.RunQueued, "", 1)}); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{f.Event(engine.RunStarted, "", 1)}); err != nil {
		t.Fatalf("RunStarted: %v", err)
	}
}

func open(t *testing.T, b Backend) store.Store {
	t.Helper()
	s := b.Open(t)
	t.Cleanup(func() { s.Close() })
	return s
}

func events(t *testing.T, s store.Store, runID string) []engine.RunEventRecord {
	t.Helper()
	recs, err := s.ListEvents(ctx, runID, 0, 0)
	if err != nil {
		t.Fatalf("ListEvents: %v", err)
	}
	return recs
}

func outbox(t *testing.T, s store.Store, runID string) int {
	t.Helper()
	oc, ok := s.(OutboxCounter)
	if !ok {
		t.Fatalf("%T does not implement storetest.OutboxCounter", s)
	}
	n, err := oc.CountOutbox(ctx, runID)
	if err != nil {
		t.Fatalf("CountOutbox: %v", err)
	}
	return n
}

func wantCode(t *testing.T, err error, code engine.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s", code)
	}
	if !errors.Is(err, &engine.Error{Code: code}) {
		t.Fatalf("error %v, want code %s", err, code)
	}
}

func testBootstrap(t *testing.T, b Backend) {
	s := open(t, b)
	f := NewFixture()
	q := f.Event(engine.RunQueued, "", 1)
	res, err := s.BootstrapRun(ctx, f.Meta, []engine.RunEventWrite{q})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Appended) != 1 || res.Appended[0].RunSeq != 1 || res.Appended[0].EventID != q.EventID || res.Appended[0].PersistedAt.IsZero() {
		t.Fatalf("bootstrap result %+v", res)
	}
	got, err := s.GetRun(ctx, f.Meta.RunID)
	if err != nil {
		t.Fatal(err)
	}
	want := f.Meta
	want.CreatedAt = got.CreatedAt
	if !reflect.DeepEqual(got, want) || got.CreatedAt.IsZero() {
		t.Fatalf("metadata %+v, want %+v", got, want)
	}
	if n := outbox(t, s, f.Meta.RunID); n != 1 {
		t.Fatalf("outbox %d, want 1", n)
	}
}

func testBootstrapTwice(t *testing.T, b Backend) {
	s := open(t, b)
	f := NewFixture()
	f.Bootstrap(t, s)
	before := events(t, s, f.Meta.RunID)
	other := f.Meta
	other.PlanSHA256 = "different"
	_, err := s.BootstrapRun(ctx, other, []engine.RunEventWrite{f.Event(engine.RunQueued, "", 1)})
	wantCode(t, err, engine.CodeRunAlreadyExists)
	got, err := s.GetRun(ctx, f.Meta.RunID)
	if err != nil || got.PlanSHA256 != f.Meta.PlanSHA256 {
		t.Fatalf("first run changed: %+v %v", got, err)
	}
	if after := events(t, s, f.Meta.RunID); !reflect.DeepEqual(before, after) {
		t.Fatalf("events changed by the failed bootstrap:\n%v\n%v", before, after)
	}
	if n := outbox(t, s, f.Meta.RunID); n != 2 {
		t.Fatalf("outbox %d, want 2", n)
	}
}

func testBootstrapInvalid(t *testing.T, b Backend) {
	s := open(t, b)
	f := NewFixture()
	good := f.Event(engine.RunQueued, "", 1)
	bad := f.Event(engine.StepStarted, "", 1) // step event without a stepId
	_, err := s.BootstrapRun(ctx, f.Meta, []engine.RunEventWrite{good, bad})
	wantCode(t, err, engine.CodeSchemaValidationFailed)
	_, err = s.GetRun(ctx, f.Meta.RunID)
	wantCode(t, err, engine.CodeRunNotFound)
	if recs := events(t, s, f.Meta.RunID); len(recs) != 0 {
		t.Fatalf("%d events written", len(recs))
	}
	if n := outbox(t, s, f.Meta.RunID); n != 0 {
		t.Fatalf("%d outbox rows written", n)
	}
	// The run can still be bootstrapped properly afterwards.
	if _, err := s.BootstrapRun(ctx, f.Meta, []engine.RunEventWrite{good}); err != nil {
		t.Fatalf("bootstrap after a refused one: %v", err)
	}
}

// testBootstrapBindsEventIDs: BootstrapRun binds its events' eventIds in
// the EventIdRegistry in its own transaction (RunEvents §2.5.1), so a
// producer needs no reservation before it: afterwards ReserveEventIDs of
// RunQueued's key answers the bootstrap's eventId, and a key reserved
// before the bootstrap keeps its reserved id, in the log too.
func testBootstrapBindsEventIDs(t *testing.T, b Backend) {
	cases := []struct {
		name         string
		reserveFirst bool
	}{
		{name: "no reservation: the event's own id is bound"},
		{name: "reserved before: the reserved id is kept", reserveFirst: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := open(t, b)
			f := NewFixture()
			q := f.Event(engine.RunQueued, "", 1)
			want := q.EventID
			if c.reserveFirst {
				want = uuid.NewString()
				got, err := s.ReserveEventIDs(ctx, f.Meta.RunID, map[string]string{q.IdempotencyKey: want})
				if err != nil || got[q.IdempotencyKey] != want {
					t.Fatalf("reservation before bootstrap %v %v", got, err)
				}
			}
			res, err := s.BootstrapRun(ctx, f.Meta, []engine.RunEventWrite{q})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Appended) != 1 || res.Appended[0].EventID != want {
				t.Fatalf("bootstrap appended %+v, want eventId %s", res.Appended, want)
			}
			if recs := events(t, s, f.Meta.RunID); len(recs) != 1 || recs[0].EventID != want {
				t.Fatalf("log holds %+v, want RunQueued with eventId %s", recs, want)
			}
			// From this handle and from a restarted producer's.
			for _, h := range []store.Store{s, open(t, b)} {
				got, err := h.ReserveEventIDs(ctx, f.Meta.RunID, map[string]string{q.IdempotencyKey: uuid.NewString()})
				if err != nil || got[q.IdempotencyKey] != want {
					t.Fatalf("reservation after bootstrap %v %v, want %s", got, err, want)
				}
			}
		})
	}
}

// testQueuedSelection: RunQueued's selection (the steps a selected or
// retried run executes) is checked against its schema and comes back from
// the log as written, since the runner reads it from there.
func testQueuedSelection(t *testing.T, b Backend) {
	s := open(t, b)
	f := NewFixture()
	bad := f.Event(engine.RunQueued, "", 1)
	bad.Payload = json.RawMessage(`{"selection": {"select": ["+orders"], "steps": []}}`)
	_, err := s.BootstrapRun(ctx, f.Meta, []engine.RunEventWrite{bad})
	wantCode(t, err, engine.CodeSchemaValidationFailed)
	if recs := events(t, s, f.Meta.RunID); len(recs) != 0 {
		t.Fatalf("%d events written", len(recs))
	}
	good := f.Event(engine.RunQueued, "", 1)
	good.Payload = json.RawMessage(`{"planRef": {"uri": "plan.yaml", "sha256": "ab12"}, "parentRunId": "run-0",
		"selection": {"select": ["+orders", "tag:nightly"], "exclude": ["stg_x"], "indirectSelection": "buildable", "steps": ["seed.raw", "model.orders"]}}`)
	if _, err := s.BootstrapRun(ctx, f.Meta, []engine.RunEventWrite{good}); err != nil {
		t.Fatal(err)
	}
	q, err := engine.QueuedRequest(events(t, s, f.Meta.RunID))
	if err != nil {
		t.Fatal(err)
	}
	want := engine.RunQueuedRequest{PlanRef: engine.PlanRef{URI: "plan.yaml", SHA256: "ab12"}, ParentRunID: "run-0",
		Selection: &engine.Selection{Select: []string{"+orders", "tag:nightly"}, Exclude: []string{"stg_x"}, IndirectSelection: "buildable", Steps: []string{"seed.raw", "model.orders"}}}
	if !reflect.DeepEqual(q, want) {
		t.Fatalf("read back %+v, want %+v", q, want)
	}
}

func testAppendUnknownRun(t *testing.T, b Backend) {
	s := open(t, b)
	f := NewFixture()
	_, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{f.Event(engine.RunStarted, "", 1)})
	wantCode(t, err, engine.CodeRunNotFound)
	_, err = s.GetRun(ctx, f.Meta.RunID)
	wantCode(t, err, engine.CodeRunNotFound)
}

func testDuplicate(t *testing.T, b Backend) {
	s := open(t, b)
	f := NewFixture()
	f.Bootstrap(t, s)
	e := f.Event(engine.StepStarted, "model.orders", 1)
	first, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{e})
	if err != nil || len(first.Appended) != 1 {
		t.Fatalf("first append: %+v %v", first, err)
	}
	retry := e
	retry.EventID = uuid.NewString() // a producer that lost its registry
	retry.EngineAttemptID = 2
	retry.EmittedAt = retry.EmittedAt.Add(time.Second)
	if b.Advance != nil {
		b.Advance(time.Second)
	}
	again, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{retry})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Appended) != 0 || len(again.Deduped) != 1 {
		t.Fatalf("retry result %+v", again)
	}
	d, a := again.Deduped[0], first.Appended[0]
	if d.EventID != a.EventID || d.RunSeq != a.RunSeq || !d.PersistedAt.Equal(a.PersistedAt) {
		t.Fatalf("deduped %s/%d/%s, want stored %s/%d/%s", d.EventID, d.RunSeq, d.PersistedAt, a.EventID, a.RunSeq, a.PersistedAt)
	}
	if recs := events(t, s, f.Meta.RunID); len(recs) != 3 {
		t.Fatalf("%d events, want 3", len(recs))
	}
	if n := outbox(t, s, f.Meta.RunID); n != 3 {
		t.Fatalf("outbox %d, want 3", n)
	}
}

func testBatchDuplicates(t *testing.T, b Backend) {
	s := open(t, b)
	f := NewFixture()
	f.Bootstrap(t, s)
	start := f.Event(engine.StepStarted, "a", 1)
	old := f.Event(engine.StepStarted, "b", 1)
	if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{old}); err != nil {
		t.Fatal(err)
	}
	res, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{start, old, start, f.Event(engine.StepCompleted, "a", 1)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Appended) != 2 || len(res.Deduped) != 2 {
		t.Fatalf("appended %d deduped %d, want 2 and 2", len(res.Appended), len(res.Deduped))
	}
	if res.Appended[0].RunSeq != 4 || res.Appended[1].RunSeq != 5 {
		t.Fatalf("runSeqs %d,%d, want 4,5 (no gaps produced)", res.Appended[0].RunSeq, res.Appended[1].RunSeq)
	}
	for _, d := range res.Deduped {
		if d.IdempotencyKey == start.IdempotencyKey && d.RunSeq != 4 {
			t.Fatalf("in-batch duplicate reports runSeq %d, want 4", d.RunSeq)
		}
	}
	if n := outbox(t, s, f.Meta.RunID); n != 5 {
		t.Fatalf("outbox %d, want 5", n)
	}
}

func testInvalidEnvelopes(t *testing.T, b Backend) {
	s := open(t, b)
	f := NewFixture()
	f.Bootstrap(t, s)
	rekey := func(e engine.RunEventWrite) engine.RunEventWrite {
		if k, err := engine.KeyOf(e).IdempotencyKey(); err == nil {
			e.IdempotencyKey = k
		}
		return e
	}
	cases := map[string]func() engine.RunEventWrite{
		"missing tenant":      func() engine.RunEventWrite { e := f.Event(engine.StepStarted, "a", 1); e.TenantID = ""; return e },
		"stepId on run event": func() engine.RunEventWrite { return rekey(withStep(f.Event(engine.RunPaused, "", 1), "a")) },
		"no stepId on step":   func() engine.RunEventWrite { return f.Event(engine.StepStarted, "", 1) },
		"pipe in stepId":      func() engine.RunEventWrite { return rekey(withStep(f.Event(engine.StepStarted, "a", 1), "a|b")) },
		"bad UUID":            func() engine.RunEventWrite { e := f.Event(engine.StepStarted, "a", 1); e.EventID = "123"; return e },
		"non-UTC time": func() engine.RunEventWrite {
			e := f.Event(engine.StepStarted, "a", 1)
			e.EmittedAt = e.EmittedAt.In(time.FixedZone("X", 7200))
			return e
		},
		"wrong key": func() engine.RunEventWrite {
			e := f.Event(engine.StepStarted, "a", 1)
			e.IdempotencyKey = f.Event(engine.StepStarted, "z", 1).IdempotencyKey
			return e
		},
		"failure without error": func() engine.RunEventWrite { e := f.Event(engine.StepFailed, "a", 1); e.Payload = nil; return e },
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			good := f.Event(engine.StepStarted, "model.good", 1)
			_, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{good, mk()})
			wantCode(t, err, engine.CodeSchemaValidationFailed)
		})
	}
	if recs := events(t, s, f.Meta.RunID); len(recs) != 2 {
		t.Fatalf("%d events after refused batches, want 2", len(recs))
	}
	if n := outbox(t, s, f.Meta.RunID); n != 2 {
		t.Fatalf("outbox %d, want 2", n)
	}
}

func withStep(e engine.RunEventWrite, step string) engine.RunEventWrite {
	e.StepID = step
	return e
}

func testForeignPlan(t *testing.T, b Backend) {
	s := open(t, b)
	f := NewFixture()
	f.Bootstrap(t, s)
	e := f.Event(engine.StepStarted, "a", 1)
	e.PlanVersion = "8"
	k, _ := engine.KeyOf(e).IdempotencyKey()
	e.IdempotencyKey = k
	_, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{e})
	wantCode(t, err, engine.CodeSchemaValidationFailed)
	other := NewFixture()
	_, err = s.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{other.Event(engine.StepStarted, "a", 1)})
	wantCode(t, err, engine.CodeSchemaValidationFailed)
}

func testLayer2(t *testing.T, b Backend) {
	s := open(t, b)
	f := NewFixture()
	f.Bootstrap(t, s)
	bad := []engine.RunEventWrite{f.Event(engine.StepStarted, "a", 1), f.Event(engine.StepCompleted, "b", 1)}
	_, err1 := s.AppendAndEnqueue(ctx, f.Meta.RunID, bad)
	wantCode(t, err1, engine.CodeInvalidTransition)
	_, err2 := s.AppendAndEnqueue(ctx, f.Meta.RunID, bad)
	wantCode(t, err2, engine.CodeInvalidTransition)
	var e1, e2 *engine.Error
	errors.As(err1, &e1)
	errors.As(err2, &e2)
	if e1.Msg != e2.Msg || !reflect.DeepEqual(e1.Meta, e2.Meta) {
		t.Fatalf("retry got a different rejection:\n%v %v\n%v %v", e1, e1.Meta, e2, e2.Meta)
	}
	if recs := events(t, s, f.Meta.RunID); len(recs) != 2 {
		t.Fatalf("%d events, want 2 (nothing written)", len(recs))
	}
	// A valid follow-up still appends, so the run is not wedged.
	if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, bad[:1]); err != nil {
		t.Fatal(err)
	}
	// Terminal runs are immutable.
	done := []engine.RunEventWrite{f.Event(engine.StepCompleted, "a", 1), f.Event(engine.RunCompleted, "", 1)}
	if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, done); err != nil {
		t.Fatal(err)
	}
	_, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{f.Event(engine.RunFailed, "", 1)})
	wantCode(t, err, engine.CodeInvalidTransition)
}

func testFidelity(t *testing.T, b Backend) {
	s := open(t, b)
	f := NewFixture()
	f.Bootstrap(t, s)
	in := []engine.RunEventWrite{
		f.Event(engine.StepStarted, "model.ünïcødé", 1),
		f.Event(engine.StepFailed, "model.ünïcødé", 1),
		f.Event(engine.StepStarted, "model.ünïcødé", 2),
		f.Event(engine.StepCompleted, "model.ünïcødé", 2),
		f.Event("StepDelayed", "", 3),
	}
	in[3].EngineAttemptID = 3
	k, _ := engine.KeyOf(in[3]).IdempotencyKey()
	in[3].IdempotencyKey = k
	if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, in); err != nil {
		t.Fatal(err)
	}
	recs := events(t, s, f.Meta.RunID)[2:]
	if len(recs) != len(in) {
		t.Fatalf("%d records, want %d", len(recs), len(in))
	}
	for i, r := range recs {
		w := in[i]
		if r.RunSeq != int64(i+3) {
			t.Errorf("%d: runSeq %d", i, r.RunSeq)
		}
		if !r.EmittedAt.Equal(w.EmittedAt) || r.EmittedAt.Location() != time.UTC || r.PersistedAt.Location() != time.UTC {
			t.Errorf("%d: emittedAt %v, want %v (UTC, to the nanosecond)", i, r.EmittedAt, w.EmittedAt)
		}
		if !jsonEqual(r.Payload, w.Payload) {
			t.Errorf("%d: payload %s, want %s", i, r.Payload, w.Payload)
		}
		r.EmittedAt, w.EmittedAt = time.Time{}, time.Time{}
		r.Payload, w.Payload = nil, nil
		if !reflect.DeepEqual(r.RunEventWrite, w) {
			t.Errorf("%d: round trip\n got %+v\nwant %+v", i, r.RunEventWrite, w)
		}
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// testStepEvents: a step's events, in runSeq order, and no other step's
// or run's.
func testStepEvents(t *testing.T, b Backend) {
	s := open(t, b)
	f, other := NewFixture(), NewFixture()
	f.Bootstrap(t, s)
	other.Bootstrap(t, s)
	batch := []engine.RunEventWrite{
		f.Event(engine.StepStarted, "model.a", 1), f.Event(engine.StepStarted, "model.b", 1),
		f.Event(engine.StepFailed, "model.a", 1), f.Event(engine.StepCompleted, "model.b", 1),
		f.Event(engine.StepStarted, "model.a", 2), f.Event(engine.StepCompleted, "model.a", 2),
	}
	if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, batch); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendAndEnqueue(ctx, other.Meta.RunID, []engine.RunEventWrite{other.Event(engine.StepStarted, "model.a", 1)}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		step string
		want []string // type@runSeq
	}{
		{"model.a", []string{"StepStarted@3", "StepFailed@5", "StepStarted@7", "StepCompleted@8"}},
		{"model.b", []string{"StepStarted@4", "StepCompleted@6"}},
		{"model.none", nil},
		{"", nil}, // run-level events have no step
	}
	for _, c := range cases {
		evs, err := s.ListStepEvents(ctx, f.Meta.RunID, c.step)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range evs {
			if e.RunID != f.Meta.RunID || e.StepID != c.step {
				t.Fatalf("step %q: an event of run %s step %q", c.step, e.RunID, e.StepID)
			}
			got = append(got, fmt.Sprintf("%s@%d", e.EventType, e.RunSeq))
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("step %q: %v, want %v", c.step, got, c.want)
		}
	}
	// The records are the ones ListEvents returns.
	all := events(t, s, f.Meta.RunID)
	a, _ := s.ListStepEvents(ctx, f.Meta.RunID, "model.a")
	if len(a) != 4 || a[1].EventID != all[4].EventID || string(a[1].Payload) != string(all[4].Payload) || !a[1].PersistedAt.Equal(all[4].PersistedAt) {
		t.Fatalf("a step event differs from the log's: %+v vs %+v", a[1], all[4])
	}
}

func testPaging(t *testing.T, b Backend) {
	s := open(t, b)
	f := NewFixture()
	f.Bootstrap(t, s)
	var batch []engine.RunEventWrite
	for i := range 10 {
		batch = append(batch, f.Event(engine.StepStarted, fmt.Sprintf("m%02d", i), 1))
	}
	if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, batch); err != nil {
		t.Fatal(err)
	}
	var got []int64
	after := int64(0)
	for {
		page, err := s.ListEvents(ctx, f.Meta.RunID, after, 5)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 5 {
			t.Fatalf("page of %d > limit 5", len(page))
		}
		for _, r := range page {
			got = append(got, r.RunSeq)
		}
		if len(page) < 5 {
			break
		}
		after = page[len(page)-1].RunSeq
	}
	if len(got) != 12 || !sort.SliceIsSorted(got, func(i, j int) bool { return got[i] < got[j] }) || got[0] != 1 || got[11] != 12 {
		t.Fatalf("paged seqs %v", got)
	}
	page, err := s.ListEvents(ctx, f.Meta.RunID, 12, 5)
	if err != nil || len(page) != 0 {
		t.Fatalf("past the end: %v %v", page, err)
	}
	if page, _ := s.ListEvents(ctx, "no-such-run", 0, 0); len(page) != 0 {
		t.Fatalf("unknown run listed %d events", len(page))
	}
}

// testConcurrent: two handles × N goroutines append overlapping event sets.
func testConcurrent(t *testing.T, b Backend) {
	writers, per := b.Writers, b.AppendsPerWriter
	if writers <= 0 {
		writers = 8
	}
	if per <= 0 {
		per = 25
	}
	s1, s2 := open(t, b), open(t, b)
	f := NewFixture()
	f.Bootstrap(t, s1)
	// A shared pool of step events; each writer appends overlapping slices
	// of it, so most keys are offered by several writers at once.
	var pool []engine.RunEventWrite
	for i := range per + writers {
		pool = append(pool, f.Event(engine.StepStarted, fmt.Sprintf("model.m%03d", i), 1))
	}
	var mu sync.Mutex
	var appended []engine.RunEventRecord
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		s := s1
		if w%2 == 1 {
			s = s2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				lo := (w + i) % len(pool)
				hi := min(lo+3, len(pool))
				res, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, pool[lo:hi])
				if err != nil {
					errs <- fmt.Errorf("writer %d append %d: %w", w, i, err)
					return
				}
				for j := 1; j < len(res.Appended); j++ {
					if res.Appended[j].RunSeq <= res.Appended[j-1].RunSeq {
						errs <- fmt.Errorf("writer %d: appended runSeqs not increasing: %d then %d", w, res.Appended[j-1].RunSeq, res.Appended[j].RunSeq)
						return
					}
				}
				mu.Lock()
				appended = append(appended, res.Appended...)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	recs := events(t, s2, f.Meta.RunID)
	keys := map[string]bool{}
	seqs := map[int64]bool{}
	for i, r := range recs {
		if keys[r.IdempotencyKey] {
			t.Fatalf("idempotency key stored twice: %s", r.IdempotencyKey)
		}
		keys[r.IdempotencyKey] = true
		if seqs[r.RunSeq] {
			t.Fatalf("runSeq %d stored twice", r.RunSeq)
		}
		seqs[r.RunSeq] = true
		if i > 0 && (r.RunSeq <= recs[i-1].RunSeq || r.PersistedAt.Before(recs[i-1].PersistedAt)) {
			t.Fatalf("runSeq %d persisted at %s after runSeq %d at %s: not in commit order", r.RunSeq, r.PersistedAt, recs[i-1].RunSeq, recs[i-1].PersistedAt)
		}
	}
	for _, e := range pool {
		if !keys[e.IdempotencyKey] {
			t.Fatalf("event of step %s lost", e.StepID)
		}
	}
	if len(appended) != len(pool) {
		t.Fatalf("writers saw %d appended, %d distinct events exist", len(appended), len(pool))
	}
	if n := outbox(t, s1, f.Meta.RunID); n != len(recs) {
		t.Fatalf("outbox %d rows, log %d events", n, len(recs))
	}
}

func testRegistry(t *testing.T, b Backend) {
	s := open(t, b)
	f := NewFixture()
	f.Bootstrap(t, s)
	e := f.Event(engine.StepStarted, "a", 1)
	first, err := s.ReserveEventIDs(ctx, f.Meta.RunID, map[string]string{e.IdempotencyKey: e.EventID})
	if err != nil || first[e.IdempotencyKey] != e.EventID {
		t.Fatalf("first reservation %v %v", first, err)
	}
	s2 := open(t, b) // a restarted producer
	again, err := s2.ReserveEventIDs(ctx, f.Meta.RunID, map[string]string{e.IdempotencyKey: uuid.NewString()})
	if err != nil || again[e.IdempotencyKey] != e.EventID {
		t.Fatalf("reservation after restart %v %v, want %s", again, err, e.EventID)
	}
	if _, err := s2.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{e}); err != nil {
		t.Fatal(err)
	}
	after, err := s.ReserveEventIDs(ctx, f.Meta.RunID, map[string]string{e.IdempotencyKey: uuid.NewString()})
	if err != nil || after[e.IdempotencyKey] != e.EventID {
		t.Fatalf("reservation of a persisted key %v %v, want %s", after, err, e.EventID)
	}
}

func testAlerts(t *testing.T, b Backend) {
	s := open(t, b)
	f := NewFixture()
	a := engine.Alert{Key: "INVALID_TRANSITION:" + f.Meta.RunID + ":e1", Code: engine.CodeInvalidTransition, Severity: engine.SeverityP2,
		RunID: f.Meta.RunID, TenantID: "acme", Message: "StepCompleted would move step a from PENDING to SUCCESS", Payload: json.RawMessage(`{"runSeq":3}`)}
	for i, want := range []bool{true, false, false} {
		got, err := s.RecordAlert(ctx, a)
		if err != nil || got != want {
			t.Fatalf("record #%d: inserted=%v err=%v, want %v", i+1, got, err, want)
		}
	}
	list, err := s.ListAlerts(ctx, f.Meta.RunID)
	if err != nil || len(list) != 1 {
		t.Fatalf("alerts %v %v", list, err)
	}
	if list[0].Code != a.Code || list[0].Message != a.Message || !jsonEqual(list[0].Payload, a.Payload) || list[0].CreatedAt.IsZero() {
		t.Fatalf("stored alert %+v", list[0])
	}
}

func testSignals(t *testing.T, b Backend) {
	s := open(t, b)
	f := NewFixture()
	f.Bootstrap(t, s)
	id := uuid.NewString()
	p, err := s.SendSignal(ctx, engine.Signal{SignalID: id, RunID: f.Meta.RunID, Type: engine.SignalPause, Reason: "maintenance"})
	if err != nil || p.Seq != 1 || p.CreatedAt.IsZero() {
		t.Fatalf("pause: %+v %v", p, err)
	}
	dup, err := s.SendSignal(ctx, engine.Signal{SignalID: id, RunID: f.Meta.RunID, Type: engine.SignalPause})
	if err != nil || dup.Seq != 1 {
		t.Fatalf("resend: %+v %v", dup, err)
	}
	r, err := s.SendSignal(ctx, engine.Signal{SignalID: uuid.NewString(), RunID: f.Meta.RunID, Type: engine.SignalRetryStep, StepID: "model.a"})
	if err != nil || r.Seq != 2 {
		t.Fatalf("retry-step: %+v %v", r, err)
	}
	list, err := s.ListSignals(ctx, f.Meta.RunID, 0)
	if err != nil || len(list) != 2 || list[0].Type != engine.SignalPause || list[1].StepID != "model.a" || list[0].Reason != "maintenance" {
		t.Fatalf("signals %+v %v", list, err)
	}
	if list, _ := s.ListSignals(ctx, f.Meta.RunID, 1); len(list) != 1 || list[0].Seq != 2 {
		t.Fatalf("signals after 1: %+v", list)
	}
	_, err = s.SendSignal(ctx, engine.Signal{SignalID: uuid.NewString(), RunID: "no-such-run", Type: engine.SignalCancel})
	wantCode(t, err, engine.CodeRunNotFound)
	_, err = s.SendSignal(ctx, engine.Signal{SignalID: uuid.NewString(), RunID: f.Meta.RunID, Type: "EXPLODE"})
	wantCode(t, err, engine.CodeInvalidArgument)
}

func testLeases(t *testing.T, b Backend) {
	s := open(t, b)
	f := NewFixture()
	f.Bootstrap(t, s)
	run := f.Meta.RunID
	if err := s.AcquireLease(ctx, run, "worker-a", time.Minute); err != nil {
		t.Fatal(err)
	}
	wantCode(t, s.AcquireLease(ctx, run, "worker-b", time.Minute), engine.CodeLeaseHeld)
	if err := s.AcquireLease(ctx, run, "worker-a", time.Minute); err != nil {
		t.Fatalf("renewal by the holder: %v", err)
	}
	if b.Advance != nil {
		b.Advance(2 * time.Minute)
		if err := s.AcquireLease(ctx, run, "worker-b", time.Minute); err != nil {
			t.Fatalf("takeover after expiry: %v", err)
		}
		wantCode(t, s.AcquireLease(ctx, run, "worker-a", time.Minute), engine.CodeLeaseHeld)
		if err := s.ReleaseLease(ctx, run, "worker-b"); err != nil {
			t.Fatal(err)
		}
	} else {
		if err := s.ReleaseLease(ctx, run, "worker-a"); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AcquireLease(ctx, run, "worker-c", time.Minute); err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
}

// testFence: the fence stays while the owner renews and grows with every
// new owner; an append by a lease that is no longer the run's is LEASE_LOST
// and writes nothing, events and outbox alike.
func testFence(t *testing.T, b Backend) {
	s := open(t, b)
	f := NewFixture()
	f.Bootstrap(t, s)
	run := f.Meta.RunID
	_, err := s.AppendFenced(ctx, engine.Lease{RunID: run, Owner: "worker-a", Fence: 1}, []engine.RunEventWrite{f.Event(engine.StepStarted, "sql.x", 1)})
	wantCode(t, err, engine.CodeLeaseLost) // never acquired
	a, err := s.AcquireFencedLease(ctx, run, "worker-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := s.AcquireFencedLease(ctx, run, "worker-a", time.Minute)
	if err != nil || renewed.Fence != a.Fence || renewed.Owner != "worker-a" {
		t.Fatalf("renewal %+v %v: the fence must stay %d", renewed, err, a.Fence)
	}
	if _, err := s.AppendFenced(ctx, a, []engine.RunEventWrite{f.Event(engine.StepStarted, "sql.a", 1)}); err != nil {
		t.Fatalf("append by the holder: %v", err)
	}
	_, err = s.AcquireFencedLease(ctx, run, "worker-b", time.Minute)
	wantCode(t, err, engine.CodeLeaseHeld)

	// The lease passes to worker-b: by expiry when the clock can be moved,
	// else by release.
	if b.Advance != nil {
		b.Advance(2 * time.Minute)
	} else if err := s.ReleaseLease(ctx, run, "worker-a"); err != nil {
		t.Fatal(err)
	}
	bl, err := s.AcquireFencedLease(ctx, run, "worker-b", time.Minute)
	if err != nil || bl.Fence != a.Fence+1 {
		t.Fatalf("takeover %+v %v: want fence %d", bl, err, a.Fence+1)
	}
	nEvents, nOutbox := len(events(t, s, run)), outbox(t, s, run)
	_, err = s.AppendFenced(ctx, a, []engine.RunEventWrite{f.Event(engine.StepCompleted, "sql.a", 1), f.Event(engine.StepStarted, "sql.b", 1)})
	wantCode(t, err, engine.CodeLeaseLost)
	if got := len(events(t, s, run)); got != nEvents {
		t.Fatalf("the stale append wrote %d event(s)", got-nEvents)
	}
	if got := outbox(t, s, run); got != nOutbox {
		t.Fatalf("the stale append wrote %d outbox row(s)", got-nOutbox)
	}
	_, err = s.AcquireFencedLease(ctx, run, "worker-a", time.Minute)
	wantCode(t, err, engine.CodeLeaseHeld) // the stale runner cannot renew back in
	if res, err := s.AppendFenced(ctx, bl, []engine.RunEventWrite{f.Event(engine.StepCompleted, "sql.a", 1)}); err != nil || len(res.Appended) != 1 {
		t.Fatalf("append by the new holder: %+v %v", res, err)
	}

	// A release ends the fence too, and the next owner's is higher still.
	if err := s.ReleaseLease(ctx, run, "worker-b"); err != nil {
		t.Fatal(err)
	}
	_, err = s.AppendFenced(ctx, bl, []engine.RunEventWrite{f.Event(engine.StepStarted, "sql.c", 1)})
	wantCode(t, err, engine.CodeLeaseLost)
	cl, err := s.AcquireFencedLease(ctx, run, "worker-c", time.Minute)
	if err != nil || cl.Fence != bl.Fence+1 {
		t.Fatalf("acquire after release %+v %v: want fence %d", cl, err, bl.Fence+1)
	}
}

func testRuns(t *testing.T, b Backend) {
	s := open(t, b)
	f := NewFixture()
	f.Meta.TenantID = "tenant-" + f.Meta.RunID[:8]
	f.Bootstrap(t, s)
	if err := s.SetProviderRunRef(ctx, f.Meta.RunID, "local://pid/42"); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetRun(ctx, f.Meta.RunID)
	if err != nil || got.ProviderRunRef != "local://pid/42" {
		t.Fatalf("provider ref: %+v %v", got, err)
	}
	wantCode(t, s.SetProviderRunRef(ctx, "no-such-run", "x"), engine.CodeRunNotFound)
	runs, err := s.ListRuns(ctx, store.RunFilter{TenantID: f.Meta.TenantID})
	if err != nil || len(runs) != 1 || runs[0].RunID != f.Meta.RunID {
		t.Fatalf("ListRuns by tenant: %+v %v", runs, err)
	}
	if runs, _ := s.ListRuns(ctx, store.RunFilter{TenantID: "nobody"}); len(runs) != 0 {
		t.Fatalf("ListRuns of an unknown tenant: %+v", runs)
	}
}
