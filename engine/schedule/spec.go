// Package schedule turns cron schedules into run requests: ticks computed
// with robfig/cron's parser (never its in-memory timer loop), a cursor row
// per schedule in the state store that any replica advances with one
// conditional UPDATE, and the request of each tick enqueued in the same
// transaction, so N schedulers give one request per tick.
package schedule

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// parser accepts 5 fields, an optional leading seconds field and the
// descriptors (@daily, @hourly, @every 10m, ...).
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Spec is a parsed cron expression in a time zone.
//
// DST: calendar expressions are evaluated on the zone's wall clock. A wall
// time that a spring-forward skips (02:30 in Europe/Berlin on the last
// Sunday of March) fires once, at the first instant after the gap (03:00
// CEST); a wall time that a fall-back repeats fires once, at its first
// occurrence. @every intervals are absolute and ignore the zone.
type Spec struct {
	Expr  string
	Loc   *time.Location
	sched cron.Schedule
	every bool
}

// Parse parses a cron expression evaluated in the IANA zone tz ("" = UTC).
func Parse(expr, tz string) (Spec, error) {
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return Spec{}, fmt.Errorf("is empty")
	}
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return Spec{}, fmt.Errorf("%q: put the zone in timezone, not in the expression", expr)
	}
	loc := time.UTC
	if tz != "" {
		var err error
		if loc, err = time.LoadLocation(tz); err != nil {
			return Spec{}, fmt.Errorf("unknown time zone %q", tz)
		}
	}
	s, err := parser.Parse(expr)
	if err != nil {
		return Spec{}, fmt.Errorf("%q: %v", expr, err)
	}
	_, every := s.(cron.ConstantDelaySchedule)
	return Spec{Expr: expr, Loc: loc, sched: s, every: every}, nil
}

// Next returns the first tick strictly after t, or the zero time if the
// expression never fires again (e.g. 30 February).
func (s Spec) Next(t time.Time) time.Time {
	if s.every {
		return s.sched.Next(t.UTC()).UTC()
	}
	w := wall(t, s.Loc)
	// Ticks collapsed onto one instant (several wall times inside a DST gap)
	// or lying in the past (the repeated hour of a fall-back) are passed over.
	for range 10000 {
		nw := s.sched.Next(w)
		if nw.IsZero() {
			return time.Time{}
		}
		if at := instant(nw, s.Loc); at.After(t) {
			return at.UTC()
		}
		w = nw
	}
	return time.Time{}
}

// wall is t's wall clock in loc, as a UTC time (UTC has no DST, so the
// parser's field arithmetic is plain calendar arithmetic).
func wall(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// instant maps a wall time (as UTC) back to an instant in loc. A wall time
// inside a spring-forward gap maps to the first instant after the gap; a
// wall time that a fall-back repeats maps to its first occurrence. (Go's
// time.Date leaves both choices unspecified.)
func instant(w time.Time, loc *time.Location) time.Time {
	at := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc)
	if !wall(at, loc).Equal(w) {
		// A gap: the first instant whose wall clock is later than w. Zone
		// offsets lie within ±14 h, so the answer is inside this window and
		// the wall clock rises monotonically across it.
		lo := w.Add(-30 * time.Hour)
		hi := w.Add(30 * time.Hour)
		for hi.Sub(lo) > time.Nanosecond {
			mid := lo.Add(hi.Sub(lo) / 2)
			if wall(mid, loc).After(w) {
				hi = mid
			} else {
				lo = mid
			}
		}
		return hi
	}
	// A repeated wall time has a second instant one offset change away.
	_, off := at.Zone()
	for _, probe := range []time.Time{at.Add(-24 * time.Hour), at.Add(24 * time.Hour)} {
		_, o := probe.Zone()
		if o == off {
			continue
		}
		if c := at.Add(time.Duration(off-o) * time.Second); c.Before(at) && wall(c, loc).Equal(w) {
			at = c
		}
	}
	return at
}

// Ticks returns the ticks in (from, to], at most max of them (max <= 0: no
// bound), and whether more were left out.
func (s Spec) Ticks(from, to time.Time, max int) ([]time.Time, bool) {
	var out []time.Time
	for t := s.Next(from); !t.IsZero() && !t.After(to); t = s.Next(t) {
		if max > 0 && len(out) == max {
			return out, true
		}
		out = append(out, t)
	}
	return out, false
}

// prevWindowMax bounds Prev's walk back: a cron expression fires at least
// once in eight years (29 February included), or never again.
const prevWindowMax = 8 * 366 * 24 * time.Hour

// Prev returns the last tick strictly before t, or the zero time if there
// is none within eight years. robfig/cron only walks forward, so Prev
// widens a window back from t until Next lands inside it, then walks
// forward to the last tick before t: the same ticks Next gives, DST rules
// included. @every ticks are t minus the interval.
func (s Spec) Prev(t time.Time) time.Time {
	if s.every {
		return t.Add(-s.sched.(cron.ConstantDelaySchedule).Delay).UTC()
	}
	for w := time.Minute; w <= prevWindowMax; w *= 2 {
		x := s.Next(t.Add(-w))
		if x.IsZero() || !x.Before(t) {
			continue
		}
		for range 1 << 20 {
			y := s.Next(x)
			if y.IsZero() || !y.Before(t) {
				return x
			}
			x = y
		}
		return time.Time{}
	}
	return time.Time{}
}

// Interval is the data interval of the run fired at tick: [the previous
// tick, tick), as Airflow's, with its start and end in UTC
// (engine.TimeFormat) and the schedule's zone. ok is false when the
// expression has no tick before this one.
func (s Spec) Interval(tick time.Time) (start, end time.Time, ok bool) {
	prev := s.Prev(tick)
	if prev.IsZero() {
		return time.Time{}, time.Time{}, false
	}
	return prev, tick.UTC(), true
}
