package config

import (
	"fmt"
	"regexp"
	"time"

	"github.com/dvtrun/dvtrun/engine/schedule"
)

// Overlap says what a schedule's tick does while an earlier run of the same
// schedule is still queued or running (Temporal's overlap policies).
type Overlap string

// Overlap policies.
const (
	OverlapSkip        Overlap = "skip"         // drop the tick
	OverlapBufferOne   Overlap = "buffer_one"   // keep at most one waiting; it starts when the running one ends
	OverlapBufferAll   Overlap = "buffer_all"   // keep every tick; they start one after another
	OverlapCancelOther Overlap = "cancel_other" // cancel the earlier run, then start
	OverlapAllowAll    Overlap = "allow_all"    // start regardless
)

// DefaultCatchupWindow is how late a tick may still fire when the schedule
// sets no catchupWindow: long enough for a slow poll, short enough that a
// scheduler down for hours does not replay them.
const DefaultCatchupWindow = time.Minute

// Schedule runs a plan on a cron expression.
type Schedule struct {
	Name          string        `yaml:"name" doc:"The schedule's name, unique in the file: letters, digits, '_', '.' and '-' (at most 128). Required."`
	Cron          string        `yaml:"cron" doc:"When it fires: a cron expression of 5 fields (or 6, seconds first), or a descriptor such as @daily, @hourly or @every 10m. Required."`
	Timezone      string        `yaml:"timezone" doc:"The IANA time zone the expression is read in, e.g. Europe/Berlin (default UTC)."`
	Plan          string        `yaml:"plan" doc:"The plan file to run, relative to this file. Required."`
	Overlap       Overlap       `yaml:"overlap" doc:"What a tick does while the schedule's previous run is still queued or running: skip (default: drop the tick), buffer_one (keep at most one waiting), buffer_all (keep every tick, run one after another), cancel_other (cancel the earlier run) or allow_all (start regardless)."`
	CatchupWindow time.Duration `yaml:"catchupWindow" doc:"How late a tick may still fire, after the scheduler was down (default 1m); older ticks are counted as missed (backfill them with dvtrun schedule backfill)."`
	Priority      int           `yaml:"priority" doc:"Priority of its run requests: a higher one starts first (default 0)."`
	// The shape of the schedule's runs, as enqueue's flags.
	Target      string         `yaml:"target" doc:"The target its runs use (default: the file's target)."`
	Select      string         `yaml:"select" doc:"The steps to run, as run --select: dbt selection expressions, spaces for union, commas for intersection."`
	Exclude     string         `yaml:"exclude" doc:"The steps to leave out, as run --exclude."`
	Vars        map[string]any `yaml:"vars" doc:"The runs' variables, as run --vars."`
	FullRefresh bool           `yaml:"fullRefresh" doc:"Rebuild incremental models from scratch, as run --full-refresh."`
}

// Spec is the schedule's parsed cron expression (validated by Parse).
func (s Schedule) Spec() (schedule.Spec, error) { return schedule.Parse(s.Cron, s.Timezone) }

// scheduleName keeps names usable in run request ids and metric labels.
var scheduleName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

func validateSchedules(list []Schedule) error {
	seen := map[string]bool{}
	for i := range list {
		s := &list[i]
		key := fmt.Sprintf("schedules[%d]", i)
		switch {
		case s.Name == "":
			return keyError(key+".name", "is required")
		case !scheduleName.MatchString(s.Name):
			return keyError(key+".name", "%q: use letters, digits, '_', '.' and '-' (at most 128)", s.Name)
		case seen[s.Name]:
			return keyError(key+".name", "%q is used by an earlier schedule", s.Name)
		}
		seen[s.Name] = true
		if s.Cron == "" {
			return keyError(key+".cron", "is required")
		}
		if _, err := schedule.Parse(s.Cron, ""); err != nil {
			return keyError(key+".cron", "%v", err)
		}
		if _, err := schedule.Parse(s.Cron, s.Timezone); err != nil {
			return keyError(key+".timezone", "%v", err)
		}
		if s.Plan == "" {
			return keyError(key+".plan", "is required")
		}
		switch s.Overlap {
		case "":
			s.Overlap = OverlapSkip
		case OverlapSkip, OverlapBufferOne, OverlapBufferAll, OverlapCancelOther, OverlapAllowAll:
		default:
			return keyError(key+".overlap", "%q is not one of skip, buffer_one, buffer_all, cancel_other, allow_all", s.Overlap)
		}
		switch {
		case s.CatchupWindow < 0:
			return keyError(key+".catchupWindow", "must not be negative")
		case s.CatchupWindow == 0:
			s.CatchupWindow = DefaultCatchupWindow
		}
	}
	return nil
}
