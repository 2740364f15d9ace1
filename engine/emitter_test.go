package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// registryLog is an EventAppender whose registry keeps the first eventId
// offered for a key, as the store's does.
type registryLog struct{ ids map[string]string }

func (l *registryLog) ReserveEventIDs(_ context.Context, _ string, candidates map[string]string) (map[string]string, error) {
	out := map[string]string{}
	for k, v := range candidates {
		if _, ok := l.ids[k]; !ok {
			l.ids[k] = v
		}
		out[k] = l.ids[k]
	}
	return out, nil
}

func (l *registryLog) AppendAndEnqueue(context.Context, string, []engine.RunEventWrite) (engine.AppendResult, error) {
	return engine.AppendResult{}, fmt.Errorf("not used")
}

// TestWithEventIDs: events headed for a spool carry the registry's eventId
// where the key was reserved, and a fresh candidate where the store never
// answered the reservation; the registry is left alone (a candidate is not
// reserved).
func TestWithEventIDs(t *testing.T) {
	n := 0
	ids := engine.IDFunc(func() string { n++; return fmt.Sprintf("id-%d", n) })
	clock := engine.ClockFunc(func() time.Time { return time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC) })
	log := &registryLog{ids: map[string]string{}}
	em := engine.NewEmitter(log, clock, ids, engine.RunMetadata{RunID: "r1", PlanID: "p", PlanVersion: "1"})
	reserved := engine.Emission{Type: engine.StepStarted, Step: "a", Attempt: 1}
	if err := em.ReserveKeys(context.Background(), []engine.Emission{reserved}); err != nil {
		t.Fatal(err)
	}
	reservedID := "id-1"
	events, err := em.Prepare(engine.Emission{Type: engine.RunQueued, Attempt: 1}, engine.Emission{Type: engine.RunStarted, Attempt: 1}, reserved)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.EventID != "" {
			t.Fatalf("Prepare gave %s the eventId %q: this test assumes ids come later", e.EventType, e.EventID)
		}
	}
	got := em.WithEventIDs(events)
	for _, c := range []struct {
		i    int
		want string
	}{
		{0, "id-2"},     // RunQueued: not reserved, a fresh candidate
		{1, "id-3"},     // RunStarted: another
		{2, reservedID}, // StepStarted of a: the registry's
	} {
		if got[c.i].EventID != c.want {
			t.Errorf("%s: eventId %q, want %q", got[c.i].EventType, got[c.i].EventID, c.want)
		}
		if events[c.i].EventID != "" {
			t.Errorf("%s: WithEventIDs changed its argument", events[c.i].EventType)
		}
	}
	if len(log.ids) != 1 {
		t.Errorf("the registry holds %d keys, want the 1 reserved: a candidate must not be reserved", len(log.ids))
	}
}
