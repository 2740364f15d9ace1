package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/projection"
	"github.com/dvtrun/dvtrun/engine/wake"
)

// checkInterval refuses a polling --interval too short to be meant.
func checkInterval(d time.Duration) error {
	if d < 10*time.Millisecond {
		return engine.Errorf(engine.CodeInvalidArgument, "--interval must be at least 10ms")
	}
	return nil
}

// leaseCheckEvery is how long a followed run may stay unchanged before
// follow asks whether a runner still holds it.
const leaseCheckEvery = 5 * time.Second

// follow shows a run live until it ends: each poll reads the log from the
// snapshot's watermark (the UI consumption rule of ExecutionSemantics
// §1.1: a non-contiguous fetch marks the snapshot STALE and resyncs), and
// prints what changed. It starts from the live snapshot table when the
// projection service keeps one, so a long run's log is not read whole. The
// run's final status decides the exit code, as for `run`.
func (c *cli) follow(ctx context.Context, st stateStore, meta engine.RunMetadata, interval time.Duration, asJSON bool) error {
	// Lag is measured by the projection service, against the store's
	// clock; a follower on another machine would measure its clock skew.
	// status is a read command: it never writes, so it records no alerts
	// (the runner and the projection service do).
	p := &projection.Projector{Events: st}
	snap, err := c.followStart(ctx, st, p, meta.RunID)
	if err != nil {
		return err
	}
	w := c.stdout
	out := &followPrinter{c: c, asJSON: asJSON}
	if !asJSON {
		fmt.Fprintf(w, "Following run %s (plan %s@%s); Ctrl-C stops following, not the run.\n", meta.RunID, engine.EscapeControl(meta.PlanID), engine.EscapeControl(meta.PlanVersion))
	}
	out.changes(engine.Snapshot{}, snap)
	lastChange, runnerGone := time.Now(), false
	// With wake-ups the interval is the fallback: an append to this run
	// ends the wait.
	var woken <-chan string
	if src := wakeupsOf(st); src != nil {
		ids, cancel := src.Subscribe(wake.Events)
		defer cancel()
		woken = ids
	}
	thisRun := func(id string) bool { return id == meta.RunID }
	for !snap.Status.Terminal() {
		if woken != nil {
			err = wake.Wait(ctx, woken, thisRun, interval)
		} else {
			err = sleepCtx(ctx, interval)
		}
		if err != nil {
			return err
		}
		next, err := p.Refresh(ctx, snap)
		if err != nil {
			return err
		}
		if out.changes(snap, next) {
			lastChange = time.Now()
		} else if time.Since(lastChange) >= leaseCheckEvery {
			lastChange = time.Now()
			l, held, err := st.GetLease(ctx, meta.RunID)
			if err != nil {
				return err
			}
			if gone := !held || !l.Live; gone != runnerGone && !asJSON {
				runnerGone = gone
				if gone {
					out.line("run", fmt.Sprintf("%s, and no runner holds it: it continues when resumed (`dvtrun resume %s`) or taken over by a worker", next.Status, meta.RunID))
				} else {
					out.line("run", fmt.Sprintf("%s, owned by %s", next.Status, engine.EscapeControl(l.Owner)))
				}
			}
		}
		snap = next
	}
	if !asJSON {
		fmt.Fprintf(w, "Run %s %s\n", meta.RunID, snap.Status)
	}
	return runOutcome(meta.RunID, snap)
}

// followStart is the first snapshot: the stored live snapshot brought up to
// date when there is one, else the whole log.
func (c *cli) followStart(ctx context.Context, st stateStore, p *projection.Projector, runID string) (engine.Snapshot, error) {
	state, version, err := st.LoadSnapshot(ctx, runID)
	if err != nil {
		return engine.Snapshot{}, err
	}
	if version > 0 {
		if stored, err := engine.UnmarshalSnapshotState(state); err == nil && stored.RunID == runID {
			return p.Refresh(ctx, stored)
		}
	}
	return p.Load(ctx, runID)
}

// followPrinter prints the difference between two snapshots of a run, as
// text lines or (asJSON) one JSON snapshot per change.
type followPrinter struct {
	c      *cli
	asJSON bool
}

// changes prints what moved from prev to next and reports whether anything
// did.
func (o *followPrinter) changes(prev, next engine.Snapshot) bool {
	// Steps first (the run's state follows from theirs), but for the first
	// picture, which starts with the run.
	var lines [][2]string
	if prev.Status == "" {
		lines = append(lines, [2]string{"run", runLine(next)})
	}
	for _, s := range next.Steps {
		old, _ := prev.Step(s.StepID)
		if old.Status == s.Status && old.LogicalAttemptID == s.LogicalAttemptID && old.EngineAttemptID == s.EngineAttemptID {
			continue
		}
		if s.Status == engine.StepStatusPending {
			continue
		}
		lines = append(lines, [2]string{"step", o.stepLine(s)})
	}
	if prev.Status != "" && runLine(prev) != runLine(next) {
		lines = append(lines, [2]string{"run", runLine(next)})
	}
	if len(lines) == 0 {
		return false
	}
	if o.asJSON {
		b, _ := json.Marshal(struct {
			engine.Snapshot
			InFlight int `json:"inFlight"`
		}{next, next.InFlight()})
		fmt.Fprintln(o.c.stdout, string(b))
		return true
	}
	for _, l := range lines {
		o.line(l[0], l[1])
	}
	return true
}

func (o *followPrinter) line(kind, text string) {
	fmt.Fprintf(o.c.stdout, "%s  %-4s  %s\n", time.Now().Format("15:04:05.000"), kind, o.c.redact(text))
}

// runLine is the run's state as one line: PAUSED says whether steps are
// still draining and how many.
func runLine(s engine.Snapshot) string {
	if s.Status == "" {
		return ""
	}
	var b strings.Builder
	b.WriteString(string(s.Status))
	if s.Status == engine.StatusPaused {
		if n := s.InFlight(); n > 0 {
			fmt.Fprintf(&b, " (%s: %d step(s) in flight)", engine.SubstatusDraining, n)
		} else {
			b.WriteString(" (drained: no step in flight)")
		}
	}
	if s.Stale {
		b.WriteString(" STALE (resynced after a non-contiguous fetch)")
	}
	if s.Inconsistent {
		fmt.Fprintf(&b, " INCONSISTENT (%d event(s) ignored)", len(s.Violations))
	}
	if s.Error != nil {
		fmt.Fprintf(&b, ": %s: %s", s.Error.Code, oneLine(s.Error.Message))
	}
	return engine.EscapeControl(b.String())
}

func (o *followPrinter) stepLine(s engine.StepSnapshot) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-40s %s", s.StepID, s.Status)
	switch s.Status {
	case engine.StepStatusRunning:
		fmt.Fprintf(&b, " (attempt %d.%d)", s.LogicalAttemptID, s.EngineAttemptID)
	case engine.StepStatusSuccess:
		fmt.Fprintf(&b, " in %s", fmtMs(s.DurationMs, true))
	case engine.StepStatusFailed:
		fmt.Fprintf(&b, " in %s", fmtMs(s.DurationMs, true))
		if s.Error != nil {
			fmt.Fprintf(&b, ": %s: %s", s.Error.Code, oneLine(s.Error.Message))
		}
	case engine.StepStatusSkipped:
		if s.SkipReason != "" {
			b.WriteString(": " + oneLine(s.SkipReason))
		}
	}
	return engine.EscapeControl(b.String())
}
