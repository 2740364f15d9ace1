package main

import (
	"context"
	"fmt"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/config"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/queue"
	"github.com/dvtrun/dvtrun/engine/selection"
)

// targetName is the name of the config target the command runs on ("":
// the config has no targets).
func (c *cli) targetName() string {
	if c.target == nil {
		return ""
	}
	return c.target.name
}

// shapeSelection evaluates a request's selection on its plan: nil when it
// selects by neither --select nor --exclude (the whole plan); an error
// when it selects no step.
func shapeSelection(p *plan.Plan, sh queue.Shape) (*engine.Selection, error) {
	if len(sh.Select) == 0 && len(sh.Exclude) == 0 {
		return nil, nil
	}
	res, err := selection.Select(p, selection.Spec{Select: sh.Select, Exclude: sh.Exclude})
	if err != nil {
		return nil, err
	}
	if len(res.Steps) == 0 {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "the request's selection (select %q, exclude %q) selects no step of plan %s", sh.Select, sh.Exclude, p.PlanID)
	}
	return &engine.Selection{Select: sh.Select, Exclude: sh.Exclude, IndirectSelection: string(selection.Eager), Steps: res.Steps}, nil
}

// scheduleShape is what a configured schedule's runs do beyond its plan;
// the target is the schedule's, else the command's.
func (c *cli) scheduleShape(s config.Schedule) queue.Shape {
	sh := queue.Shape{Target: s.Target, Vars: s.Vars, FullRefresh: s.FullRefresh}
	if sh.Target == "" {
		sh.Target = c.targetName()
	}
	if s.Select != "" {
		sh.Select = []string{s.Select}
	}
	if s.Exclude != "" {
		sh.Exclude = []string{s.Exclude}
	}
	return sh
}

// requestWarehouse is the warehouse a claimed request runs on: the
// worker's own, or — for a request of another target that keeps its runs
// in the same state store — that target's. A request whose target this
// worker's config does not know, or that belongs to another store, fails
// with CONFIG_INVALID and goes back to the queue (another worker may know
// the target): running it on this worker's warehouse would be running
// prod's plan on dev's tables.
func (x *cliExec) requestWarehouse(ctx context.Context, target string) (wh warehouse, done func(), err error) {
	if target == "" || target == x.c.targetName() {
		return x.wh, func() {}, nil
	}
	if x.cfg == nil || x.cfg.Targets[target] == nil {
		return nil, nil, engine.Errorf(engine.CodeConfigInvalid, "the request runs on target %s, which this worker's configuration does not have", engine.QuoteText(target))
	}
	t, err := x.c.resolveTarget(x.cfg, target)
	if err != nil {
		return nil, nil, err
	}
	if t.Store != x.c.g.store {
		return nil, nil, engine.Errorf(engine.CodeConfigInvalid, "the request runs on target %s, whose runs are kept in another state store than this worker's: start a worker with --target %s", target, target)
	}
	if t.Engine == config.EngineTemporal {
		// Its runs are workflows: only a worker of that target starts them.
		return nil, nil, engine.Errorf(engine.CodeConfigInvalid, "the request runs on target %s, which runs on Temporal: a `dvtrun worker --target %s` starts its workflows", target, target)
	}
	w, _, err := x.c.openWarehouseURL(ctx, t.Warehouse, nil)
	if err != nil {
		return nil, nil, err
	}
	return w, func() { w.Close() }, nil
}

// useRecordedTarget makes resume and retry run where the run ran: its
// recorded target's warehouse, unless --warehouse says otherwise. An
// explicit --target (or DVT_TARGET) naming another target is refused.
func (c *cli) useRecordedTarget(runID, recorded string) error {
	if recorded == "" || recorded == c.targetName() {
		return nil
	}
	if c.g.target != "" {
		return engine.Errorf(engine.CodeInvalidArgument, "run %s ran on target %s, not %s: it continues there (leave out --target, or give --target %s)", runID, recorded, c.g.target, recorded)
	}
	if c.g.flagged["warehouse"] {
		return nil
	}
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	if cfg.Targets[recorded] == nil {
		return engine.Errorf(engine.CodeConfigInvalid, "run %s ran on target %s, which the configuration %s does not have: give --warehouse", runID, recorded, c.g.config)
	}
	t, err := c.resolveTarget(cfg, recorded)
	if err != nil {
		return err
	}
	c.g.warehouse = t.Warehouse
	c.target = &chosenTarget{name: recorded, t: t}
	c.setConfigNote(fmt.Sprintf("config %s, target %s (the run's)", c.g.config, recorded))
	return nil
}
