package audit

import (
	"context"

	"github.com/dvtrun/dvtrun/engine"
)

// RunHead is a run's sequence row and where its chain starts.
type RunHead struct {
	RunID    string
	Status   engine.RunStatus
	NextSeq  int64
	FirstSeq int64
	// RetainedAt is when retention removed the run's payloads (its
	// dvt_audit_retention row, engine.TimeFormat); "" if it did not.
	RetainedAt string
	// LastHash is the sequence row's chain head (last_hash): the last
	// chained event's hash, Genesis before the first.
	LastHash string
}

// RunIDs are the runs found in two tables, each sorted.
type RunIDs struct {
	Events []string // distinct run_id of dvt_run_events
	Runs   []string // run_id of dvt_runs
}

// StoredCheckpoint is a row of dvt_audit_checkpoints.
type StoredCheckpoint struct {
	Size int64
	Root string // base64, as in the note
	Note []byte
}

// Log is the global log and its checkpoints, as the checkpointer and the
// verifier use them (store.AuditSQL implements it).
type Log interface {
	// AssignLogIndexes gives every chained event not yet in the log the
	// next indexes and returns how many.
	AssignLogIndexes(ctx context.Context) (int64, error)
	LogEntries(ctx context.Context, from int64) ([]LogEntry, error)
	Checkpoints(ctx context.Context) ([]StoredCheckpoint, error)
}

// Store is what verification reads (the state stores implement it).
type Store interface {
	Log
	AuditRuns(ctx context.Context, runID string) ([]RunHead, error)
	// AuditRunIDs lists the runs of dvt_run_events and of dvt_runs (all,
	// or the one given), which Verify cross-checks with the sequence rows
	// and the global log.
	AuditRunIDs(ctx context.Context, runID string) (RunIDs, error)
	Links(ctx context.Context, runID string) (map[int64]StoredLink, error)
	ListEvents(ctx context.Context, runID string, afterSeq int64, limit int) ([]engine.RunEventRecord, error)
	// Retentions returns the rows of dvt_audit_retention with their
	// signed records.
	Retentions(ctx context.Context) ([]Retention, error)
}

// Guard is one check of `audit doctor`: how the store enforces
// append-only for this connection.
type Guard struct {
	Check  string
	OK     bool
	Detail string
}
