package config

import (
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

func TestParsePulse(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       time.Duration
		err        string
	}{
		{"absent: the store's default", "", 0, ""},
		{"seconds", "pulse: {interval: 2s}", 2 * time.Second, ""},
		{"milliseconds", "pulse: {interval: 250ms}", 250 * time.Millisecond, ""},
		{"zero: the store's default", "pulse: {interval: 0s}", 0, ""},
		{"below the minimum", "pulse: {interval: 1ms}", 0, "pulse.interval: 1ms is below the minimum of 10ms"},
		{"negative", "pulse: {interval: -1s}", 0, "pulse.interval: -1s is below the minimum"},
		{"not a duration", "pulse: {interval: often}", 0, "often"},
		{"unknown key", "pulse: {every: 2s}", 0, "field every not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.text), "dvt.yaml")
			if tc.err != "" {
				if engine.CodeOf(err) != engine.CodeConfigInvalid || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want CONFIG_INVALID with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Pulse.Interval != tc.want {
				t.Errorf("interval %s, want %s", c.Pulse.Interval, tc.want)
			}
		})
	}
}
