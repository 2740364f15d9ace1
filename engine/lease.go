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
