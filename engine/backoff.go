package engine

import "time"

// Backoff is the wait after the n-th failure (n >= 1): initial doubled
// n-1 times, capped at ceiling, then spread by ± jitter (a fraction) with
// r, a uniform draw in [0, 1). Step retries and outbox delivery both wait
// by it.
func Backoff(initial, ceiling time.Duration, n int, jitter, r float64) time.Duration {
	d := initial
	for i := 1; i < n && d < ceiling; i++ {
		d *= 2
	}
	d = min(d, ceiling)
	return time.Duration(float64(d) * (1 + jitter*(2*r-1)))
}
