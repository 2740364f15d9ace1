// Package wake lets a store tell the services that poll it that something
// changed, so that they react in milliseconds instead of at their next
// poll. A wake-up is a hint, never the work itself: it carries an id only
// (a run id, a request id, or none), may be lost or arrive for nothing, and
// every consumer keeps polling as the fallback. Stores that cannot push
// (SQLite, Snowflake, Postgres in poll-only mode) provide no Source.
package wake

import (
	"context"
	"sync"
	"time"
)

// Topic names what changed.
type Topic string

const (
	// Queue: a run request became claimable (enqueued or handed back);
	// the id is the request's.
	Queue Topic = "queue"
	// Events: events were appended to a run's log (and so to the outbox);
	// the id is the run's.
	Events Topic = "events"
)

// Source delivers wake-ups. Subscribe's channel receives the id of each
// wake-up on topic; an empty id means "anything may have changed" (after
// a lost connection, when wake-ups may have been missed). cancel ends the
// subscription; it may be called twice.
type Source interface {
	Subscribe(topic Topic) (ids <-chan string, cancel func())
}

// Wait pauses until a wake-up on ids that match accepts (nil: any; an
// empty id always matches), until d has passed, or until ctx is done
// (its error). A nil ids channel is a plain sleep of d.
func Wait(ctx context.Context, ids <-chan string, match func(id string) bool, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		case id, ok := <-ids:
			if !ok {
				ids = nil // the source went away: poll out the pause
				continue
			}
			if id == "" || match == nil || match(id) {
				return nil
			}
		}
	}
}

// Hub fans wake-ups out to subscribers; a Source's implementation embeds
// it. Delivery never blocks the publisher: a subscriber whose buffer is
// full already has a wake-up pending, and one is all it needs.
type Hub struct {
	mu      sync.Mutex
	subs    map[Topic]map[*sub]struct{}
	onFirst func() // called (once) when the first subscription starts
	once    sync.Once
}

type sub struct{ ch chan string }

// subBuffer bounds what one subscriber may have pending.
const subBuffer = 64

// OnFirstSubscribe sets a function called once, when the first
// subscription starts (a store opens its listening connection only when a
// service wants wake-ups).
func (h *Hub) OnFirstSubscribe(f func()) {
	h.mu.Lock()
	h.onFirst = f
	h.mu.Unlock()
}

// Subscribe implements Source.
func (h *Hub) Subscribe(topic Topic) (<-chan string, func()) {
	s := &sub{ch: make(chan string, subBuffer)}
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[Topic]map[*sub]struct{}{}
	}
	if h.subs[topic] == nil {
		h.subs[topic] = map[*sub]struct{}{}
	}
	h.subs[topic][s] = struct{}{}
	first := h.onFirst
	h.mu.Unlock()
	if first != nil {
		h.once.Do(first)
	}
	var cancelOnce sync.Once
	return s.ch, func() {
		cancelOnce.Do(func() {
			h.mu.Lock()
			delete(h.subs[topic], s)
			h.mu.Unlock()
		})
	}
}

// Publish wakes topic's subscribers with id.
func (h *Hub) Publish(topic Topic, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs[topic] {
		select {
		case s.ch <- id:
		default:
		}
	}
}

// PublishAll wakes every subscriber of every topic with the empty id:
// wake-ups may have been missed.
func (h *Hub) PublishAll() {
	h.mu.Lock()
	topics := make([]Topic, 0, len(h.subs))
	for t := range h.subs {
		topics = append(topics, t)
	}
	h.mu.Unlock()
	for _, t := range topics {
		h.Publish(t, "")
	}
}
