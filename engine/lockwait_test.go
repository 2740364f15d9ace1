package engine

import (
	"strings"
	"testing"
	"time"
)

func TestLockWait(t *testing.T) {
	since := time.Date(2026, 11, 26, 1, 2, 3, 0, time.UTC)
	tests := []struct {
		name      string
		w         LockWait
		line, err []string // substrings of String() and Exceeded()
	}{
		{"all known", LockWait{Resource: "table DVT_FENCE_X", RunID: "r1", Holder: "transaction 42", Since: since, Waited: 10 * time.Second, Budget: time.Minute},
			[]string{"table DVT_FENCE_X", "run r1", "held by transaction 42", "since 2026-11-26T01:02:03Z", "10s of 1m0s"},
			[]string{"STORE_UNAVAILABLE", "table DVT_FENCE_X", "run r1", "transaction 42", "not released within 1m0s"}},
		{"holder unknown", LockWait{Resource: "warehouse w.db", Waited: 1500 * time.Millisecond, Budget: 5 * time.Second},
			[]string{"lock on warehouse w.db: 2s of 5s"},
			[]string{"lock on warehouse w.db was not released within 5s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line := tt.w.String()
			for _, s := range tt.line {
				if !strings.Contains(line, s) {
					t.Errorf("progress line %q lacks %q", line, s)
				}
			}
			err := tt.w.Exceeded()
			if CodeOf(err) != CodeStoreUnavailable {
				t.Errorf("code %q, want STORE_UNAVAILABLE", CodeOf(err))
			}
			for _, s := range tt.err {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
		})
	}
	var f WaitFunc
	f.Report(LockWait{}) // nil: silent, no panic
	got := 0
	f = func(LockWait) { got++ }
	f.Report(LockWait{})
	if got != 1 {
		t.Errorf("Report called f %d times, want 1", got)
	}
}
