package storetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store"
)

// testPulse: one Pulse renews exactly the leases the caller still holds
// (owner and fence, expired or not), keeps their fences, leaves a lease
// that passed on or was released alone and reports it as stored, and
// returns each run's signals after its own cursor, ordered by run then seq.
func testPulse(t *testing.T, b Backend) {
	s := open(t, b)
	const owner, other = "proc-1", "proc-2"

	// Empty input and bad arguments.
	if got, err := s.Pulse(ctx, owner, time.Minute, nil); err != nil || len(got.Leases) != 0 || len(got.Signals) != 0 {
		t.Fatalf("empty pulse: %+v %v", got, err)
	}
	_, err := s.Pulse(ctx, "", time.Minute, []engine.PulseRun{{RunID: "r"}})
	wantCode(t, err, engine.CodeInvalidArgument)
	_, err = s.Pulse(ctx, owner, time.Minute, []engine.PulseRun{{RunID: "r"}, {RunID: "r", Fence: 2}})
	wantCode(t, err, engine.CodeInvalidArgument)

	// held: leased by owner; lost: leased by owner, then passes to other;
	// released: leased by owner and released; bare: no lease at all.
	runs, fixtures := map[string]string{}, map[string]*Fixture{}
	for _, name := range []string{"held", "lost", "released", "bare"} {
		f := NewFixture()
		f.Bootstrap(t, s)
		runs[name], fixtures[name] = f.Meta.RunID, f
	}
	leases := map[string]engine.Lease{}
	for _, name := range []string{"held", "lost", "released"} {
		l, err := s.AcquireFencedLease(ctx, runs[name], owner, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		leases[name] = l
	}
	if err := s.ReleaseLease(ctx, runs["released"], owner); err != nil {
		t.Fatal(err)
	}
	// Signals: n per run, so each run's cursor cuts its own list.
	for name, n := range map[string]int{"held": 3, "lost": 2, "released": 1, "bare": 2} {
		for i := range n {
			if _, err := s.SendSignal(ctx, engine.Signal{SignalID: uuid.NewString(), RunID: runs[name], Type: engine.SignalPause,
				StepID: fmt.Sprintf("step.%d", i+1), Reason: "r-" + name}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// 1. A renewal extends the holder's expiry (ttl 5 min against the 1 min
	// it acquired) and keeps the fence; the rest is untouched.
	if b.Advance != nil {
		b.Advance(30 * time.Second)
	}
	ask := []engine.PulseRun{
		{RunID: runs["held"], Fence: leases["held"].Fence, AfterSignal: 1},
		{RunID: runs["lost"], Fence: leases["lost"].Fence, AfterSignal: 0},
		{RunID: runs["released"], Fence: leases["released"].Fence, AfterSignal: 0},
		{RunID: runs["bare"], AfterSignal: 1},
		{RunID: "no-such-run-" + uuid.NewString(), Fence: 1},
	}
	got, err := s.Pulse(ctx, owner, 5*time.Minute, ask)
	if err != nil {
		t.Fatalf("pulse: %v", err)
	}
	held := got.Leases[runs["held"]]
	if held.Owner != owner || held.Fence != leases["held"].Fence || held.RunID != runs["held"] {
		t.Fatalf("renewed lease %+v: want owner %s and fence %d", held, owner, leases["held"].Fence)
	}
	if ext := held.ExpiresAt.Sub(leases["held"].ExpiresAt); ext <= 0 {
		t.Fatalf("renewal did not extend the lease: %s -> %s", leases["held"].ExpiresAt, held.ExpiresAt)
	} else if b.Advance != nil && (ext < 4*time.Minute+30*time.Second || ext > 4*time.Minute+31*time.Second) {
		t.Fatalf("renewal extended the lease by %s, want 4m30s (30s later, ttl 5m instead of 1m)", ext)
	}
	rel := got.Leases[runs["released"]]
	if rel.Owner != "" || rel.Fence != leases["released"].Fence || !rel.ExpiresAt.Before(leases["released"].ExpiresAt) {
		t.Fatalf("released lease came back as %+v: want it ownerless, fence %d, not renewed", rel, leases["released"].Fence)
	}
	if _, ok := got.Leases[runs["bare"]]; ok || len(got.Leases) != 3 {
		t.Fatalf("leases %+v: want held, lost and released only", got.Leases)
	}
	wantSignals(t, got.Signals, runs, map[string][]int64{"held": {2, 3}, "lost": {1, 2}, "released": {1}, "bare": {2}})

	// The renewal is stored: past the first expiry, another owner still
	// cannot take the lease; the released one is free at once.
	if b.Advance != nil {
		b.Advance(time.Minute)
		_, err = s.AcquireFencedLease(ctx, runs["held"], other, time.Minute)
		wantCode(t, err, engine.CodeLeaseHeld)
	}
	if _, err := s.AcquireFencedLease(ctx, runs["released"], other, time.Minute); err != nil {
		t.Fatalf("the released lease was renewed by the pulse: %v", err)
	}

	// 2. The lease of "lost" passes to other (after its expiry when the
	// clock can be moved, else after a release): the pulse does not renew
	// it and reports other's owner, fence and expiry. The holder's expired
	// lease of "held", that nobody took, is renewed; a stale fence of the
	// same owner is not.
	if b.Advance != nil {
		b.Advance(10 * time.Minute)
	} else if err := s.ReleaseLease(ctx, runs["lost"], owner); err != nil {
		t.Fatal(err)
	}
	taken, err := s.AcquireFencedLease(ctx, runs["lost"], other, time.Minute)
	if err != nil || taken.Fence != leases["lost"].Fence+1 {
		t.Fatalf("takeover %+v %v", taken, err)
	}
	got, err = s.Pulse(ctx, owner, 5*time.Minute, []engine.PulseRun{
		{RunID: runs["lost"], Fence: leases["lost"].Fence, AfterSignal: 2},
		{RunID: runs["held"], Fence: held.Fence, AfterSignal: 3},
	})
	if err != nil {
		t.Fatalf("pulse after the takeover: %v", err)
	}
	lost := got.Leases[runs["lost"]]
	if lost.Owner != other || lost.Fence != taken.Fence || !lost.ExpiresAt.Equal(taken.ExpiresAt) {
		t.Fatalf("lease taken over came back as %+v, want %+v untouched", lost, taken)
	}
	again := got.Leases[runs["held"]]
	if again.Owner != owner || again.Fence != held.Fence || !again.ExpiresAt.After(held.ExpiresAt) {
		t.Fatalf("expired lease of its holder: %+v, want renewed past %s with fence %d", again, held.ExpiresAt, held.Fence)
	}
	if len(got.Signals) != 0 {
		t.Fatalf("signals past every cursor: %+v", got.Signals)
	}
	if b.Advance != nil {
		b.Advance(time.Minute) // a wrongful renewal would move the expiry a minute
	}
	got, err = s.Pulse(ctx, owner, 5*time.Minute, []engine.PulseRun{{RunID: runs["held"], Fence: held.Fence + 7}})
	if err != nil {
		t.Fatal(err)
	}
	if stale := got.Leases[runs["held"]]; stale.Fence != held.Fence || !stale.ExpiresAt.Equal(again.ExpiresAt) {
		t.Fatalf("a stale fence renewed the lease: %+v, want %+v", stale, again)
	}
	// The renewed lease is still the run's: its appends pass the fence.
	if _, err := s.AppendFenced(ctx, again, []engine.RunEventWrite{fixtures["held"].Event(engine.StepStarted, "sql.a", 1)}); err != nil {
		t.Fatalf("append under the renewed lease: %v", err)
	}
	if b.Advance != nil {
		testPulseRacesTakeover(t, b, s)
	}
}

// testPulseRacesTakeover: a pulse racing another process's takeover of an
// expired lease never extends the new owner's lease. Whichever commits
// first, the stored lease is either the takeover's exactly (the pulse's
// renewal came first and was overwritten, or found another fence and did
// nothing) or, when the renewal came first and the takeover was refused
// with LEASE_HELD, the pulse's owner's with its fence.
func testPulseRacesTakeover(t *testing.T, b Backend, s store.Store) {
	const owner, other = "proc-1", "proc-2"
	s2 := open(t, b) // the other process
	for i := range 8 {
		f := NewFixture()
		f.Bootstrap(t, s)
		run := f.Meta.RunID
		mine, err := s.AcquireFencedLease(ctx, run, owner, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		b.Advance(2 * time.Minute)
		var taken engine.Lease
		var takeErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			taken, takeErr = s2.AcquireFencedLease(ctx, run, other, time.Minute)
		}()
		_, pulseErr := s.Pulse(ctx, owner, 10*time.Minute, []engine.PulseRun{{RunID: run, Fence: mine.Fence}})
		<-done
		if pulseErr != nil {
			t.Fatalf("race %d: pulse: %v", i, pulseErr)
		}
		// An observer's pulse renews nothing (no lease has its owner) and
		// reads the lease as stored.
		seen, err := s.Pulse(ctx, "observer", time.Minute, []engine.PulseRun{{RunID: run}})
		if err != nil {
			t.Fatal(err)
		}
		stored := seen.Leases[run]
		switch {
		case takeErr == nil:
			if stored != taken {
				t.Fatalf("race %d: the takeover stored %+v, the lease reads %+v", i, taken, stored)
			}
		case engine.CodeOf(takeErr) == engine.CodeLeaseHeld:
			if stored.Owner != owner || stored.Fence != mine.Fence || !stored.ExpiresAt.After(mine.ExpiresAt) {
				t.Fatalf("race %d: takeover refused, yet the lease reads %+v", i, stored)
			}
		default:
			t.Fatalf("race %d: takeover: %v", i, takeErr)
		}
	}
}

// wantSignals checks a pulse's signals: want[name] the seqs of that run,
// the whole ordered by run id then seq.
func wantSignals(t *testing.T, got []engine.Signal, runs map[string]string, want map[string][]int64) {
	t.Helper()
	type key struct {
		run string
		seq int64
	}
	var exp []key
	name := map[string]string{}
	for n, seqs := range want {
		name[runs[n]] = n
		for _, q := range seqs {
			exp = append(exp, key{runs[n], q})
		}
	}
	slices.SortFunc(exp, func(a, b key) int {
		if c := strings.Compare(a.run, b.run); c != 0 {
			return c
		}
		return int(a.seq - b.seq)
	})
	var have []key
	for _, g := range got {
		have = append(have, key{g.RunID, g.Seq})
		n := name[g.RunID]
		if g.Type != engine.SignalPause || g.Reason != "r-"+n || g.StepID != fmt.Sprintf("step.%d", g.Seq) || g.CreatedAt.IsZero() || g.SignalID == "" {
			t.Errorf("signal %+v of run %s did not round-trip", g, n)
		}
	}
	if !slices.Equal(have, exp) {
		t.Fatalf("signals (run, seq) %v, want %v", have, exp)
	}
}
