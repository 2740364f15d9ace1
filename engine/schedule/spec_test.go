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
