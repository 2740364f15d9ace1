// Package queue is the durable run queue (ExecutionSemantics §3): run
// requests idempotent on (tenant, project, environment, planId,
// planVersion, runRequestId), backpressure from the configured limits, and
// claims that the state store decides with one conditional UPDATE.
package queue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// State is where a request is in its life.
type State string

// Request states. PENDING waits for a worker; CLAIMED is held by a worker
// that is starting its run; RUNNING has a run; DONE and CANCELLED are final.
const (
	StatePending   State = "PENDING"
	StateClaimed   State = "CLAIMED"
	StateRunning   State = "RUNNING"
	StateDone      State = "DONE"
	StateCancelled State = "CANCELLED"
)

// Final reports whether the request will not change again.
func (s State) Final() bool { return s == StateDone || s == StateCancelled }

// Shape is a request's run shape (issue 20), as `dvtrun enqueue`'s flags
// or a schedule's keys give it: the config target it runs on, dbt
// selection expressions (nil: the whole plan), the run's variables,
// --full-refresh, and for a scheduled or backfilled run its data interval.
type Shape struct {
	Target       string               `json:"target,omitempty"`
	Select       []string             `json:"select,omitempty"`
	Exclude      []string             `json:"exclude,omitempty"`
	Vars         map[string]any       `json:"vars,omitempty"`
	FullRefresh  bool                 `json:"fullRefresh,omitempty"`
	DataInterval *engine.DataInterval `json:"dataInterval,omitempty"`
}

// IsZero reports a shape that says nothing: the whole plan, no context.
func (s Shape) IsZero() bool {
	return s.Target == "" && len(s.Select) == 0 && len(s.Exclude) == 0 && len(s.Vars) == 0 && !s.FullRefresh && s.DataInterval == nil
}

// Request is one run request.
type Request struct {
	RequestID string `json:"requestId"`
	// Key is SHA256(tenantId|projectId|environmentId|planId|planVersion|
	// runRequestId) (ExecutionSemantics §3): a second request with the same
	// key is the first one.
	Key           string `json:"key"`
	TenantID      string `json:"tenantId"`
	ProjectID     string `json:"projectId"`
	EnvironmentID string `json:"environmentId"`
	PlanID        string `json:"planId"`
	PlanVersion   string `json:"planVersion"`
	RunRequestID  string `json:"runRequestId"`
	// PlanSHA256 names the plan bundle the worker must run, stored in the
	// state store by it before the request (plan.BundleStore); PlanPath
	// is where it was read, for people, and for a request enqueued before
	// bundles were stored the file the worker reads, refusing it if its
	// sha256 changed since.
	PlanPath   string `json:"planPath"`
	PlanSHA256 string `json:"planSha256"`
	Priority   int    `json:"priority"`
	// NotBefore: no worker starts the request earlier (database clock).
	NotBefore time.Time `json:"notBefore"`
	// Schedule names the schedule that enqueued it ("" for enqueue).
	Schedule string `json:"schedule,omitempty"`
	// Serial requests of a schedule start only when no other request of the
	// same schedule is claimed or running, and in enqueue order.
	Serial bool `json:"serial,omitempty"`
	// Shape is what the run does beyond its plan; the worker records it
	// in the run's RunQueued.
	Shape Shape `json:"shape,omitzero"`

	State      State     `json:"state"`
	Owner      string    `json:"owner,omitempty"`
	RunID      string    `json:"runId,omitempty"`
	Outcome    string    `json:"outcome,omitempty"` // the run's final status
	Seq        int64     `json:"seq"`               // enqueue order
	Version    int64     `json:"version"`           // bumped by every change
	Attempts   int       `json:"attempts"`          // claims so far
	EnqueuedAt time.Time `json:"enqueuedAt"`
	ClaimedAt  time.Time `json:"claimedAt,omitzero"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`

	// TakenOver is set by ClaimRequest alone: the request was claimed from
	// a previous owner (its heartbeat expired, or it handed the request
	// back with its run), not PENDING. Not stored; a dead owner may not
	// have recorded a run id, so RunID does not tell.
	TakenOver bool `json:"-"`
}

// Worker is a worker process's heartbeat row.
type Worker struct {
	ID          string    `json:"workerId"`
	StartedAt   time.Time `json:"startedAt"`
	HeartbeatAt time.Time `json:"heartbeatAt"`
	ExpiresAt   time.Time `json:"expiresAt"`
	// Live is whether the heartbeat has not expired by the database's
	// clock: the worker's claims are its own while it is.
	Live bool `json:"live"`
}

// Key is the request idempotency key of ExecutionSemantics §3.
func Key(tenant, project, env, planID, planVersion, runRequestID string) string {
	h := sha256.Sum256([]byte(strings.Join([]string{tenant, project, env, planID, planVersion, runRequestID}, "|")))
	return hex.EncodeToString(h[:])
}

// Stats is what admission decides on, read by the store inside the
// enqueue transaction.
type Stats struct {
	Now          time.Time // the database's clock
	Pending      int       // requests waiting (PENDING)
	Active       int       // requests claimed or running
	ActiveOfPlan int       // the same, of the request's planId
}

// Limits are the backpressure settings (config.Limits, decoupled).
type Limits struct {
	MaxConcurrentRuns int
	PerPlan           map[string]int
	MaxQueueDepth     int
	Policy            string // REJECT | QUEUE | DELAY ("" = QUEUE)
	RetryAfter        time.Duration
	Delay             time.Duration
}

func (l Limits) planLimit(planID string) int { return l.PerPlan[planID] }

// saturated reports whether a new run of planID would exceed a
// concurrency limit if it started now.
func (l Limits) saturated(planID string, st Stats) bool {
	if l.MaxConcurrentRuns > 0 && st.Active+st.Pending >= l.MaxConcurrentRuns {
		return true
	}
	n := l.planLimit(planID)
	return n > 0 && st.ActiveOfPlan >= n
}

// Admit applies backpressure to a new request r: RUN_QUEUE_FULL when the
// queue is at MaxQueueDepth (every policy) or, under REJECT, when the
// concurrency limit is reached; under DELAY a saturated request is
// accepted not to start before now + Delay; under QUEUE it waits.
func (l Limits) Admit(r Request, st Stats) (Request, error) {
	if l.MaxQueueDepth > 0 && st.Pending >= l.MaxQueueDepth {
		return r, l.full(fmt.Sprintf("the run queue holds %d waiting requests (maxQueueDepth %d)", st.Pending, l.MaxQueueDepth))
	}
	if !l.saturated(r.PlanID, st) {
		return r, nil
	}
	switch l.Policy {
	case "REJECT":
		return r, l.full(fmt.Sprintf("%d runs are active or waiting (maxConcurrentRuns %d, plan %s limit %d)", st.Active+st.Pending, l.MaxConcurrentRuns, r.PlanID, l.planLimit(r.PlanID)))
	case "DELAY":
		if at := st.Now.Add(l.Delay); r.NotBefore.Before(at) {
			r.NotBefore = at
		}
	}
	return r, nil
}

func (l Limits) full(why string) error {
	ra := l.RetryAfter
	if ra <= 0 {
		ra = 30 * time.Second
	}
	secs := int((ra + time.Second - 1) / time.Second)
	e := engine.Errorf(engine.CodeRunQueueFull, "%s; retry after %ds", why, secs)
	e.Meta = map[string]any{"retryAfterSeconds": secs}
	return e
}

// RetryAfter returns the retry-after of a RUN_QUEUE_FULL error.
func RetryAfter(err error) (time.Duration, bool) {
	var e *engine.Error
	if !errors.As(err, &e) || e.Code != engine.CodeRunQueueFull {
		return 0, false
	}
	s, ok := e.Meta["retryAfterSeconds"].(int)
	return time.Duration(s) * time.Second, ok
}

// ClaimLimits are the concurrency limits a claim honours.
type ClaimLimits struct {
	MaxConcurrentRuns int
	PerPlan           map[string]int
}

// Allows reports whether one more run of planID may start next to the
// active ones (active: all claimed/running; ofPlan: those of planID).
func (l ClaimLimits) Allows(planID string, active, ofPlan int) bool {
	if l.MaxConcurrentRuns > 0 && active >= l.MaxConcurrentRuns {
		return false
	}
	n := l.PerPlan[planID]
	return n <= 0 || ofPlan < n
}

// Store is what the queue needs of the state store. Every write that
// decides between competitors (a claim, a cursor advance) is one
// conditional UPDATE whose affected-row count decides; times it compares
// are the database's clock.
type Store interface {
	// EnqueueRequest inserts r unless a request with r.Key exists, in which
	// case it returns that one and false. admit sees the queue's Stats in
	// the same transaction and returns the request to insert or an error
	// (nothing is written).
	EnqueueRequest(ctx context.Context, r Request, admit func(Request, Stats) (Request, error)) (Request, bool, error)
	// GetRequest returns a request by id (RUN_NOT_FOUND if none).
	GetRequest(ctx context.Context, id string) (Request, error)
	// ListRequests returns requests in enqueue order, newest last;
	// finished ones only when all is set.
	ListRequests(ctx context.Context, all bool) ([]Request, error)
	// CancelRequest cancels a PENDING request; a claimed or running one is
	// returned unchanged (cancel its run instead).
	CancelRequest(ctx context.Context, id string) (Request, error)
	// ClaimRequest renews owner's heartbeat (expiring ttl from now) and
	// claims the first claimable request: a PENDING one whose NotBefore has
	// passed, within the limits, by priority then enqueue order — or one
	// whose owner's heartbeat expired (a takeover). false: none.
	ClaimRequest(ctx context.Context, owner string, ttl time.Duration, l ClaimLimits) (Request, bool, error)
	// Heartbeat renews owner's heartbeat: one per worker process.
	Heartbeat(ctx context.Context, owner string, ttl time.Duration) error
	// RetireWorker removes owner's heartbeat: its claims become claimable
	// at once.
	RetireWorker(ctx context.Context, owner string) error
	// ListWorkers returns every worker's heartbeat, by worker id.
	ListWorkers(ctx context.Context) ([]Worker, error)
	// SetRequestRun records the run started for a request owner holds.
	SetRequestRun(ctx context.Context, id, owner, runID string) error
	// FinishRequest marks a request owner holds DONE with the run's outcome.
	FinishRequest(ctx context.Context, id, owner, outcome string) error
	// ReleaseRequest gives a request owner holds back: PENDING again when it
	// has no run yet, otherwise claimable by another worker at once.
	ReleaseRequest(ctx context.Context, id, owner string) error
}

// Queue enqueues run requests under the configured limits.
type Queue struct {
	Store  Store
	IDs    engine.IDSource
	Limits Limits
}

// Enqueue validates r, derives its key and request id, and stores it
// unless a request with the same key exists: then it returns that one and
// false. An empty RunRequestID makes the request unique.
func (q *Queue) Enqueue(ctx context.Context, r Request) (Request, bool, error) {
	if r.RunRequestID == "" {
		r.RunRequestID = q.IDs.NewID()
	}
	for _, f := range []struct{ name, v string }{
		{"tenant", r.TenantID}, {"project", r.ProjectID}, {"environment", r.EnvironmentID},
		{"planId", r.PlanID}, {"planVersion", r.PlanVersion}, {"plan path", r.PlanPath}, {"plan sha256", r.PlanSHA256},
	} {
		if f.v == "" {
			return Request{}, false, engine.Errorf(engine.CodeInvalidArgument, "a run request needs its %s", f.name)
		}
	}
	r.Key = Key(r.TenantID, r.ProjectID, r.EnvironmentID, r.PlanID, r.PlanVersion, r.RunRequestID)
	r.RequestID = q.IDs.NewID()
	r.State = StatePending
	return q.Store.EnqueueRequest(ctx, r, q.Limits.Admit)
}
