package service

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestLoopLifecycle(t *testing.T) {
	var l Loop
	l.Stop() // before Start: a no-op
	if l.Running() {
		t.Fatal("Running before Start")
	}
	running := make(chan struct{})
	var stopped atomic.Bool
	if err := l.Start(context.Background(), func(ctx context.Context) {
		close(running)
		<-ctx.Done()
		stopped.Store(true)
	}); err != nil {
		t.Fatal(err)
	}
	<-running
	if !l.Running() {
		t.Fatal("not Running after Start")
	}
	if err := l.Start(context.Background(), func(context.Context) {}); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start: %v", err)
	}
	l.Stop()
	if !stopped.Load() || l.Running() {
		t.Fatal("Stop returned before run did")
	}
	l.Stop() // double stop
}

// TestLoopStopsWithContext: cancelling Start's context ends run without a
// Stop; the loop then reports not Running, and a later Stop returns at once.
func TestLoopStopsWithContext(t *testing.T) {
	t.Parallel()
	var l Loop
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	running := make(chan struct{})
	var sawCancel atomic.Bool
	if err := l.Start(ctx, func(ctx context.Context) {
		close(running)
		<-ctx.Done()
		sawCancel.Store(true)
	}); err != nil {
		t.Fatal(err)
	}
	<-running
	if !l.Running() {
		t.Fatal("not Running before the context ends")
	}
	cancel()
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return within 10s of its context ending")
	}
	if !sawCancel.Load() {
		t.Error("run returned without seeing its context end")
	}
	if l.Running() {
		t.Error("Running after run returned")
	}
	stopped := make(chan struct{})
	go func() { l.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop after the context ended did not return within 10s")
	}
}

type fake struct {
	name    string
	log     *[]string
	failing bool
	running bool
}

func (f *fake) Start(context.Context) error {
	if f.failing {
		return errors.New("no")
	}
	*f.log = append(*f.log, "start "+f.name)
	f.running = true
	return nil
}
func (f *fake) Stop()         { *f.log = append(*f.log, "stop "+f.name); f.running = false }
func (f *fake) Running() bool { return f.running }

func TestGroupOrder(t *testing.T) {
	var log []string
	g := Group{&fake{name: "a", log: &log}, &fake{name: "b", log: &log}}
	if g.Running() {
		t.Fatal("group Running before Start")
	}
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !g.Running() {
		t.Fatal("group not Running after Start")
	}
	g[1].Stop()
	if g.Running() {
		t.Fatal("group Running with a member stopped")
	}
	log = log[:2]
	g.Stop()
	if got := len(log); got != 4 || log[2] != "stop b" || log[3] != "stop a" {
		t.Fatalf("log %v", log)
	}
	log = nil
	g = Group{&fake{name: "a", log: &log}, &fake{name: "c", log: &log, failing: true}}
	if err := g.Start(context.Background()); err == nil || len(log) != 2 || log[1] != "stop a" {
		t.Fatalf("failed start: %v %v", err, log)
	}
}
