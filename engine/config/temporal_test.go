package config

import (
	"strings"
	"testing"
	"time"
)

func TestTemporalBlock(t *testing.T) {
	cases := []struct {
		name, text string
		want       Temporal // after WithDefaults
		err        string
	}{
		{"defaults", "", Temporal{Address: "127.0.0.1:7233", Namespace: "default", TaskQueue: "dvtrun", HeartbeatTimeout: 5 * time.Second}, ""},
		{"given", "temporal: {address: 'tmp.example:7233', namespace: prod, taskQueue: etl, historyBudget: 5000, heartbeatTimeout: 2s}",
			Temporal{Address: "tmp.example:7233", Namespace: "prod", TaskQueue: "etl", HistoryBudget: 5000, HeartbeatTimeout: 2 * time.Second}, ""},
		{"heartbeat too short", "temporal: {heartbeatTimeout: 10ms}", Temporal{}, "temporal.heartbeatTimeout"},
		{"bad address", "temporal: {address: nowhere}", Temporal{}, "temporal.address"},
		{"negative budget", "temporal: {historyBudget: -1}", Temporal{}, "temporal.historyBudget"},
		{"unknown key", "temporal: {apiKey: x}", Temporal{}, "field apiKey not found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.text), "dvt.yaml")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Temporal.WithDefaults(); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
