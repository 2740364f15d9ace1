package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/stepview"
)

// readLedger asks the warehouse's step ledger about the step's latest
// logical attempt, unless the log already says or the step never ran. A
// SQLite warehouse that does not exist is not created to be asked.
func (c *cli) readLedger(ctx context.Context, v *stepview.View, runTarget string) {
	if !v.NeedsLedger() {
		return
	}
	if why := c.useRunWarehouse(runTarget); why != "" {
		v.Ledger.NotCheckedWhy = why
		return
	}
	t, err := c.parseTarget("warehouse", c.g.warehouse)
	if err != nil {
		v.Ledger.NotCheckedWhy = err.Error()
		return
	}
	if t.kind == "sqlite" {
		if _, err := os.Stat(t.path); err != nil {
			v.Ledger.NotCheckedWhy = "the warehouse " + t.path + " does not exist"
			return
		}
	}
	wh, _, err := c.openWarehouse(ctx)
	if err != nil {
		v.Ledger.NotCheckedWhy = err.Error()
		return
	}
	defer wh.Close()
	l, ok := wh.(engine.Ledger)
	if !ok {
		v.Ledger.NotCheckedWhy = "the warehouse keeps no step ledger"
		return
	}
	v.AskLedger(ctx, l)
}

// useRunWarehouse points --warehouse at the warehouse of the target the
// run ran on (its RunQueued says which), unless --warehouse was given or
// the command's own target is that one; else it says why the ledger
// cannot be asked.
func (c *cli) useRunWarehouse(runTarget string) string {
	if runTarget == "" || runTarget == c.targetName() || c.g.flagged["warehouse"] {
		return ""
	}
	cfg, err := c.loadConfig()
	if err != nil {
		return err.Error()
	}
	if cfg.Targets[runTarget] == nil {
		where := "no configuration file was found"
		if c.g.config != "" {
			where = "the configuration " + c.g.config + " does not have it"
		}
		return fmt.Sprintf("the run ran on target %s and %s: give --warehouse", runTarget, where)
	}
	t, err := c.resolveTarget(cfg, runTarget)
	if err != nil {
		return err.Error()
	}
	c.g.warehouse = t.Warehouse
	return ""
}

func (c *cli) printStepView(v stepview.View) {
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

func (c *cli) ledgerLine(l *stepview.Ledger, succeeded bool) string {
	switch {
	case l == nil:
		return "not checked"
	case !l.Checked:
		return "not checked: " + c.cleanLine(l.NotCheckedWhy)
	case !l.Committed && succeeded:
		return fmt.Sprintf("no entry for logical attempt %d: its work did not commit through the ledger (a step that cannot join a transaction, such as Snowflake DDL, is idempotent instead)", l.LogicalAttempt)
	case !l.Committed:
		return fmt.Sprintf("no entry for logical attempt %d (nothing committed)", l.LogicalAttempt)
	case l.FromPayload:
		return fmt.Sprintf("attempt %d committed at %s (engine attempt %d, fence %d); the step completed from it without running again", l.LogicalAttempt, fmtTime(l.CommittedAt), l.EngineAttempt, l.Fence)
	}
	return fmt.Sprintf("attempt %d committed at %s (engine attempt %d, fence %d)", l.LogicalAttempt, fmtTime(l.CommittedAt), l.EngineAttempt, l.Fence)
}
