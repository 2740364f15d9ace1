package store

import "github.com/dvtrun/dvtrun/engine"

// CheckFence is the fenced append's decision, shared by the backends: the
// append of lease is allowed only while the run's lease row (holder, fence)
// still names lease's owner and fence. Anything else — taken over, released,
// never acquired — is LEASE_LOST, and the caller writes nothing.
func CheckFence(lease engine.Lease, holder string, fence int64) error {
	if holder == lease.Owner && fence == lease.Fence && holder != "" {
		return nil
	}
	if holder == "" {
		return engine.Errorf(engine.CodeLeaseLost, "run %s: %s no longer holds the lease (fence %d); nothing was written", lease.RunID, lease.Owner, lease.Fence)
	}
	return engine.Errorf(engine.CodeLeaseLost, "run %s: the lease passed to %s (fence %d), this runner's fence %d is stale; nothing was written", lease.RunID, holder, fence, lease.Fence)
}
