package queue_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/queue"
	"github.com/dvtrun/dvtrun/engine/service/servicetest"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

var ctx = context.Background()

func newQueue(t *testing.T, l queue.Limits) (*queue.Queue, *sqlite.Store) {
	t.Helper()
	st := servicetest.OpenSQLite(t, filepath.Join(t.TempDir(), "state.db"))
	return &queue.Queue{Store: st, IDs: engine.IDFunc(uuid.NewString), Limits: l}, st
}

func req(plan, id string, prio int) queue.Request {
	return queue.Request{TenantID: "acme", ProjectID: "shop", EnvironmentID: "dev", PlanID: plan, PlanVersion: "1",
		RunRequestID: id, PlanPath: "plan.yaml", PlanSHA256: "ab12", Priority: prio}
}

func TestKeyIsExecutionSemanticsKey(t *testing.T) {
	// printf 'acme|shop|dev|shop_plan|7|req-1' | sha256sum
	const want = "8308b053ff6c8eba609eae26a8bb8b8e5049ea401264db844b2d886c60ac5aef"
	if got := queue.Key("acme", "shop", "dev", "shop_plan", "7", "req-1"); got != want {
		t.Fatalf("key %s, want %s", got, want)
	}
}

func TestEnqueueIsIdempotent(t *testing.T) {
	q, _ := newQueue(t, queue.Limits{})
	first, created, err := q.Enqueue(ctx, req("shop", "nightly", 0))
	if err != nil || !created || first.Key != queue.Key("acme", "shop", "dev", "shop", "1", "nightly") {
		t.Fatalf("first: %+v %v %v", first, created, err)
	}
	again, created, err := q.Enqueue(ctx, req("shop", "nightly", 3))
	if err != nil || created || again.RequestID != first.RequestID {
		t.Fatalf("second: %+v %v %v", again, created, err)
	}
	a, _, _ := q.Enqueue(ctx, req("shop", "", 0))
	b, _, _ := q.Enqueue(ctx, req("shop", "", 0))
	if a.RequestID == b.RequestID || a.RunRequestID == "" {
		t.Fatalf("requests without an id must be distinct: %+v %+v", a, b)
	}
	if _, _, err := q.Enqueue(ctx, queue.Request{PlanID: "x"}); engine.CodeOf(err) != engine.CodeInvalidArgument {
		t.Fatalf("incomplete request: %v", err)
	}
}

func TestBackpressureReject(t *testing.T) {
	cases := []struct {
		name   string
		limits queue.Limits
		fill   int
	}{
		{"concurrency", queue.Limits{MaxConcurrentRuns: 2, Policy: "REJECT", RetryAfter: 10 * time.Second}, 2},
		{"per plan", queue.Limits{PerPlan: map[string]int{"shop": 1}, Policy: "REJECT", RetryAfter: 10 * time.Second}, 1},
		{"queue depth under QUEUE", queue.Limits{MaxQueueDepth: 3, Policy: "QUEUE", RetryAfter: 10 * time.Second}, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q, st := newQueue(t, tc.limits)
			for i := range tc.fill {
				if _, _, err := q.Enqueue(ctx, req("shop", fmt.Sprint(i), 0)); err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
			}
			if tc.name == "per plan" {
				// The per-plan limit counts runs started: claim the one waiting.
				if _, ok, err := st.ClaimRequest(ctx, "w", time.Minute, queue.ClaimLimits{}); !ok || err != nil {
					t.Fatal(ok, err)
				}
			}
			_, _, err := q.Enqueue(ctx, req("shop", "one-too-many", 0))
			if engine.CodeOf(err) != engine.CodeRunQueueFull {
				t.Fatalf("got %v, want RUN_QUEUE_FULL", err)
			}
			if ra, ok := queue.RetryAfter(err); !ok || ra != 10*time.Second {
				t.Fatalf("retry-after %v %v", ra, ok)
			}
			// A duplicate of an accepted request is answered, not refused.
			if _, created, err := q.Enqueue(ctx, req("shop", "0", 0)); err != nil || created {
				t.Fatalf("duplicate while full: %v %v", created, err)
			}
			if tc.name == "per plan" {
				if _, created, err := q.Enqueue(ctx, req("bakery", "b", 0)); err != nil || !created {
					t.Fatalf("another plan is not limited: %v %v", created, err)
				}
			}
		})
	}
}

func TestBackpressureQueueDrainsInPriorityThenFIFOOrder(t *testing.T) {
	l := queue.Limits{MaxConcurrentRuns: 1, Policy: "QUEUE"}
	q, st := newQueue(t, l)
	for i, p := range []int{0, 2, 1, 2, 0} {
		if _, _, err := q.Enqueue(ctx, req("shop", fmt.Sprint("r", i), p)); err != nil {
			t.Fatal(err)
		}
	}
	cl := queue.ClaimLimits{MaxConcurrentRuns: l.MaxConcurrentRuns}
	var order []string
	for range 5 {
		r, ok, err := st.ClaimRequest(ctx, "w", time.Minute, cl)
		if err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		if _, ok, _ := st.ClaimRequest(ctx, "w2", time.Minute, cl); ok {
			t.Fatal("a second run started past maxConcurrentRuns 1")
		}
		order = append(order, r.RunRequestID)
		if err := st.FinishRequest(ctx, r.RequestID, "w", "COMPLETED"); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(order) != "[r1 r3 r2 r0 r4]" {
		t.Fatalf("drain order %v", order)
	}
}

func TestBackpressureDelayNeverStartsEarly(t *testing.T) {
	l := queue.Limits{MaxConcurrentRuns: 1, Policy: "DELAY", Delay: 1500 * time.Millisecond}
	q, st := newQueue(t, l)
	first, _, err := q.Enqueue(ctx, req("shop", "first", 0))
	if err != nil {
		t.Fatal(err)
	}
	delayed, created, err := q.Enqueue(ctx, req("shop", "second", 9))
	if err != nil || !created {
		t.Fatalf("DELAY accepts: %v %v", created, err)
	}
	if gap := delayed.NotBefore.Sub(delayed.EnqueuedAt); gap < l.Delay {
		t.Fatalf("not_before %s is only %s after enqueue", delayed.NotBefore, gap)
	}
	if !first.NotBefore.Equal(first.EnqueuedAt) {
		t.Fatalf("an unsaturated request is not delayed: %+v", first)
	}
	// Unlimited claims: only the delay holds the second request back.
	got, _, _ := st.ClaimRequest(ctx, "w", time.Minute, queue.ClaimLimits{})
	if got.RequestID != first.RequestID {
		t.Fatalf("claimed %+v first: the delayed request outranks it but must wait", got)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, ok, err := st.ClaimRequest(ctx, "w", time.Minute, queue.ClaimLimits{})
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if r.RequestID != delayed.RequestID || r.ClaimedAt.Before(delayed.NotBefore) {
				t.Fatalf("claimed %+v at %s, not_before %s", r, r.ClaimedAt, delayed.NotBefore)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the delayed request never started")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
