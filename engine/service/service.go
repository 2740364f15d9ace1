// Package service gives dvtrun's long-running parts (scheduler, worker, and
// delivery and the projector) one start/stop shape, River's
// startstop.Service: Start returns once the service runs, Stop waits until
// it has stopped and tolerates being called twice or before Start.
package service

import (
	"context"
	"errors"
	"sync"
)

// Service is a long-running part of dvtrun.
type Service interface {
	// Start launches the service; it returns once it is running. The
	// service stops when ctx ends or Stop is called.
	Start(ctx context.Context) error
	// Stop asks the service to stop and waits until it has.
	Stop()
	// Running reports whether the service has started and not stopped
	// (readiness).
	Running() bool
}

// ErrStarted is returned by a second Start.
var ErrStarted = errors.New("service already started")

// Loop runs one function in a goroutine with the Service lifecycle. The
// zero Loop is ready to use.
type Loop struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs run(ctx') in a goroutine, ctx' ending with ctx or Stop.
func (l *Loop) Start(ctx context.Context, run func(ctx context.Context)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil {
		return ErrStarted
	}
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		run(ctx)
	}(l.done)
	return nil
}

// Stop cancels run's context and waits for it to return.
func (l *Loop) Stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if done == nil {
		return
	}
	cancel()
	<-done
}

// Done is closed when run has returned (nil before Start).
func (l *Loop) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}

// Running reports whether run has been started and has not returned: a
// loop that ended on its own (or never started) is not ready.
func (l *Loop) Running() bool {
	done := l.Done()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Group starts services in order and stops them in reverse order.
type Group []Service

// Start starts each service; if one fails, those started are stopped.
func (g Group) Start(ctx context.Context) error {
	for i, s := range g {
		if err := s.Start(ctx); err != nil {
			for j := i - 1; j >= 0; j-- {
				g[j].Stop()
			}
			return err
		}
	}
	return nil
}

// Running reports whether every service runs.
func (g Group) Running() bool {
	for _, s := range g {
		if !s.Running() {
			return false
		}
	}
	return true
}

// Stop stops the services in reverse order.
func (g Group) Stop() {
	for i := len(g) - 1; i >= 0; i-- {
		g[i].Stop()
	}
}
