package sqlite_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/audit"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// TestAppendLargeBatch: a batch of 300 events is written with contiguous
// runSeqs, one outbox row each and an unbroken chain; the keys it repeats
// from an earlier append, in its middle, come back as the stored events
// and take no runSeq. (A batch form of the append must keep all of this.)
func TestAppendLargeBatch(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, t.TempDir()+"/state.db", sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f := storetest.NewFixture()
	f.Bootstrap(t, s) // runSeq 1-2
	all := make([]engine.RunEventWrite, 300)
	for i := range all {
		typ := engine.StepStarted
		if i%2 == 1 {
			typ = engine.StepCompleted
		}
		all[i] = f.Event(typ, fmt.Sprintf("model.m%04d", i/2), 1)
	}
	// Events 130-131 (one step's pair) are stored first.
	first, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, all[130:132])
	if err != nil || len(first.Appended) != 2 {
		t.Fatalf("first append: %+v %v", first, err)
	}
	res, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, all)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Appended) != 298 || len(res.Deduped) != 2 {
		t.Fatalf("appended %d deduped %d, want 298 and 2", len(res.Appended), len(res.Deduped))
	}
	for i, r := range res.Appended {
		if r.RunSeq != int64(5+i) {
			t.Fatalf("appended[%d] runSeq %d, want %d", i, r.RunSeq, 5+i)
		}
	}
	for i, d := range res.Deduped {
		if d.RunSeq != first.Appended[i].RunSeq || d.EventID != first.Appended[i].EventID {
			t.Fatalf("deduped[%d] %d/%s, want the stored %d/%s", i, d.RunSeq, d.EventID, first.Appended[i].RunSeq, first.Appended[i].EventID)
		}
	}
	if n, err := s.CountOutbox(ctx, f.Meta.RunID); err != nil || n != 302 {
		t.Fatalf("outbox %d %v, want 302", n, err)
	}
	rep, err := audit.Verify(ctx, s, audit.VerifyOptions{})
	if err != nil || rep.Problem != nil || rep.Events != 302 || rep.Chained != 302 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

// TestAppendBatchInvalidEvent: whichever event of a batch is invalid, the
// error names the first invalid one and nothing is written.
func TestAppendBatchInvalidEvent(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, t.TempDir()+"/state.db", sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f := storetest.NewFixture()
	f.Bootstrap(t, s)
	for _, bad := range [][]int{{0}, {63}, {99}, {70, 20}} {
		events := benchEvents(f, 100)
		for _, i := range bad {
			events[i].EventID = "not-a-uuid-" + string(rune('a'+i%26))
		}
		first := min(bad[0], bad[len(bad)-1])
		_, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, events)
		if engine.CodeOf(err) != engine.CodeSchemaValidationFailed || !strings.Contains(err.Error(), events[first].EventID) {
			t.Fatalf("bad %v: %v, want SCHEMA_VALIDATION_FAILED naming %s", bad, err, events[first].EventID)
		}
		if n, err := s.CountOutbox(ctx, f.Meta.RunID); err != nil || n != 2 {
			t.Fatalf("bad %v: outbox %d %v, want the bootstrap's 2 only", bad, n, err)
		}
	}
}
