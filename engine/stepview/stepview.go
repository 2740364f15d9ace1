// Package stepview is one step of a run as its event log recorded it: the
// SQL it sent to the warehouse, each start and outcome with its attempt and
// error, rows, warehouse query ids (with a QUERY_HISTORY query to paste
// into Snowflake), the warehouse ledger's entry and a failing test's first
// rows. It is a pure function of the log (and, for the ledger, of what the
// warehouse answers): `dvtrun status RUN --step ID` prints it, and the
// console shows the same.
package stepview

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// View is one step of a run.
type View struct {
	RunID    string              `json:"runId"`
	Step     engine.StepSnapshot `json:"step"`
	Kind     string              `json:"kind,omitempty"`
	Relation string              `json:"relation,omitempty"`
	// SQL is the step's SQL as rendered and sent to the warehouse, from
	// its latest outcome (secrets redacted); "" before one is recorded.
	SQL          string            `json:"sql,omitempty"`
	Attempts     []Attempt         `json:"attempts"`
	RowsAffected int64             `json:"rowsAffected,omitempty"`
	RowCount     int64             `json:"rowCount,omitempty"`
	Failures     int64             `json:"failures,omitempty"`
	QueryIDs     []string          `json:"queryIds,omitempty"`
	QueryHistory string            `json:"queryHistorySql,omitempty"`
	FailingRows  *engine.RowSample `json:"failingRows,omitempty"`
	Ledger       *Ledger           `json:"ledger"`
}

// Attempt is one of the step's events: its start and each outcome.
type Attempt struct {
	RunSeq         int64             `json:"runSeq"`
	EventType      engine.EventType  `json:"eventType"`
	LogicalAttempt int               `json:"logicalAttempt"`
	EngineAttempt  int               `json:"engineAttempt"`
	EmittedAt      time.Time         `json:"emittedAt"`
	DurationMs     int64             `json:"durationMs,omitempty"`
	Error          *engine.ErrorInfo `json:"error,omitempty"`
	Reason         string            `json:"reason,omitempty"`
}

// Ledger is what the warehouse's step ledger says of the step's latest
// logical attempt: committed (when, by which engine attempt and fence) or
// not, or why it was not asked.
type Ledger struct {
	Checked        bool      `json:"checked"`
	Committed      bool      `json:"committed"`
	EngineAttempt  int       `json:"engineAttempt,omitempty"`
	Fence          int64     `json:"fence,omitempty"`
	CommittedAt    time.Time `json:"committedAt,omitzero"`
	NotCheckedWhy  string    `json:"notChecked,omitempty"`
	FromPayload    bool      `json:"recordedInLog,omitempty"` // the outcome says it came from the ledger (a resumed step)
	LogicalAttempt int       `json:"logicalAttempt"`
}

// outcomePayload is what a StepCompleted/StepFailed payload holds
// (engine/runner's stepPayload).
type outcomePayload struct {
	engine.StepResult
	DurationMs int64             `json:"durationMs"`
	Error      *engine.ErrorInfo `json:"error"`
	SQL        string            `json:"sql"`
	Ledger     *struct {
		EngineAttempt int       `json:"engineAttempt"`
		Fence         int64     `json:"fence"`
		CommittedAt   time.Time `json:"committedAt"`
	} `json:"ledger"`
}

// Build collects step stepID of run runID from its snapshot and events. A
// step the log never mentions is INVALID_ARGUMENT naming the run's steps
// (the first 20).
func Build(runID string, snap engine.Snapshot, evs []engine.RunEventRecord, stepID string) (View, error) {
	v := View{RunID: runID, Attempts: []Attempt{}}
	s, found := snap.Step(stepID)
	if !found {
		var ids []string
		for i, s := range snap.Steps {
			if i == 20 {
				ids = append(ids, "…")
				break
			}
			ids = append(ids, engine.EscapeControl(s.StepID))
		}
		return v, engine.Errorf(engine.CodeInvalidArgument, "run %s has no step %s (its steps: %s)", runID, engine.QuoteText(stepID), strings.Join(ids, ", "))
	}
	v.Step = s
	for _, e := range evs {
		if e.StepID != stepID {
			continue
		}
		a := Attempt{RunSeq: e.RunSeq, EventType: e.EventType, LogicalAttempt: e.LogicalAttemptID, EngineAttempt: e.EngineAttemptID, EmittedAt: e.EmittedAt}
		switch e.EventType {
		case engine.StepStarted:
			var p struct {
				Kind     string `json:"kind"`
				Relation string `json:"relation"`
			}
			if json.Unmarshal(e.Payload, &p) == nil {
				v.Kind, v.Relation = p.Kind, p.Relation
			}
		case engine.StepCompleted, engine.StepFailed:
			var p outcomePayload
			if len(e.Payload) > 0 && json.Unmarshal(e.Payload, &p) != nil {
				break // validated on append; a payload that does not decode shows nothing
			}
			a.DurationMs, a.Error = p.DurationMs, p.Error
			// The latest outcome is the step's result.
			v.SQL, v.RowsAffected, v.RowCount, v.Failures = p.SQL, p.RowsAffected, p.RowCount, p.Failures
			v.QueryIDs, v.FailingRows = p.QueryIDs, p.FailingRows
			v.Ledger = nil
			if p.Ledger != nil {
				v.Ledger = &Ledger{Checked: true, Committed: true, FromPayload: true, EngineAttempt: p.Ledger.EngineAttempt,
					Fence: p.Ledger.Fence, CommittedAt: p.Ledger.CommittedAt, LogicalAttempt: e.LogicalAttemptID}
			}
		case engine.StepSkipped:
			var p struct {
				Reason string `json:"reason"`
			}
			_ = json.Unmarshal(e.Payload, &p)
			a.Reason = p.Reason
		}
		v.Attempts = append(v.Attempts, a)
	}
	v.QueryHistory = QueryHistorySQL(v.QueryIDs)
	return v, nil
}

// NeedsLedger reports whether the warehouse's ledger is worth asking: the
// outcome does not already say, and the step ran. When it is not, Ledger
// says why (or what the outcome recorded).
func (v *View) NeedsLedger() bool {
	if v.Ledger != nil {
		return false
	}
	v.Ledger = &Ledger{LogicalAttempt: v.Step.LogicalAttemptID}
	if v.Step.LogicalAttemptID == 0 || v.Step.Status == engine.StepStatusSkipped {
		v.Ledger.NotCheckedWhy = "the step never ran"
		return false
	}
	return true
}

// AskLedger records what l says of the step's latest logical attempt, or
// why it could not say (err's text, for the operator).
func (v *View) AskLedger(ctx context.Context, l engine.Ledger) {
	if v.Ledger == nil {
		v.Ledger = &Ledger{LogicalAttempt: v.Step.LogicalAttemptID}
	}
	e, found, err := l.LookupStep(ctx, v.RunID, v.Step.StepID, v.Step.LogicalAttemptID)
	if err != nil {
		v.Ledger.NotCheckedWhy = err.Error()
		return
	}
	v.Ledger.Checked, v.Ledger.Committed = true, found
	if found {
		v.Ledger.EngineAttempt, v.Ledger.Fence, v.Ledger.CommittedAt = e.EngineAttempt, e.Fence, e.CommittedAt
	}
}

// QueryHistorySQL is a Snowflake query an operator can paste to see the
// step's statements in QUERY_HISTORY. Query ids are quoted as literals,
// quotes doubled; it is shown, never executed by dvtrun.
func QueryHistorySQL(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	lits := make([]string, len(ids))
	for i, id := range ids {
		lits[i] = "'" + strings.ReplaceAll(id, "'", "''") + "'"
	}
	return "SELECT query_id, query_text, execution_status, error_code, error_message, start_time, total_elapsed_time, rows_produced\n" +
		"FROM TABLE(INFORMATION_SCHEMA.QUERY_HISTORY(END_TIME_RANGE_START => DATEADD('day', -7, CURRENT_TIMESTAMP()), RESULT_LIMIT => 10000))\n" +
		"WHERE query_id IN (" + strings.Join(lits, ", ") + ")\nORDER BY start_time;"
}
