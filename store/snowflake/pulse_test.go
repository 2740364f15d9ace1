package snowflake_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// TestPulseRoundTrips: a pulse is ONE HTTP round trip whatever the number
// of runs it renews and polls (none for no runs), counted by the driver's
// transport, not by reading SQL.
func TestPulseRoundTrips(t *testing.T) {
	srv := sftest.Start(t)
	dsn := srv.DSN("dvt", "pulse_requests")
	tr := &sftest.CountingTransport{}
	s := openStore(t, dsn, snowflake.Options{Transporter: tr})
	defer s.Close()
	const owner = "proc-1"
	var all []engine.PulseRun
	for i := range 20 {
		f := storetest.NewFixture()
		f.Bootstrap(t, s)
		l, err := s.AcquireFencedLease(ctx, f.Meta.RunID, owner, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.SendSignal(ctx, engine.Signal{SignalID: uuid.NewString(), RunID: f.Meta.RunID, Type: engine.SignalCancel,
			Reason: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		all = append(all, engine.PulseRun{RunID: f.Meta.RunID, Fence: l.Fence})
	}
	for _, c := range []struct {
		name  string
		runs  []engine.PulseRun
		trips int64
	}{
		{"no runs", nil, 0},
		{"one run", all[:1], 1},
		{"twenty runs", all, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr.Reset()
			got, err := s.Pulse(ctx, owner, 2*time.Minute, c.runs)
			if err != nil {
				t.Fatal(err)
			}
			if n := tr.Count(); n != c.trips {
				t.Errorf("%d HTTP round trips, want %d", n, c.trips)
			}
			if len(got.Leases) != len(c.runs) || len(got.Signals) != len(c.runs) {
				t.Errorf("%d leases and %d signals, want %d of each", len(got.Leases), len(got.Signals), len(c.runs))
			}
			for _, r := range c.runs {
				if l := got.Leases[r.RunID]; l.Owner != owner || l.Fence != r.Fence {
					t.Errorf("lease of %s: %+v", r.RunID, l)
				}
			}
		})
	}
}

// TestPulseClock: the renewal's expiry is now+ttl by the store's clock —
// the injected one to the nanosecond, or without Options.Now the
// database's (CURRENT_TIMESTAMP plus ttl in the block), as
// AcquireFencedLease decides expiry.
func TestPulseClock(t *testing.T) {
	srv := sftest.Start(t)
	dsn := srv.DSN("dvt", "pulse_clock")
	fixed := time.Date(2026, 4, 1, 9, 0, 0, 123456789, time.UTC)
	const ttl = 10 * time.Minute
	for _, c := range []struct {
		name   string
		opts   snowflake.Options
		expect func(before, after time.Time) (lo, hi time.Time)
	}{
		{"injected clock", snowflake.Options{Now: func() time.Time { return fixed }},
			func(time.Time, time.Time) (time.Time, time.Time) { return fixed.Add(ttl), fixed.Add(ttl) }},
		// The test server's database clock is this machine's; the block
		// adds the ttl in milliseconds.
		{"database clock", snowflake.Options{},
			func(before, after time.Time) (time.Time, time.Time) {
				return before.Add(ttl).Truncate(time.Millisecond), after.Add(ttl)
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openStore(t, dsn, c.opts)
			defer s.Close()
			f := storetest.NewFixture()
			f.Bootstrap(t, s)
			l, err := s.AcquireFencedLease(ctx, f.Meta.RunID, "proc-1", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			before := time.Now()
			got, err := s.Pulse(ctx, "proc-1", ttl, []engine.PulseRun{{RunID: f.Meta.RunID, Fence: l.Fence}})
			after := time.Now()
			if err != nil {
				t.Fatal(err)
			}
			renewed := got.Leases[f.Meta.RunID]
			lo, hi := c.expect(before, after)
			if renewed.Fence != l.Fence || renewed.ExpiresAt.Before(lo) || renewed.ExpiresAt.After(hi) {
				t.Fatalf("renewed %+v: want fence %d, expiry in [%s, %s]", renewed, l.Fence, lo, hi)
			}
		})
	}
}

// BenchmarkPulse compares one pulse over n runs with what a process did
// before it per interval: renew each run's lease (AcquireFencedLease) and
// poll each run's signals (ListSignals). Reported: HTTP requests and the
// median wall time of one interval's work, with 20 ms added to every
// request by the test server.
func BenchmarkPulse(b *testing.B) {
	for _, n := range []int{1, 20} {
		srv := sftest.StartWith(b, sftest.Options{RTT: 20 * time.Millisecond})
		tr := &sftest.CountingTransport{}
		s := openStore(b, srv.DSN("dvt", "bench_pulse"), snowflake.Options{Transporter: tr})
		defer s.Close()
		runs := make([]engine.PulseRun, n)
		for i := range runs {
			f := storetest.NewFixture()
			f.Bootstrap(b, s)
			l, err := s.AcquireFencedLease(ctx, f.Meta.RunID, "proc-1", time.Minute)
			if err != nil {
				b.Fatal(err)
			}
			runs[i] = engine.PulseRun{RunID: f.Meta.RunID, Fence: l.Fence}
		}
		for _, m := range []struct {
			name string
			fn   func() error
		}{
			{"pulse", func() error {
				_, err := s.Pulse(ctx, "proc-1", time.Minute, runs)
				return err
			}},
			{"per-run", func() error {
				for _, r := range runs {
					if _, err := s.AcquireFencedLease(ctx, r.RunID, "proc-1", time.Minute); err != nil {
						return err
					}
					if _, err := s.ListSignals(ctx, r.RunID, r.AfterSignal); err != nil {
						return err
					}
				}
				return nil
			}},
		} {
			b.Run(fmt.Sprintf("runs=%d/%s", n, m.name), func(b *testing.B) {
				lat := make([]time.Duration, 0, b.N)
				tr.Reset()
				b.ResetTimer()
				for range b.N {
					t0 := time.Now()
					if err := m.fn(); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(t0))
				}
				b.StopTimer()
				b.ReportMetric(float64(tr.Count())/float64(b.N), "http/op")
				b.ReportMetric(float64(median(lat).Microseconds())/1000, "ms-median")
			})
		}
	}
}
