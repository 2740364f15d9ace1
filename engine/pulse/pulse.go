// Package pulse gives a process one heartbeat for all its runs: every
// interval ONE state-store call renews the leases the process holds and
// fetches the new signals of its runs (issue 11: lease renewal and signal
// polling cost one small request per interval per process, not per run or
// per thread). Runs join with their lease and signal cursor and leave when
// they end; a Pulse has the start/stop shape of engine/service.
package pulse

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/service"
)

// Store is what a pulse needs of the state store; store.Store satisfies it.
type Store interface {
	// Pulse renews, for each run, the lease owner holds with that fence to
	// the store's now + ttl, and returns the leases as stored after it and
	// the runs' signals after each run's cursor, ordered by run then Seq.
	Pulse(ctx context.Context, owner string, ttl time.Duration, runs []engine.PulseRun) (engine.PulseResult, error)
}

// Options configures a Pulse. Clock is injected; Sleep may be.
type Options struct {
	Store Store
	Owner string // the owner of every lease renewed (this process's id)
	// TTL is what each renewal asks for (default 30s): a member's lease is
	// surely its own until the start of the last successful call plus TTL.
	TTL time.Duration
	// Interval is the time between calls (default 250ms), at most TTL/3 so
	// that two calls in a row may fail without the lease expiring.
	Interval time.Duration
	Clock    engine.Clock
	// Sleep waits d or until ctx ends (nil: a timer). A join ends a sleep
	// early through its ctx.
	Sleep func(ctx context.Context, d time.Duration) error
	// OnError hears of a failed call (nil: ignored); the call is retried
	// at the next interval.
	OnError func(error)
}

// Pulse is one process's heartbeat: a service.Service.
type Pulse struct {
	o    Options
	loop service.Loop

	mu      sync.Mutex
	members map[*Member]struct{}
	joined  bool               // a member joined since the last call started
	wake    context.CancelFunc // ends the current sleep (nil: not sleeping)

	calls, failures atomic.Int64
}

// New checks the options and fills in the defaults.
func New(o Options) (*Pulse, error) {
	if o.Store == nil || o.Clock == nil || o.Owner == "" {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "a pulse needs a state store, a clock and an owner id")
	}
	if o.TTL <= 0 {
		o.TTL = 30 * time.Second
	}
	if o.Interval <= 0 {
		o.Interval = 250 * time.Millisecond
	}
	o.Interval = max(min(o.Interval, o.TTL/3), time.Millisecond)
	return &Pulse{o: o, members: map[*Member]struct{}{}}, nil
}

// Owner is the owner id of every lease the pulse renews.
func (p *Pulse) Owner() string { return p.o.Owner }

// Interval is the time between two calls.
func (p *Pulse) Interval() time.Duration { return p.o.Interval }

// Calls counts the store calls made (Failures of them failed).
func (p *Pulse) Calls() int64 { return p.calls.Load() }

// Failures counts the store calls that failed.
func (p *Pulse) Failures() int64 { return p.failures.Load() }

// Start implements service.Service: the pulse beats until ctx ends or Stop.
func (p *Pulse) Start(ctx context.Context) error { return p.loop.Start(ctx, p.run) }

// Stop implements service.Service: it waits until no call is in flight.
func (p *Pulse) Stop() { p.loop.Stop() }

// Running implements service.Service.
func (p *Pulse) Running() bool { return p.loop.Running() }

// Join adds a run to the pulse: lease is the fenced lease this process
// holds (its Owner must be the pulse's), validUntil when it expires at the
// latest by the pulse's clock (the start of the acquire plus its TTL), and
// afterSignal the run's signal cursor. The next call comes soon, shared by
// every run that joins before it starts.
func (p *Pulse) Join(lease engine.Lease, validUntil time.Time, afterSignal int64) *Member {
	m := &Member{p: p, runID: lease.RunID, fence: lease.Fence, cursor: afterSignal,
		lost: make(chan struct{}), ready: make(chan struct{}, 1), polled: make(chan struct{})}
	m.until.Store(validUntil.UnixNano())
	p.mu.Lock()
	defer p.mu.Unlock()
	p.members[m] = struct{}{}
	p.joined = true
	if p.wake != nil {
		p.wake()
	}
	return m
}

func (p *Pulse) run(ctx context.Context) {
	for ctx.Err() == nil {
		p.mu.Lock()
		if !p.joined {
			sctx, cancel := context.WithCancel(ctx)
			p.wake = cancel
			p.mu.Unlock()
			_ = p.sleep(sctx, p.o.Interval) // ended early by a join: beat now
			cancel()
			p.mu.Lock()
			p.wake = nil
		}
		p.joined = false
		p.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		p.beat(ctx)
	}
}

func (p *Pulse) sleep(ctx context.Context, d time.Duration) error {
	if p.o.Sleep != nil {
		return p.o.Sleep(ctx, d)
	}
	return engine.Sleep(ctx, d)
}

// beat makes one call for every member whose lease is still surely its
// own, and hands each member what came back.
func (p *Pulse) beat(ctx context.Context) {
	asked := p.o.Clock.Now()
	p.mu.Lock()
	in := make([]*Member, 0, len(p.members))
	// A run is asked once per call (the store refuses it twice): two
	// members of one run — the same run executed twice in this process —
	// share its row, the higher fence (the other lost the lease anyway)
	// and the lower cursor (each member filters by its own).
	byRun := map[string]engine.PulseRun{}
	for m := range p.members {
		if !m.validAt(asked) {
			// Self-fencing: past its own deadline a member is not renewed
			// back into a lease it may have lost meanwhile.
			p.drop(m)
			continue
		}
		in = append(in, m)
		r, seen := byRun[m.runID]
		if !seen {
			r = engine.PulseRun{RunID: m.runID, Fence: m.fence, AfterSignal: m.cursor}
		}
		r.Fence, r.AfterSignal = max(r.Fence, m.fence), min(r.AfterSignal, m.cursor)
		byRun[m.runID] = r
	}
	p.mu.Unlock()
	runs := make([]engine.PulseRun, 0, len(byRun))
	for _, r := range byRun {
		runs = append(runs, r)
	}
	if len(runs) == 0 {
		return
	}
	res, err := p.o.Store.Pulse(ctx, p.o.Owner, p.o.TTL, runs)
	p.calls.Add(1)
	defer func() {
		for _, m := range in {
			m.once.Do(func() { close(m.polled) })
		}
	}()
	if err != nil {
		p.failures.Add(1)
		if p.o.OnError != nil && ctx.Err() == nil {
			p.o.OnError(err)
		}
		return
	}
	signals := map[string][]engine.Signal{}
	for _, sg := range res.Signals {
		signals[sg.RunID] = append(signals[sg.RunID], sg)
	}
	until := asked.Add(p.o.TTL).UnixNano()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range in {
		if _, ok := p.members[m]; !ok {
			continue // left meanwhile
		}
		l, ok := res.Leases[m.runID]
		if !ok || l.Owner != p.o.Owner || l.Fence != m.fence {
			p.drop(m) // taken over, or released: the run must stop
			continue
		}
		m.extend(until)
		m.deliver(signals[m.runID])
	}
}

// drop ends m's membership and closes its Lost channel; p.mu is held.
func (p *Pulse) drop(m *Member) {
	delete(p.members, m)
	close(m.lost)
}

// Member is a run in a pulse. Its signals are handed over in Seq order
// through Ready and Take; Lost closes when the lease is no longer surely
// its own.
type Member struct {
	p      *Pulse
	runID  string
	fence  int64
	until  atomic.Int64 // unix ns by the pulse's clock
	lost   chan struct{}
	ready  chan struct{} // one token while signals wait to be taken
	polled chan struct{} // closed once the first call carrying it returned
	once   sync.Once

	// Guarded by p.mu.
	cursor  int64
	pending []engine.Signal
}

// Lost closes when the lease passed to another owner or fence, was
// released or is gone, or when the member's lease expired by its own
// clock (self-fencing: Valid reports false then). Nothing is renewed for
// the member afterwards.
func (m *Member) Lost() <-chan struct{} { return m.lost }

// Ready has a value when signals wait to be taken.
func (m *Member) Ready() <-chan struct{} { return m.ready }

// Polled closes once the first call carrying the member has returned:
// unless it failed, the signals sent before the run joined are handed over
// by then (a failed fetch is retried at the next interval, as any other).
func (m *Member) Polled() <-chan struct{} { return m.polled }

// Take returns the signals handed over since the last Take, in Seq order.
func (m *Member) Take() []engine.Signal {
	m.p.mu.Lock()
	defer m.p.mu.Unlock()
	out := m.pending
	m.pending = nil
	return out
}

// Valid reports whether the lease is still surely the member's: the last
// successful renewal (or the acquire) is younger than the TTL.
func (m *Member) Valid() bool { return m.validAt(m.p.o.Clock.Now()) }

// ValidUntil is when the lease expires at the latest, by the pulse's clock.
func (m *Member) ValidUntil() time.Time { return time.Unix(0, m.until.Load()) }

func (m *Member) validAt(t time.Time) bool { return t.UnixNano() < m.until.Load() }

// Leave removes the member from the pulse: its lease is no longer renewed
// (a call in flight may still renew it; the store renews a lease only for
// its owner and fence, so never one released meanwhile).
func (m *Member) Leave() {
	m.p.mu.Lock()
	defer m.p.mu.Unlock()
	delete(m.p.members, m)
}

func (m *Member) extend(until int64) {
	if until > m.until.Load() {
		m.until.Store(until)
	}
}

// deliver queues sigs (ordered by Seq) past the cursor and advances it;
// p.mu is held.
func (m *Member) deliver(sigs []engine.Signal) {
	n := len(m.pending)
	for _, sg := range sigs {
		if sg.Seq > m.cursor {
			m.pending = append(m.pending, sg)
			m.cursor = sg.Seq
		}
	}
	if len(m.pending) > n {
		select {
		case m.ready <- struct{}{}:
		default:
		}
	}
}
