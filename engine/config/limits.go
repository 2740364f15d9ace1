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
	MaxConcurrentRuns int            `yaml:"maxConcurrentRuns" doc:"Most runs claimed or running at once over all workers (0: no bound)."`
	PerPlan           map[string]int `yaml:"perPlan" key:"PLAN_ID" doc:"Most concurrent runs of one plan, by plan id (at least 1)."`
	MaxQueueDepth     int            `yaml:"maxQueueDepth" doc:"Most requests waiting to start (0: no bound); one more is refused with RUN_QUEUE_FULL (exit 75), whatever the policy."`
	Policy            Policy         `yaml:"policy" doc:"What a request meets once maxConcurrentRuns runs are going: QUEUE (default: it waits, higher priority first, then first come), REJECT (refused with RUN_QUEUE_FULL and a retry-after) or DELAY (accepted, to start no sooner than delay from now)."`
	RetryAfter        time.Duration  `yaml:"retryAfter" doc:"The retry-after RUN_QUEUE_FULL tells the caller (default 30s)."`
	Delay             time.Duration  `yaml:"delay" doc:"How far DELAY pushes a request's start (default 1m)."`
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
