package store

import (
	"context"
	"database/sql"
	"errors"

	"github.com/dvtrun/dvtrun/engine"
)

// LookupLedger reads a step attempt's row of a warehouse's step ledger
// with query (binds: run, step, logical attempt; columns: engine_attempt,
// fence, result as JSON text, committed_at as a time) on q — the pool or
// the step's transaction. ok is false when the attempt has no row; the
// entry's Result.Ledger points at the entry, marking the result recorded.
func LookupLedger(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, query, runID, stepID string, logical int) (engine.LedgerEntry, bool, error) {
	e := engine.LedgerEntry{RunID: runID, StepID: stepID, LogicalAttempt: logical}
	var result string
	err := q.QueryRowContext(ctx, query, runID, stepID, logical).Scan(&e.EngineAttempt, &e.Fence, &result, &e.CommittedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return engine.LedgerEntry{}, false, nil
	}
	if err != nil {
		return engine.LedgerEntry{}, false, err
	}
	e, err = engine.DecodeLedgerEntry(e, []byte(result))
	return e, err == nil, err
}
