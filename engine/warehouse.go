package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"time"
)

// Warehouse executes a step's SQL. The SQLite, Postgres and Snowflake
// warehouses implement it; the local runner and the Temporal activities
// consume it.
type Warehouse interface {
	// RunStep executes one step. Its error is for what kept the step from
	// running (the SQL failed, the warehouse is unreachable); a failed dbt
	// test is a result with Failures>0, not an error. Transient failures (busy, lock timeout, network) are
	// marked with MarkTransient so the runner retries them.
	RunStep(ctx context.Context, req StepRequest) (StepResult, error)
}

// StepRequest is what a warehouse needs to execute a step.
type StepRequest struct {
	RunID        string
	StepID       string
	Kind         string // seed | model | test | sql
	Relation     string // the table or view a seed or model builds
	Materialized string // table | view | incremental (models; ephemeral ones are inlined, never run)
	SQL          string // model/test/sql body, secrets already resolved
	SeedPath     string // seeds: the CSV file, resolved against the plan's directory (messages)
	// SeedData is the seed's CSV as the bundle holds it (Plan.Seeds):
	// warehouses load these bytes, never SeedPath from disk, so a run from
	// a stored bundle needs no file (OpenSeed).
	SeedData []byte
	Severity string // tests
	// Params are bound to the statement's ? placeholders in order (secrets
	// are bound, never spliced, where the SQL allows it).
	Params []any
	// UniqueKey and IncrementalFilter are an incremental model's (PlanStep);
	// the filter's {{ this }} is left for the warehouse to render
	// (RenderThis) in its own quoting.
	UniqueKey         []string
	IncrementalFilter string
	// FullRefresh rebuilds an incremental model from its full select, as
	// on its first run (dvtrun run --full-refresh).
	FullRefresh bool
	// QueryTag is set on the warehouse session (Snowflake QUERY_TAG): JSON
	// with run_id, step_id and attempts.
	QueryTag string
	// LogicalAttempt, EngineAttempt and Fence identify the attempt for the
	// warehouse's step ledger (see Ledger): a step whose work can join a
	// transaction commits it with the ledger row of (RunID, StepID,
	// LogicalAttempt), once. Fence is the runner's lease fence token; a
	// warehouse that has seen a higher fence for the run refuses the commit
	// with LEASE_LOST. LogicalAttempt 0 means no ledger (direct callers).
	LogicalAttempt int
	EngineAttempt  int
	Fence          int64
}

// StepResult is what a step produced. It becomes StepCompleted's payload.
type StepResult struct {
	RowsAffected int64          `json:"rowsAffected,omitempty"`
	RowCount     int64          `json:"rowCount,omitempty"` // rows in the built relation (seeds, table models)
	Failures     int64          `json:"failures,omitempty"` // rows a test returned
	QueryIDs     []string       `json:"queryIds,omitempty"` // warehouse query ids (Snowflake QUERY_HISTORY)
	Artifacts    []ArtifactRef  `json:"artifacts,omitempty"`
	Outputs      map[string]any `json:"outputs,omitempty"`
	// FailingRows are the first rows a failing test returned (at most
	// FailingRowsSample), for the operator to see why it failed.
	FailingRows *RowSample `json:"failingRows,omitempty"`
	// Ledger is set when the step's logical attempt had committed already
	// (by this runner before a crash, or by another runner): the result is
	// the recorded one and nothing was executed again.
	Ledger *LedgerEntry `json:"-"`
}

// FailingRowsSample bounds the rows of a failing test kept in its
// StepFailed payload: enough to see why, never a copy of the data.
const FailingRowsSample = 5

// RowSample is a few rows of a query's result, values as the driver gave
// them (text, numbers, null).
type RowSample struct {
	Columns []string `json:"columns"`
	Rows    [][]any  `json:"rows"`
}

// LedgerEntry is a step attempt's row in a warehouse's step ledger: the
// proof, committed in the same transaction as the step's work, that the
// logical attempt took effect, with the result it produced.
type LedgerEntry struct {
	RunID          string
	StepID         string
	LogicalAttempt int
	EngineAttempt  int
	Fence          int64
	Result         StepResult
	CommittedAt    time.Time
}

// DecodeLedgerEntry completes e, read from a warehouse's ledger row, with
// the row's result column (the StepResult as JSON). The returned entry's
// Result.Ledger points at the entry: the mark of a recorded result.
func DecodeLedgerEntry(e LedgerEntry, result []byte) (LedgerEntry, error) {
	if err := json.Unmarshal(result, &e.Result); err != nil {
		return LedgerEntry{}, Errorf(CodeStoreCorrupt, "step ledger row of %s/%s attempt %d: %w", e.RunID, e.StepID, e.LogicalAttempt, err)
	}
	entry := e
	e.Result.Ledger = &entry
	return e, nil
}

// Ledger is implemented by warehouses that record step commits (both of
// dvtrun's). The runner looks a step the log shows RUNNING up here before
// running it again: a committed attempt is completed with its recorded
// result instead of being repeated.
type Ledger interface {
	LookupStep(ctx context.Context, runID, stepID string, logicalAttempt int) (LedgerEntry, bool, error)
}

type transientError struct{ err error }

func (e transientError) Error() string { return e.err.Error() }
func (e transientError) Unwrap() error { return e.err }

// MarkTransient marks err as worth retrying.
func MarkTransient(err error) error {
	if err == nil {
		return nil
	}
	return transientError{err}
}

// IsTransient reports whether err was marked with MarkTransient.
func IsTransient(err error) bool {
	var t transientError
	return errors.As(err, &t)
}

// OpenSeed returns a seed step's CSV: SeedData, or for a request built
// without it (a caller outside the runner) the file at SeedPath.
func (r StepRequest) OpenSeed() (io.ReadCloser, error) {
	if r.SeedData != nil {
		return io.NopCloser(bytes.NewReader(r.SeedData)), nil
	}
	return os.Open(r.SeedPath)
}
