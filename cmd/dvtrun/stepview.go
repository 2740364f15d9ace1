package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// stepView is `dvtrun status RUN --step ID`: one step as its events
// recorded it. Everything comes from the log but the ledger entry, which
// is the warehouse's.
type stepView struct {
	RunID    string              `json:"runId"`
	Step     engine.StepSnapshot `json:"step"`
	Kind     string              `json:"kind,omitempty"`
	Relation string              `json:"relation,omitempty"`
	// SQL is the step's SQL as rendered and sent to the warehouse, from
	// its latest outcome (secrets redacted); "" before one is recorded.
	SQL          string            `json:"sql,omitempty"`
	Attempts     []stepAttempt     `json:"attempts"`
	RowsAffected int64             `json:"rowsAffected,omitempty"`
	RowCount     int64             `json:"rowCount,omitempty"`
	Failures     int64             `json:"failures,omitempty"`
	QueryIDs     []string          `json:"queryIds,omitempty"`
	QueryHistory string            `json:"queryHistorySql,omitempty"`
	FailingRows  *engine.RowSample `json:"failingRows,omitempty"`
	Ledger       *ledgerView       `json:"ledger"`
}

// stepAttempt is one of the step's events: its start and each outcome.
type stepAttempt struct {
	RunSeq         int64             `json:"runSeq"`
	EventType      engine.EventType  `json:"eventType"`
	LogicalAttempt int               `json:"logicalAttempt"`
	EngineAttempt  int               `json:"engineAttempt"`
	EmittedAt      time.Time         `json:"emittedAt"`
	DurationMs     int64             `json:"durationMs,omitempty"`
	Error          *engine.ErrorInfo `json:"error,omitempty"`
	Reason         string            `json:"reason,omitempty"`
}

// ledgerView is what the warehouse's step ledger says of the step's
// latest logical attempt: committed (with when, by which engine attempt
// and fence) or not, or why it could not be read.
type ledgerView struct {
	Checked        bool      `json:"checked"`
	Committed      bool      `json:"committed"`
	EngineAttempt  int       `json:"engineAttempt,omitempty"`
	Fence          int64     `json:"fence,omitempty"`
	CommittedAt    time.Time `json:"committedAt,omitzero"`
	NotCheckedWhy  string    `json:"notChecked,omitempty"`
	FromPayload    bool      `json:"recordedInLog,omitempty"` // the outcome says it came from the ledger (a resumed step)
	LogicalAttempt int       `json:"logicalAttempt"`
}

// outcomePayload is what status reads of a StepCompleted/StepFailed payload
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

// buildStepView collects the step's events. RUN_NOT_FOUND-like input
// errors: a step the log never mentions is INVALID_ARGUMENT naming the
// run's steps.
func (c *cli) buildStepView(meta engine.RunMetadata, snap engine.Snapshot, evs []engine.RunEventRecord, stepID string) (stepView, error) {
	v := stepView{RunID: meta.RunID, Attempts: []stepAttempt{}}
	found := false
	for _, s := range snap.Steps {
		if s.StepID == stepID {
			v.Step, found = s, true
		}
	}
	if !found {
		var ids []string
		for i, s := range snap.Steps {
			if i == 20 {
				ids = append(ids, "…")
				break
			}
			ids = append(ids, c.clean(s.StepID))
		}
		return v, engine.Errorf(engine.CodeInvalidArgument, "run %s has no step %s (its steps: %s)", meta.RunID, engine.QuoteText(c.redact(stepID)), strings.Join(ids, ", "))
	}
	for _, e := range evs {
		if e.StepID != stepID {
			continue
		}
		a := stepAttempt{RunSeq: e.RunSeq, EventType: e.EventType, LogicalAttempt: e.LogicalAttemptID, EngineAttempt: e.EngineAttemptID, EmittedAt: e.EmittedAt}
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
				v.Ledger = &ledgerView{Checked: true, Committed: true, FromPayload: true, EngineAttempt: p.Ledger.EngineAttempt,
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
	v.QueryHistory = queryHistorySQL(v.QueryIDs)
	return v, nil
}

// queryHistorySQL is a Snowflake query an operator can paste to see the
// step's statements in QUERY_HISTORY. Query ids are quoted as literals,
// quotes doubled; it is printed, never executed by dvtrun.
func queryHistorySQL(ids []string) string {
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

// readLedger asks the warehouse's step ledger about the step's latest
// logical attempt, unless the outcome already says it came from there. A
// SQLite warehouse that does not exist is not created to be asked.
func (c *cli) readLedger(ctx context.Context, v *stepView) {
	if v.Ledger != nil {
		return
	}
	lv := &ledgerView{LogicalAttempt: v.Step.LogicalAttemptID}
	v.Ledger = lv
	if v.Step.LogicalAttemptID == 0 || v.Step.Status == engine.StepStatusSkipped {
		lv.NotCheckedWhy = "the step never ran"
		return
	}
	t, err := c.parseTarget("warehouse", c.g.warehouse)
	if err != nil {
		lv.NotCheckedWhy = c.cleanLine(err.Error())
		return
	}
	if t.kind == "sqlite" {
		if _, err := os.Stat(t.path); err != nil {
			lv.NotCheckedWhy = "the warehouse " + c.clean(t.path) + " does not exist"
			return
		}
	}
	wh, _, err := c.openWarehouse(ctx)
	if err != nil {
		lv.NotCheckedWhy = c.cleanLine(err.Error())
		return
	}
	defer wh.Close()
	l, ok := wh.(engine.Ledger)
	if !ok {
		lv.NotCheckedWhy = "the warehouse keeps no step ledger"
		return
	}
	e, found, err := l.LookupStep(ctx, v.RunID, v.Step.StepID, v.Step.LogicalAttemptID)
	if err != nil {
		lv.NotCheckedWhy = c.cleanLine(err.Error())
		return
	}
	lv.Checked, lv.Committed = true, found
	if found {
		lv.EngineAttempt, lv.Fence, lv.CommittedAt = e.EngineAttempt, e.Fence, e.CommittedAt
	}
}

func (c *cli) printStepView(v stepView) {
	w := c.stdout
	tw := newTable(w)
	fmt.Fprintf(tw, "Run:\t%s\n", c.clean(v.RunID))
	kind := ""
	if v.Kind != "" {
		kind = " (" + c.clean(v.Kind) + ")"
	}
	fmt.Fprintf(tw, "Step:\t%s%s\n", c.clean(v.Step.StepID), kind)
	if v.Relation != "" {
		fmt.Fprintf(tw, "Relation:\t%s\n", c.clean(v.Relation))
	}
	fmt.Fprintf(tw, "Status:\t%s (attempt %d.%d)\n", v.Step.Status, v.Step.LogicalAttemptID, v.Step.EngineAttemptID)
	if !v.Step.CompletedAt.IsZero() {
		fmt.Fprintf(tw, "Duration:\t%s\n", fmtMs(v.Step.DurationMs, true))
	}
	if v.Step.Error != nil {
		fmt.Fprintf(tw, "Error:\t%s: %s\n", c.clean(v.Step.Error.Code), c.cleanLine(v.Step.Error.Message))
	}
	if v.RowsAffected != 0 {
		fmt.Fprintf(tw, "Rows affected:\t%d\n", v.RowsAffected)
	}
	if v.RowCount != 0 {
		fmt.Fprintf(tw, "Row count:\t%d\n", v.RowCount)
	}
	if v.Failures != 0 {
		fmt.Fprintf(tw, "Failing rows:\t%d\n", v.Failures)
	}
	fmt.Fprintf(tw, "Ledger:\t%s\n", c.ledgerLine(v.Ledger, v.Step.Status == engine.StepStatusSuccess))
	tw.Flush()

	fmt.Fprintln(w, "\nSQL (as sent to the warehouse, secrets redacted):")
	if v.SQL == "" {
		fmt.Fprintln(w, "  (none recorded: the step has no outcome yet, is a seed, or ran before dvtrun recorded SQL)")
	} else {
		for _, line := range strings.Split(strings.TrimRight(v.SQL, "\n"), "\n") {
			fmt.Fprintln(w, "  "+c.clean(line))
		}
	}

	fmt.Fprintln(w, "\nAttempts:")
	tw = newTable(w)
	fmt.Fprintln(tw, "SEQ\tEVENT\tATTEMPT\tAT\tDURATION\tDETAIL")
	for _, a := range v.Attempts {
		detail := a.Reason
		if a.Error != nil {
			detail = a.Error.Code + ": " + a.Error.Message
		}
		dur := ""
		if a.EventType == engine.StepCompleted || a.EventType == engine.StepFailed {
			dur = fmtMs(a.DurationMs, true)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d.%d\t%s\t%s\t%s\n", a.RunSeq, c.clean(string(a.EventType)), a.LogicalAttempt, a.EngineAttempt, fmtTime(a.EmittedAt), dur, c.cleanLine(detail))
	}
	tw.Flush()

	if fr := v.FailingRows; fr != nil {
		fmt.Fprintf(w, "\nFirst rows the test returned (%d of %d, redacted):\n", len(fr.Rows), v.Failures)
		tw = newTable(w)
		cols := make([]string, len(fr.Columns))
		for i, col := range fr.Columns {
			cols[i] = c.clean(col)
		}
		fmt.Fprintln(tw, "  "+strings.Join(cols, "\t"))
		for _, row := range fr.Rows {
			vals := make([]string, len(row))
			for i, x := range row {
				if x == nil {
					vals[i] = "NULL"
				} else {
					vals[i] = c.cleanLine(fmt.Sprint(x))
				}
			}
			fmt.Fprintln(tw, "  "+strings.Join(vals, "\t"))
		}
		tw.Flush()
	}

	if len(v.QueryIDs) > 0 {
		ids := make([]string, len(v.QueryIDs))
		for i, id := range v.QueryIDs {
			ids[i] = c.clean(id)
		}
		fmt.Fprintf(w, "\nWarehouse query ids: %s\n", strings.Join(ids, " "))
		fmt.Fprintln(w, "In Snowflake, their history:")
		for _, line := range strings.Split(v.QueryHistory, "\n") {
			fmt.Fprintln(w, "  "+c.clean(line))
		}
	}
}

func (c *cli) ledgerLine(l *ledgerView, succeeded bool) string {
	switch {
	case l == nil:
		return "not checked"
	case !l.Checked:
		return "not checked: " + l.NotCheckedWhy
	case !l.Committed && succeeded:
		return fmt.Sprintf("no entry for logical attempt %d: its work did not commit through the ledger (a step that cannot join a transaction, such as Snowflake DDL, is idempotent instead)", l.LogicalAttempt)
	case !l.Committed:
		return fmt.Sprintf("no entry for logical attempt %d (nothing committed)", l.LogicalAttempt)
	case l.FromPayload:
		return fmt.Sprintf("attempt %d committed at %s (engine attempt %d, fence %d); the step completed from it without running again", l.LogicalAttempt, fmtTime(l.CommittedAt), l.EngineAttempt, l.Fence)
	}
	return fmt.Sprintf("attempt %d committed at %s (engine attempt %d, fence %d)", l.LogicalAttempt, fmtTime(l.CommittedAt), l.EngineAttempt, l.Fence)
}
