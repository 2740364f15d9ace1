package config

import (
	"time"
)

// Policy is what happens to a run request when the limits are reached
// (ExecutionSemantics §3).
type Policy string

// Backpressure policies.
const (
	PolicyReject Policy = "REJECT" // refuse with RUN_QUEUE_FULL and a retry-after
	PolicyQueue  Policy = "QUEUE"  // hold the request; workers start it in priority, then FIFO order
	PolicyDelay  Policy = "DELAY"  // accept it, not to start before now + delay
)

// Limits bound the run queue and the runs the workers start.
type Limits struct {
	// MaxConcurrentRuns bounds the runs claimed or running at once over all
	// workers (0: no bound).
	MaxConcurrentRuns int `yaml:"maxConcurrentRuns"`
	// PerPlan bounds the concurrent runs of one planId.
	PerPlan map[string]int `yaml:"perPlan"`
	// MaxQueueDepth bounds the requests waiting to start (0: no bound); a
	// request beyond it is refused with RUN_QUEUE_FULL under every policy.
	MaxQueueDepth int `yaml:"maxQueueDepth"`
	// Policy applies when MaxConcurrentRuns is reached (default QUEUE).
	Policy Policy `yaml:"policy"`
	// RetryAfter is what RUN_QUEUE_FULL tells the caller (default 30s).
	RetryAfter time.Duration `yaml:"retryAfter"`
	// Delay is how far DELAY pushes a request's not-before (default 1m).
	Delay time.Duration `yaml:"delay"`
}

func (l *Limits) validate() error {
	if l.MaxConcurrentRuns < 0 {
		return keyError("limits.maxConcurrentRuns", "must not be negative")
	}
	if l.MaxQueueDepth < 0 {
		return keyError("limits.maxQueueDepth", "must not be negative")
	}
	for plan, n := range l.PerPlan {
		if plan == "" {
			return keyError("limits.perPlan", "a plan id is empty")
		}
		if n < 1 {
			return keyError("limits.perPlan."+plan, "must be at least 1")
		}
	}
	switch l.Policy {
	case "":
		l.Policy = PolicyQueue
	case PolicyReject, PolicyQueue, PolicyDelay:
	default:
		return keyError("limits.policy", "%q is not one of REJECT, QUEUE, DELAY", l.Policy)
	}
	switch {
	case l.RetryAfter < 0:
		return keyError("limits.retryAfter", "must not be negative")
	case l.RetryAfter == 0:
		l.RetryAfter = 30 * time.Second
	}
	switch {
	case l.Delay < 0:
		return keyError("limits.delay", "must not be negative")
	case l.Delay == 0:
		l.Delay = time.Minute
	}
	return nil
}
