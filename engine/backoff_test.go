package engine

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	cases := []struct {
		n      int
		jitter float64
		r      float64
		want   time.Duration
	}{
		{1, 0, 0, 200 * time.Millisecond},
		{2, 0, 0, 400 * time.Millisecond},
		{4, 0, 0, 1600 * time.Millisecond},
		{6, 0, 0, 5 * time.Second},   // capped
		{200, 0, 0, 5 * time.Second}, // no overflow past the cap
		{1, 0.2, 0, 160 * time.Millisecond},
		{1, 0.2, 0.5, 200 * time.Millisecond},
		{6, 0.2, 0.75, 5500 * time.Millisecond}, // jitter applies after the cap
	}
	for _, tc := range cases {
		if got := Backoff(200*time.Millisecond, 5*time.Second, tc.n, tc.jitter, tc.r); got != tc.want {
			t.Errorf("Backoff(n=%d, jitter=%v, r=%v) = %v, want %v", tc.n, tc.jitter, tc.r, got, tc.want)
		}
	}
}
