package config

import (
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

func TestParseSchedulesAndLimits(t *testing.T) {
	c, err := Parse([]byte(`
schedules:
  - name: shop-nightly
    cron: "0 2 * * *"
    timezone: Europe/Berlin
    plan: plans/shop/plan.yaml
    overlap: buffer_one
    catchupWindow: 1h
  - name: every-10m
    cron: "@every 10m"
    plan: p.yaml
  - name: with-seconds
    cron: "30 */5 * * * *"
    plan: p.yaml
limits:
  maxConcurrentRuns: 4
  perPlan: {shop: 1}
  maxQueueDepth: 100
  policy: REJECT
  retryAfter: 10s
`), "dvt.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := c.Schedules
	if len(s) != 3 || s[0].Overlap != OverlapBufferOne || s[0].CatchupWindow != time.Hour || s[0].Timezone != "Europe/Berlin" {
		t.Errorf("schedules = %+v", s)
	}
	if s[1].Overlap != OverlapSkip || s[1].CatchupWindow != DefaultCatchupWindow {
		t.Errorf("defaults not applied: %+v", s[1])
	}
	if sp, err := s[0].Spec(); err != nil || sp.Loc.String() != "Europe/Berlin" {
		t.Errorf("spec = %+v, %v", sp, err)
	}
	l := c.Limits
	if l.MaxConcurrentRuns != 4 || l.PerPlan["shop"] != 1 || l.MaxQueueDepth != 100 || l.Policy != PolicyReject || l.RetryAfter != 10*time.Second || l.Delay != time.Minute {
		t.Errorf("limits = %+v", l)
	}
	if c, err := Parse([]byte("sinks: []"), "x.yaml"); err != nil || c.Limits.Policy != PolicyQueue {
		t.Errorf("default policy: %+v, %v", c, err)
	}
}

func TestScheduleAndLimitErrorsNameTheKey(t *testing.T) {
	ok := "plan: p.yaml, cron: '@daily'"
	cases := []struct{ name, text, want string }{
		{"no name", "schedules: [{" + ok + "}]", "schedules[0].name: is required"},
		{"bad name", "schedules: [{name: 'a b', " + ok + "}]", "schedules[0].name"},
		{"duplicate", "schedules: [{name: a, " + ok + "}, {name: a, " + ok + "}]", `schedules[1].name: "a" is used`},
		{"no cron", "schedules: [{name: a, plan: p.yaml}]", "schedules[0].cron: is required"},
		{"bad cron", "schedules: [{name: a, plan: p.yaml, cron: '61 * * * *'}]", "schedules[0].cron"},
		{"six fields too many", "schedules: [{name: a, plan: p.yaml, cron: '* * * * * * *'}]", "schedules[0].cron"},
		{"bad descriptor", "schedules: [{name: a, plan: p.yaml, cron: '@fortnightly'}]", "schedules[0].cron"},
		{"tz in cron", "schedules: [{name: a, plan: p.yaml, cron: 'CRON_TZ=UTC 0 2 * * *'}]", "schedules[0].cron"},
		{"bad zone", "schedules: [{name: a, " + ok + ", timezone: Mars/Olympus}]", `schedules[0].timezone: unknown time zone "Mars/Olympus"`},
		{"no plan", "schedules: [{name: a, cron: '@daily'}]", "schedules[0].plan: is required"},
		{"bad overlap", "schedules: [{name: a, " + ok + ", overlap: queue}]", `schedules[0].overlap: "queue" is not one of`},
		{"negative window", "schedules: [{name: a, " + ok + ", catchupWindow: -1h}]", "schedules[0].catchupWindow: must not be negative"},
		{"bad window", "schedules: [{name: a, " + ok + ", catchupWindow: soon}]", "soon"},
		{"unknown key", "schedules: [{name: a, " + ok + ", jitter: 1s}]", "field jitter not found"},
		{"negative concurrency", "limits: {maxConcurrentRuns: -1}", "limits.maxConcurrentRuns"},
		{"negative depth", "limits: {maxQueueDepth: -1}", "limits.maxQueueDepth"},
		{"per plan zero", "limits: {perPlan: {shop: 0}}", "limits.perPlan.shop: must be at least 1"},
		{"bad policy", "limits: {policy: DROP}", `limits.policy: "DROP" is not one of REJECT, QUEUE, DELAY`},
		{"negative retry", "limits: {retryAfter: -1s}", "limits.retryAfter"},
		{"negative delay", "limits: {delay: -1s}", "limits.delay"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.text), "dvt.yaml")
			if engine.CodeOf(err) != engine.CodeConfigInvalid || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want CONFIG_INVALID with %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}
