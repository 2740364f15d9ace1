package schedule

import (
	"context"
	"time"

	"github.com/dvtrun/dvtrun/engine/queue"
)

// Cursor is a schedule's row in the state store.
type Cursor struct {
	Name          string
	NextTick      time.Time // the first tick not yet handled
	Version       int64     // bumped by every advance
	LastTick      time.Time // the last tick that enqueued a request
	LastRequestID string
	Fired         int64 // ticks that enqueued a request
	Missed        int64 // ticks older than the catch-up window
	Skipped       int64 // ticks dropped by the overlap policy
}

// Advance moves a cursor from Version to NextTick and enqueues Requests
// (each deduplicated on its key) in the same transaction; the counters are
// added to the cursor's.
type Advance struct {
	Name     string
	Version  int64
	NextTick time.Time
	LastTick time.Time // zero: unchanged
	// LastRequestID, when Requests is empty, is the request to record as
	// the last (one a trigger or backfill enqueued itself); "": unchanged.
	LastRequestID string
	Requests      []queue.Request
	Fired         int
	Missed        int
	Skipped       int
}

// CursorStore is what the scheduler needs of the state store beyond the
// queue.
type CursorStore interface {
	// InitCursor creates the cursor with next tick next unless it exists.
	InitCursor(ctx context.Context, name string, next time.Time) error
	// GetCursor returns the cursor (false if none).
	GetCursor(ctx context.Context, name string) (Cursor, bool, error)
	// ListCursors returns every cursor by name.
	ListCursors(ctx context.Context) ([]Cursor, error)
	// AdvanceCursor applies a with one conditional UPDATE on (name,
	// version); false (and nothing written) when another replica advanced
	// it first.
	AdvanceCursor(ctx context.Context, a Advance) (bool, error)
}
