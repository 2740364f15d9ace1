package pulse_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/pulse"
	"github.com/dvtrun/dvtrun/engine/service/servicetest"
	"github.com/dvtrun/dvtrun/store"
)

const owner = "proc-1"

var t0 = time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)

// fakeStore is a counting store of leases and signals with the renewal
// rule of store.Store's Pulse: a lease is renewed for its owner and fence
// only.
type fakeStore struct {
	mu      sync.Mutex
	leases  map[string]engine.Lease
	signals map[string][]engine.Signal
	calls   [][]engine.PulseRun
	fail    error
	// hold, when set, blocks each call until it is closed.
	hold chan struct{}
	now  func() time.Time
}

func newFakeStore(c *servicetest.Clock) *fakeStore {
	return &fakeStore{leases: map[string]engine.Lease{}, signals: map[string][]engine.Signal{}, now: c.Now}
}

func (s *fakeStore) Pulse(ctx context.Context, o string, ttl time.Duration, runs []engine.PulseRun) (engine.PulseResult, error) {
	s.mu.Lock()
	s.calls = append(s.calls, slices.Clone(runs))
	hold, fail := s.hold, s.fail
	s.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return engine.PulseResult{}, ctx.Err()
		}
	}
	if fail != nil {
		return engine.PulseResult{}, fail
	}
	if _, err := store.PulseRuns(o, runs); err != nil { // the real stores' checks
		return engine.PulseResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	res := engine.PulseResult{Leases: map[string]engine.Lease{}}
	for _, r := range runs {
		l, ok := s.leases[r.RunID]
		if !ok {
			continue
		}
		if l.Owner == o && l.Fence == r.Fence {
			l.ExpiresAt = s.now().Add(ttl)
			s.leases[r.RunID] = l
		}
		res.Leases[r.RunID] = l
		for _, sg := range s.signals[r.RunID] {
			if sg.Seq > r.AfterSignal {
				res.Signals = append(res.Signals, sg)
			}
		}
	}
	return res, nil
}

func (s *fakeStore) lease(runID string, fence int64) engine.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := engine.Lease{RunID: runID, Owner: owner, Fence: fence}
	s.leases[runID] = l
	return l
}

func (s *fakeStore) set(l engine.Lease, gone bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gone {
		delete(s.leases, l.RunID)
		return
	}
	s.leases[l.RunID] = l
}

func (s *fakeStore) signal(runID string, seqs ...int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range seqs {
		s.signals[runID] = append(s.signals[runID], engine.Signal{RunID: runID, Seq: q, Type: engine.SignalPause, SignalID: fmt.Sprint(runID, "-", q)})
	}
}

func (s *fakeStore) setFail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = err
}

func (s *fakeStore) callLog() [][]engine.PulseRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

func (s *fakeStore) ncalls() int { return len(s.callLog()) }

type rig struct {
	t     *testing.T
	clock *servicetest.Clock
	store *fakeStore
	tick  servicetest.Ticker
	p     *pulse.Pulse
	errs  chan error
}

const ttl = 30 * time.Second

func newRig(t *testing.T) *rig {
	t.Helper()
	c := servicetest.NewClock(t0)
	r := &rig{t: t, clock: c, store: newFakeStore(c), tick: servicetest.NewTicker(), errs: make(chan error, 100)}
	p, err := pulse.New(pulse.Options{Store: r.store, Owner: owner, TTL: ttl, Interval: 2 * time.Second, Clock: c,
		Sleep: r.tick.Sleep, OnError: func(err error) { r.errs <- err }})
	if err != nil {
		t.Fatal(err)
	}
	r.p = p
	return r
}

func (r *rig) start() {
	r.t.Helper()
	if err := r.p.Start(context.Background()); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(r.p.Stop)
}

// join joins run runID with a lease of fence 1 acquired now.
func (r *rig) join(runID string, after int64) *pulse.Member {
	return r.p.Join(r.store.lease(runID, 1), r.clock.Now().Add(ttl), after)
}

// waitCalls waits until the store saw n calls, and fails on more.
func (r *rig) waitCalls(n int) {
	r.t.Helper()
	waitFor(r.t, "the pulse's calls", func() bool { return r.store.ncalls() >= n })
	if got := r.store.ncalls(); got != n {
		r.t.Fatalf("%d store calls, want %d", got, n)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func runIDs(runs []engine.PulseRun) []string {
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.RunID
	}
	slices.Sort(ids)
	return ids
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestNewRefuses(t *testing.T) {
	c := servicetest.NewClock(t0)
	for _, o := range []pulse.Options{
		{Owner: owner, Clock: c},
		{Store: newFakeStore(c), Owner: owner},
		{Store: newFakeStore(c), Clock: c},
	} {
		if _, err := pulse.New(o); engine.CodeOf(err) != engine.CodeInvalidArgument {
			t.Errorf("New(%+v): %v, want INVALID_ARGUMENT", o, err)
		}
	}
	p, err := pulse.New(pulse.Options{Store: newFakeStore(c), Owner: owner, Clock: c, TTL: 3 * time.Second, Interval: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if p.Interval() != time.Second {
		t.Errorf("interval %s with a 3s TTL, want TTL/3", p.Interval())
	}
}

// TestOneCallPerIntervalForAllMembers: N runs cost one store call per
// interval, each call carrying every run; a run that left is not in it.
func TestOneCallPerIntervalForAllMembers(t *testing.T) {
	for _, n := range []int{1, 5, 40} {
		t.Run(fmt.Sprint(n, " runs"), func(t *testing.T) {
			r := newRig(t)
			var want []string
			ms := map[string]*pulse.Member{}
			for i := range n {
				id := fmt.Sprintf("run-%02d", i)
				ms[id] = r.join(id, 0)
				want = append(want, id)
			}
			slices.Sort(want)
			r.start()
			r.waitCalls(1) // joined before Start: one call for all of them
			for k := 2; k <= 4; k++ {
				r.tick.Tick(t)
				r.waitCalls(k)
			}
			for i, c := range r.store.callLog() {
				if got := runIDs(c); !slices.Equal(got, want) {
					t.Fatalf("call %d carried %v, want %v", i+1, got, want)
				}
			}
			ms[want[0]].Leave()
			r.tick.Tick(t)
			if n == 1 {
				r.tick.Tick(t) // the pulse slept again without a call
				if got := r.store.ncalls(); got != 4 {
					t.Fatalf("%d calls with no member left, want 4", got)
				}
				return
			}
			r.waitCalls(5)
			if got := runIDs(r.store.callLog()[4]); slices.Contains(got, want[0]) || len(got) != n-1 {
				t.Fatalf("after %s left the call carried %v", want[0], got)
			}
		})
	}
}

// TestJoinsCoalesce: a join ends the pulse's sleep at once (a run sees the
// signals sent before it started without waiting an interval), and runs
// that join while a call is in flight share the next call.
func TestJoinsCoalesce(t *testing.T) {
	r := newRig(t)
	hold := make(chan struct{})
	r.store.hold = hold
	r.start()
	a := r.join("a", 0)
	waitFor(t, "the first call", func() bool { return r.store.ncalls() == 1 })
	b, c, d := r.join("b", 0), r.join("c", 0), r.join("d", 0)
	r.store.mu.Lock()
	r.store.hold = nil
	r.store.mu.Unlock()
	close(hold)
	r.waitCalls(2)
	for _, m := range []*pulse.Member{a, b, c, d} {
		waitFor(t, "every member polled", func() bool { return closed(m.Polled()) })
	}
	if got := runIDs(r.store.callLog()[1]); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Fatalf("the second call carried %v, want the four runs", got)
	}
	r.tick.Tick(t)
	r.waitCalls(3) // and then one per interval again
}

// TestLoss: a lease that shows another owner or fence, or is gone, closes
// the member's Lost channel (the lease is not self-fenced: it was taken);
// the other members carry on, and the lost one is never renewed again.
func TestLoss(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lease engine.Lease
		gone  bool
	}{
		{"taken over by another owner", engine.Lease{RunID: "x", Owner: "proc-2", Fence: 2}, false},
		{"taken over by this owner again (new fence)", engine.Lease{RunID: "x", Owner: owner, Fence: 2}, false},
		{"released", engine.Lease{RunID: "x", Owner: "", Fence: 1}, false},
		{"gone", engine.Lease{RunID: "x"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			x, y := r.join("x", 0), r.join("y", 0)
			r.start()
			r.waitCalls(1)
			if closed(x.Lost()) || closed(y.Lost()) {
				t.Fatal("a member lost its lease while the store shows it held")
			}
			r.store.set(tc.lease, tc.gone)
			r.tick.Tick(t)
			r.waitCalls(2)
			waitFor(t, "x's loss", func() bool { return closed(x.Lost()) })
			if !x.Valid() {
				t.Error("a lease taken over reads as self-fenced")
			}
			if closed(y.Lost()) {
				t.Error("y lost its lease with x's")
			}
			r.tick.Tick(t)
			r.waitCalls(3)
			if got := runIDs(r.store.callLog()[2]); !slices.Equal(got, []string{"y"}) {
				t.Errorf("after x's loss the call carried %v, want y only", got)
			}
			x.Leave() // after a loss: no effect
		})
	}
}

// TestSignalsDeliveredOnceInOrder: new signals come through Ready and Take
// in Seq order, each once; the run's cursor advances with them and each
// run gets only its own.
func TestSignalsDeliveredOnceInOrder(t *testing.T) {
	r := newRig(t)
	r.store.signal("a", 1, 2) // 1 was decided before the run joined
	r.store.signal("b", 1)
	a, b := r.join("a", 1), r.join("b", 0)
	r.start()
	r.waitCalls(1)
	take := func(m *pulse.Member) []int64 {
		var seqs []int64
		for _, sg := range m.Take() {
			seqs = append(seqs, sg.Seq)
		}
		return seqs
	}
	<-a.Ready()
	if got := take(a); !slices.Equal(got, []int64{2}) {
		t.Fatalf("a took %v, want [2]", got)
	}
	if got := b.Take(); len(got) != 1 || got[0].RunID != "b" {
		t.Fatalf("b took %v, want its own signal 1", got)
	}
	r.store.signal("a", 3, 4)
	r.tick.Tick(t)
	r.waitCalls(2)
	r.store.signal("a", 5)
	r.tick.Tick(t)
	r.waitCalls(3)
	<-a.Ready()
	if got := take(a); !slices.Equal(got, []int64{3, 4, 5}) {
		t.Fatalf("a took %v, want [3 4 5]", got)
	}
	r.tick.Tick(t)
	r.waitCalls(4)
	if got := take(a); len(got) != 0 {
		t.Fatalf("a took %v again", got)
	}
	select {
	case <-a.Ready():
		t.Fatal("Ready with nothing to take")
	default:
	}
	var cursors []int64
	for _, c := range r.store.callLog() {
		for _, run := range c {
			if run.RunID == "a" {
				cursors = append(cursors, run.AfterSignal)
			}
		}
	}
	if !slices.Equal(cursors, []int64{1, 2, 4, 5}) {
		t.Errorf("a's cursor in the calls %v, want [1 2 4 5]", cursors)
	}
}

// TestFailingStoreSelfFences: failed calls are retried every interval and
// do not drop the lease before its TTL (from the start of the last
// successful call); past it the member fences itself: Valid is false, Lost
// closes and it is never renewed again, even once the store is back.
func TestFailingStoreSelfFences(t *testing.T) {
	r := newRig(t)
	m := r.join("a", 0)
	r.start()
	r.waitCalls(1) // at t0: valid until t0+TTL
	r.clock.Advance(10 * time.Second)
	r.tick.Tick(t)
	r.waitCalls(2) // at t0+10s: valid until t0+40s
	if want := t0.Add(10 * time.Second).Add(ttl); !m.ValidUntil().Equal(want) {
		t.Fatalf("valid until %s, want %s (the call's start + TTL)", m.ValidUntil(), want)
	}
	r.store.setFail(engine.MarkTransient(engine.Errorf(engine.CodeStoreUnavailable, "store is busy")))
	for k := 3; k <= 5; k++ {
		r.clock.Advance(9 * time.Second) // 19s, 28s, 37s past the last renewal
		r.tick.Tick(t)
		r.waitCalls(k)
		if !m.Valid() || closed(m.Lost()) {
			t.Fatalf("call %d failed %s after the last renewal: the member dropped its lease before its TTL", k, r.clock.Now().Sub(t0.Add(10*time.Second)))
		}
	}
	if err := <-r.errs; engine.CodeOf(err) != engine.CodeStoreUnavailable {
		t.Errorf("OnError heard %v", err)
	}
	r.clock.Advance(3 * time.Second) // 40s: the TTL is over
	if m.Valid() {
		t.Fatal("Valid past the TTL")
	}
	r.store.setFail(nil)
	r.tick.Tick(t)
	waitFor(t, "the member's self-fencing", func() bool { return closed(m.Lost()) })
	r.tick.Tick(t)
	if got := r.store.ncalls(); got != 5 {
		t.Fatalf("%d calls: a self-fenced member was renewed", got)
	}
	if m.Valid() {
		t.Fatal("a self-fenced member became valid again")
	}
}

func TestStopWaitsAndRestartRefused(t *testing.T) {
	r := newRig(t)
	r.join("a", 0)
	r.start()
	r.waitCalls(1)
	if !r.p.Running() {
		t.Fatal("not running after Start")
	}
	if err := r.p.Start(context.Background()); err == nil {
		t.Fatal("a second Start succeeded")
	}
	r.p.Stop()
	if r.p.Running() {
		t.Fatal("running after Stop")
	}
	r.p.Stop() // a second Stop returns at once
}

// TestTwoMembersOfOneRun: the same run joined twice (a second Execute of it
// in this process) is asked once per call; the member with the stale fence
// loses the lease, the other keeps it, and each gets the signals after its
// own cursor.
func TestTwoMembersOfOneRun(t *testing.T) {
	r := newRig(t)
	r.store.signal("a", 1, 2)
	old := r.p.Join(engine.Lease{RunID: "a", Owner: owner, Fence: 1}, t0.Add(ttl), 0)
	cur := r.p.Join(r.store.lease("a", 2), t0.Add(ttl), 1)
	r.start()
	r.waitCalls(1)
	if c := r.store.callLog()[0]; len(c) != 1 || c[0].Fence != 2 || c[0].AfterSignal != 0 {
		t.Fatalf("the call carried %+v, want run a once with fence 2 and cursor 0", c)
	}
	select {
	case err := <-r.errs:
		t.Fatalf("the call failed: %v", err)
	default:
	}
	waitFor(t, "the stale member's loss", func() bool { return closed(old.Lost()) })
	if closed(cur.Lost()) {
		t.Fatal("the member holding the lease lost it")
	}
	if got := cur.Take(); len(got) != 1 || got[0].Seq != 2 {
		t.Fatalf("the member with cursor 1 took %v, want signal 2", got)
	}
}
