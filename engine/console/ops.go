package console

import (
	"net/http"
	"slices"
	"time"

	"github.com/dvtrun/dvtrun/engine/delivery"
	"github.com/dvtrun/dvtrun/engine/queue"
	"github.com/dvtrun/dvtrun/store"
)

// opsPage is the data of the schedules, queue, workers and outbox pages.
type opsPage struct {
	Missing   string // the source this console was started without
	Now       time.Time
	Schedules []Schedule
	Queue     queueView
	Workers   []workerRow
	Pending   []delivery.Delivery
	Dead      []delivery.Delivery
	Limit     int
}

func (s *Server) schedules(r *http.Request) (page, error) {
	p := opsPage{Now: s.cfg.Clock.Now()}
	if s.cfg.Schedules == nil {
		p.Missing = "the schedules of a config (start it with --config)"
	} else {
		var err error
		if p.Schedules, err = s.cfg.Schedules(r.Context()); err != nil {
			return page{}, err
		}
	}
	return page{name: "schedules", title: "Schedules", nav: "schedules", data: p}, nil
}

// queueView is the run queue's depth, oldest waiting request, and the
// requests of this scope that are waiting or running.
type queueView struct {
	Pending, Claimed, Running int
	Oldest                    time.Duration
	OldestID                  string
	Requests                  []queue.Request
}

// inScope keeps the requests of the console's scope.
func (s *Server) inScope(rs []queue.Request) []queue.Request {
	out := rs[:0:0]
	for _, r := range rs {
		if r.TenantID == s.cfg.TenantID && r.ProjectID == s.cfg.ProjectID && r.EnvironmentID == s.cfg.EnvironmentID {
			out = append(out, r)
		}
	}
	return out
}

func (s *Server) queue(r *http.Request) (page, error) {
	p := opsPage{Now: s.cfg.Clock.Now()}
	if s.cfg.Requests == nil {
		p.Missing = "a state store with a run queue"
		return page{name: "queue", title: "Queue", nav: "queue", data: p}, nil
	}
	rs, err := s.cfg.Requests.ListRequests(r.Context(), false)
	if err != nil {
		return page{}, err
	}
	q := queueView{Requests: s.inScope(rs)}
	for _, x := range q.Requests {
		switch x.State {
		case queue.StatePending:
			q.Pending++
			if age := p.Now.Sub(x.EnqueuedAt); age > q.Oldest {
				q.Oldest, q.OldestID = age, x.RequestID
			}
		case queue.StateClaimed:
			q.Claimed++
		case queue.StateRunning:
			q.Running++
		}
	}
	p.Queue = q
	return page{name: "queue", title: "Queue", nav: "queue", data: p}, nil
}

// workerRow is a worker: its heartbeat (none when the queue names an
// owner whose row is gone), the requests it holds with their runs' leases,
// and how many of them it took over from another worker.
type workerRow struct {
	Owner     string
	Heartbeat *queue.Worker
	Requests  int
	Runs      []workerRun
	TakenOver int // requests claimed more than once (after a worker died or handed back)
}

type workerRun struct {
	RunID     string
	RequestID string
	Lease     store.Lease
	HasLease  bool
}

func (s *Server) workers(r *http.Request) (page, error) {
	p := opsPage{Now: s.cfg.Clock.Now()}
	if s.cfg.Requests == nil || s.cfg.Workers == nil {
		p.Missing = "a state store with a run queue"
		return page{name: "workers", title: "Workers", nav: "workers", data: p}, nil
	}
	ctx := r.Context()
	beats, err := s.cfg.Workers.ListWorkers(ctx)
	if err != nil {
		return page{}, err
	}
	rs, err := s.cfg.Requests.ListRequests(ctx, false)
	if err != nil {
		return page{}, err
	}
	byOwner := map[string]*workerRow{}
	var order []string
	row := func(owner string) *workerRow {
		w := byOwner[owner]
		if w == nil {
			w = &workerRow{Owner: owner}
			byOwner[owner] = w
			order = append(order, owner)
		}
		return w
	}
	for i := range beats {
		row(beats[i].ID).Heartbeat = &beats[i]
	}
	for _, x := range s.inScope(rs) {
		if x.Owner == "" || (x.State != queue.StateClaimed && x.State != queue.StateRunning) {
			continue
		}
		w := row(x.Owner)
		w.Requests++
		if x.Attempts > 1 {
			w.TakenOver++
		}
		wr := workerRun{RunID: x.RunID, RequestID: x.RequestID}
		if x.RunID != "" && s.cfg.Leases != nil {
			if wr.Lease, wr.HasLease, err = s.cfg.Leases.GetLease(ctx, x.RunID); err != nil {
				return page{}, err
			}
		}
		w.Runs = append(w.Runs, wr)
	}
	slices.Sort(order)
	for _, o := range order {
		p.Workers = append(p.Workers, *byOwner[o])
	}
	return page{name: "workers", title: "Workers", nav: "workers", data: p}, nil
}

// outboxLimit bounds each of the outbox page's lists.
const outboxLimit = 200

func (s *Server) outbox(r *http.Request) (page, error) {
	p := opsPage{Now: s.cfg.Clock.Now(), Limit: outboxLimit}
	if s.cfg.Deliveries == nil {
		p.Missing = "a state store with an outbox"
		return page{name: "outbox", title: "Outbox", nav: "outbox", data: p}, nil
	}
	var err error
	if p.Pending, err = s.cfg.Deliveries.ListDeliveries(r.Context(), delivery.Filter{State: delivery.StatePending, Limit: outboxLimit}); err != nil {
		return page{}, err
	}
	if p.Dead, err = s.cfg.Deliveries.ListDeliveries(r.Context(), delivery.Filter{State: delivery.StateDead, Limit: outboxLimit}); err != nil {
		return page{}, err
	}
	return page{name: "outbox", title: "Outbox", nav: "outbox", data: p}, nil
}
