package engine

import (
	"context"
	"time"
)

// Sleep waits d or until ctx ends (then it returns ctx's error), on a
// real timer: the default of the Sleep that engine's services take by
// injection so that tests can drive their waits.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
