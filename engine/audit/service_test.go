package audit_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine/audit"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// TestServiceSignsAsTheLogGrows runs the serve/worker checkpointer on a
// real store: it signs a checkpoint of what is there, signs again only
// once more events are appended, and stops when asked.
func TestServiceSignsAsTheLogGrows(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "state.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.NewFixture().Bootstrap(t, s)
	var mu sync.Mutex
	var sizes []int64
	svc := &audit.Service{
		Checkpointer: &audit.Checkpointer{Log: s, SigningKey: storetest.TestKey, Now: time.Now},
		Every:        5 * time.Millisecond,
		Publish: func(_ context.Context, cp audit.Checkpoint) error {
			mu.Lock()
			sizes = append(sizes, cp.Size)
			mu.Unlock()
			return nil
		},
		OnError: func(err error) { t.Errorf("checkpoint: %v", err) },
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	// waitFor bounds each wait at 10 s and says what it waits for.
	waitFor := func(what string, cond func([]int64) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			ok := cond(sizes)
			got := append([]int64(nil), sizes...)
			mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("waited 10s for %s; published %v", what, got)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("a checkpoint of the first run's 2 events", func(s []int64) bool { return len(s) == 1 && s[0] == 2 })
	time.Sleep(50 * time.Millisecond) // ten rounds with nothing new
	storetest.NewFixture().Bootstrap(t, s)
	// The second run's events may be appended in more than one
	// transaction, so a checkpoint may fall between them: what matters is
	// that the log's growth is signed, each checkpoint larger than the last.
	waitFor("a checkpoint of all 4 events", func(s []int64) bool { return len(s) >= 2 && s[len(s)-1] == 4 })
	svc.Stop()
	if svc.Running() {
		t.Fatal("running after Stop")
	}
	mu.Lock()
	published := append([]int64(nil), sizes...)
	mu.Unlock()
	for i := 1; i < len(published); i++ {
		if published[i] <= published[i-1] {
			t.Fatalf("a checkpoint without growth: published %v", published)
		}
	}
	if rep, err := audit.Verify(ctx, s, audit.VerifyOptions{PublicKey: storetest.TestPublicKey}); err != nil || rep.Problem != nil || rep.Checkpoints != len(published) {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}
