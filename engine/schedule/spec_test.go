package schedule

import (
	"testing"
	"time"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func TestTicksAcrossDST(t *testing.T) {
	cases := []struct {
		name, expr, tz string
		from, to       string
		want           []string // UTC
	}{
		// Europe/Berlin springs forward 2026-03-29 02:00 CET -> 03:00 CEST:
		// 02:30 does not exist and fires once at 03:00 CEST (01:00Z).
		{"berlin spring-forward skipped time", "30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z", "2026-03-30T12:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		// and falls back 2026-10-25 03:00 CEST -> 02:00 CET: 02:30 happens
		// twice (00:30Z and 01:30Z) and fires once, at the first.
		{"berlin fall-back repeated time", "30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", "2026-10-26T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		// Los Angeles springs forward 2026-03-08 02:00 PST -> 03:00 PDT.
		{"los angeles spring-forward", "0 2 * * *", "America/Los_Angeles", "2026-03-07T12:00:00Z", "2026-03-09T12:00:00Z",
			[]string{"2026-03-08T10:00:00Z", "2026-03-09T09:00:00Z"}},
		// Every half hour over the gap: 02:00 and 02:30 collapse onto 03:00
		// PDT, which is also a tick of its own: one run there.
		{"los angeles half-hourly over the gap", "*/30 * * * *", "America/Los_Angeles", "2026-03-08T09:00:00Z", "2026-03-08T12:00:00Z",
			[]string{"2026-03-08T09:30:00Z", "2026-03-08T10:00:00Z", "2026-03-08T10:30:00Z", "2026-03-08T11:00:00Z", "2026-03-08T11:30:00Z", "2026-03-08T12:00:00Z"}},
		// Falls back 2026-11-01 02:00 PDT -> 01:00 PST: 01:30 happens twice
		// (08:30Z and 09:30Z) and fires once.
		{"los angeles fall-back", "30 1 * * *", "America/Los_Angeles", "2026-10-31T12:00:00Z", "2026-11-02T12:00:00Z",
			[]string{"2026-11-01T08:30:00Z", "2026-11-02T09:30:00Z"}},
		// Half-hourly over the repeated hour: wall times 01:00, 01:30 run in
		// the first pass only; the repeated hour adds no runs.
		{"los angeles half-hourly over the repeat", "*/30 * * * *", "America/Los_Angeles", "2026-11-01T07:00:00Z", "2026-11-01T11:00:00Z",
			[]string{"2026-11-01T07:30:00Z", "2026-11-01T08:00:00Z", "2026-11-01T08:30:00Z", "2026-11-01T10:00:00Z", "2026-11-01T10:30:00Z", "2026-11-01T11:00:00Z"}},
		// @every is absolute: DST does not change the interval.
		{"every ignores DST", "@every 1h", "America/Los_Angeles", "2026-11-01T07:00:00Z", "2026-11-01T10:00:00Z",
			[]string{"2026-11-01T08:00:00Z", "2026-11-01T09:00:00Z", "2026-11-01T10:00:00Z"}},
		{"seconds field", "*/20 * * * * *", "", "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z",
			[]string{"2026-01-01T00:00:20Z", "2026-01-01T00:00:40Z", "2026-01-01T00:01:00Z"}},
		{"daily descriptor in a zone", "@daily", "Europe/Berlin", "2026-01-01T00:00:00Z", "2026-01-03T00:00:00Z",
			[]string{"2026-01-01T23:00:00Z", "2026-01-02T23:00:00Z"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(tc.expr, tc.tz)
			if err != nil {
				t.Fatal(err)
			}
			got, more := s.Ticks(utc(tc.from), utc(tc.to), 0)
			if more || len(got) != len(tc.want) {
				t.Fatalf("ticks = %v, want %v", got, tc.want)
			}
			for i := range got {
				if !got[i].Equal(utc(tc.want[i])) {
					t.Errorf("tick %d = %s, want %s", i, got[i].Format(time.RFC3339), tc.want[i])
				}
			}
		})
	}
}

func TestTicksBound(t *testing.T) {
	s, err := Parse("@every 1m", "")
	if err != nil {
		t.Fatal(err)
	}
	got, more := s.Ticks(utc("2026-01-01T00:00:00Z"), utc("2026-01-02T00:00:00Z"), 10)
	if len(got) != 10 || !more {
		t.Fatalf("got %d ticks, more=%v", len(got), more)
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ expr, tz string }{{"", ""}, {"* * *", ""}, {"@yearly", "Nowhere/Zone"}, {"TZ=UTC * * * * *", ""}} {
		if _, err := Parse(c.expr, c.tz); err == nil {
			t.Errorf("Parse(%q, %q) accepted", c.expr, c.tz)
		}
	}
}

func TestIntervalIsPreviousTickToTick(t *testing.T) {
	cases := []struct {
		name, expr, tz string
		tick, dur      string
		wantStartUTC   string
	}{
		{"daily utc", "0 3 * * *", "UTC", "2026-03-05T03:00:00Z", "24h0m0s", "2026-03-04T03:00:00Z"},
		// Berlin midnight across the spring-forward: the day is 23 hours.
		{"berlin day before spring-forward", "0 0 * * *", "Europe/Berlin", "2026-03-29T22:00:00Z", "23h0m0s", "2026-03-28T23:00:00Z"},
		// and 25 hours across the fall-back.
		{"berlin day of fall-back", "0 0 * * *", "Europe/Berlin", "2026-10-25T23:00:00Z", "25h0m0s", "2026-10-24T22:00:00Z"},
		// 02:30 skipped on 03-29 fired at 03:00 CEST (01:00Z): the next
		// day's run covers from there.
		{"after a skipped wall time", "30 2 * * *", "Europe/Berlin", "2026-03-30T00:30:00Z", "23h30m0s", "2026-03-29T01:00:00Z"},
		// The repeated 02:30 fired once, at its first occurrence.
		{"after a repeated wall time", "30 2 * * *", "Europe/Berlin", "2026-10-26T01:30:00Z", "25h0m0s", "2026-10-25T00:30:00Z"},
		{"hourly", "0 * * * *", "America/Los_Angeles", "2026-03-08T10:00:00Z", "1h0m0s", "2026-03-08T09:00:00Z"},
		{"every 10m", "@every 10m", "", "2026-03-08T10:03:00Z", "10m0s", "2026-03-08T09:53:00Z"},
		{"monthly", "0 0 1 * *", "UTC", "2026-03-01T00:00:00Z", "672h0m0s", "2026-02-01T00:00:00Z"},
		{"leap day", "0 0 29 2 *", "UTC", "2028-02-29T00:00:00Z", "35064h0m0s", "2024-02-29T00:00:00Z"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sp, err := Parse(tc.expr, tc.tz)
			if err != nil {
				t.Fatal(err)
			}
			tick := utc(tc.tick)
			if !sp.every && !sp.Next(tick.Add(-time.Second)).Equal(tick) {
				t.Fatalf("test input: %s is not a tick of %q", tick, tc.expr)
			}
			start, end, ok := sp.Interval(tick)
			if !ok || !start.Equal(utc(tc.wantStartUTC)) || !end.Equal(tick) || end.Sub(start).String() != tc.dur {
				t.Errorf("interval = [%s, %s) ok=%v, want [%s, %s) of %s", start, end, ok, tc.wantStartUTC, tick, tc.dur)
			}
			// The interval's start is itself a tick whose next tick is the end.
			if !sp.every && !sp.Next(start).Equal(tick) {
				t.Errorf("Next(start) = %s, want the tick %s", sp.Next(start), tick)
			}
		})
	}
}

func TestPrevOfANeverFiringExpression(t *testing.T) {
	sp, err := Parse("0 0 30 2 *", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	if p := sp.Prev(utc("2026-03-01T00:00:00Z")); !p.IsZero() {
		t.Errorf("Prev = %s, want none", p)
	}
}
