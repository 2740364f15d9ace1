package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/postgres"
	"github.com/dvtrun/dvtrun/store/postgres/pgtest"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// TestAppendInvalidBatch attacks the envelope checks, which run beside the
// append's first round trip (on every CPU for a large batch): the first
// invalid event in the batch's order is the one reported, whatever the
// server answers for the run, nothing of the batch is written, and the
// connection goes back to the pool fit for the next append.
func TestAppendInvalidBatch(t *testing.T) {
	ctx := context.Background()
	s, err := postgres.Open(ctx, pgtest.DSN(t), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f := storetest.NewFixture()
	f.Bootstrap(t, s)
	batch := func(n int, bad ...int) []engine.RunEventWrite {
		out := make([]engine.RunEventWrite, n)
		for i := range out {
			out[i] = f.Event(engine.StepStarted, fmt.Sprintf("model.m%03d", i), 1)
		}
		for _, i := range bad {
			out[i].IdempotencyKey = strings.Repeat("0", 64)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		run    string
		events []engine.RunEventWrite
		first  int
	}{
		{"one event", f.Meta.RunID, batch(1, 0), 0},
		{"large batch, two invalid", f.Meta.RunID, batch(64, 40, 5), 5},
		{"large batch, last invalid", f.Meta.RunID, batch(64, 63), 63},
		{"run that does not exist", "no-such-run", batch(20, 19, 7), 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, fenced := range []bool{false, true} {
				var err error
				if fenced {
					_, err = s.AppendFenced(ctx, engine.Lease{RunID: tc.run, Owner: "nobody", Fence: 1}, tc.events)
				} else {
					_, err = s.AppendAndEnqueue(ctx, tc.run, tc.events)
				}
				if engine.CodeOf(err) != engine.CodeSchemaValidationFailed || !strings.Contains(err.Error(), tc.events[tc.first].EventID) {
					t.Fatalf("fenced=%v: err = %v, want %s naming event %d (%s)", fenced, err, engine.CodeSchemaValidationFailed, tc.first, tc.events[tc.first].EventID)
				}
			}
			got, err := s.ListEvents(ctx, f.Meta.RunID, 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 { // RunQueued, RunStarted of the bootstrap
				t.Fatalf("%d events stored after invalid batches, want the bootstrap's 2", len(got))
			}
		})
	}
	// The connections the refused appends used serve the next ones.
	for i := 0; i < 4; i++ {
		res, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{f.Event(engine.StepStarted, fmt.Sprintf("model.ok%d", i), 1)})
		if err != nil || len(res.Appended) != 1 || res.Appended[0].RunSeq != int64(3+i) {
			t.Fatalf("append after the refused ones: %+v, %v", res, err)
		}
	}
}
