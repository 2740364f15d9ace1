package engine

import "time"

// Lease is a runner's hold on a run, as the store granted it. Fence is the
// fencing token: it stays the same while its owner renews and grows by one
// whenever the lease passes to another owner (a takeover, or an acquire
// after a release), so a store or warehouse that has seen a higher fence
// refuses the writes of a runner that was taken over (LEASE_LOST).
type Lease struct {
	RunID     string
	Owner     string
	Fence     int64
	ExpiresAt time.Time // store clock
}

// PulseRun is one run in a process's pulse: the lease the process holds on
// it and the last signal the process has seen of it. A process renews the
// leases of all its runs and fetches their new signals in one store call
// per interval (store.Store's Pulse), not one per run.
type PulseRun struct {
	RunID       string
	Fence       int64 // the fence of the lease the process holds
	AfterSignal int64 // signals with Seq > AfterSignal come back
}

// PulseResult is what one pulse found.
type PulseResult struct {
	// Leases holds, for each run asked about, its lease as stored after the
	// renewal (store clock). A run whose lease passed to another owner or
	// fence shows that owner and fence; a run without a lease row is absent.
	Leases map[string]Lease
	// Signals are the new signals of the runs asked about, ordered by run
	// then Seq.
	Signals []Signal
}
