package wake_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine/wake"
)

// long is a pause no case may sit out: a Wait that returns before it was
// woken (or returns at all when it should not) fails the case.
const long = time.Hour

func TestWait(t *testing.T) {
	isRun1 := func(id string) bool { return id == "run1" }
	for _, tc := range []struct {
		name  string
		send  []string
		close bool
		match func(string) bool
		pause time.Duration
		want  bool // woken before the pause ran out
	}{
		{"any id wakes without a filter", []string{"run2"}, false, nil, long, true},
		{"a matching id wakes", []string{"run1"}, false, isRun1, long, true},
		{"the empty id always wakes", []string{""}, false, isRun1, long, true},
		{"other ids do not wake", []string{"run2", "run3"}, false, isRun1, 30 * time.Millisecond, false},
		{"a closed source leaves the poll", nil, true, nil, 30 * time.Millisecond, false},
		{"no wake-up: the pause", nil, false, nil, 30 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := make(chan string, len(tc.send))
			for _, id := range tc.send {
				ch <- id
			}
			if tc.close {
				close(ch)
			}
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- wake.Wait(context.Background(), ch, tc.match, tc.pause) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				if slept := time.Since(start) >= tc.pause; slept == tc.want {
					t.Fatalf("returned after %s (pause %s): woken = %v, want %v", time.Since(start), tc.pause, !slept, tc.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Wait did not return within 5s")
			}
		})
	}
}

func TestWaitEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := wake.Wait(ctx, make(chan string), nil, long); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
}

// TestHub: publishing never blocks (a full subscriber already has a
// wake-up pending), reaches the topic's subscribers only, stops at cancel,
// and the first subscription starts the source once.
func TestHub(t *testing.T) {
	h := &wake.Hub{}
	starts := 0
	h.OnFirstSubscribe(func() { starts++ })
	q, cancelQ := h.Subscribe(wake.Queue)
	ev, cancelEv := h.Subscribe(wake.Events)
	defer cancelEv()
	if starts != 1 {
		t.Fatalf("source started %d times, want 1", starts)
	}
	for i := range 1000 { // far beyond any buffer: must not block
		h.Publish(wake.Queue, string(rune('a'+i%26)))
	}
	if got := <-q; got != "a" {
		t.Fatalf("first queue wake-up %q, want a", got)
	}
	select {
	case id := <-ev:
		t.Fatalf("events subscriber woken by a queue wake-up (%q)", id)
	default:
	}
	h.PublishAll()
	if got := <-ev; got != "" {
		t.Fatalf("PublishAll woke events with %q, want the empty id", got)
	}
	cancelQ()
	cancelQ() // twice is harmless
	for len(q) > 0 {
		<-q
	}
	h.Publish(wake.Queue, "late")
	select {
	case id := <-q:
		t.Fatalf("a cancelled subscription received %q", id)
	default:
	}
}
