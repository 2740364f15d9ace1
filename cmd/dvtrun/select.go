package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/selection"
)

// listFlag collects a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// selectFlags are dbt's --select, --exclude and --indirect-selection, on
// run and ls.
type selectFlags struct {
	sel, exc listFlag
	indirect string
}

func (f *selectFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.sel, "select", "dbt node selection `EXPR` (repeatable; spaces union, commas intersect): name, +name, name+2, @name, tag:, path:, file:, resource_type:, config.materialized:, package:")
	fs.Var(&f.sel, "s", "short for --select `EXPR`")
	fs.Var(&f.exc, "exclude", "leave out the steps `EXPR` selects (same syntax; their tests go too)")
	fs.StringVar(&f.indirect, "indirect-selection", string(selection.Eager), "which tests of selected steps run (`MODE`): eager (any parent selected), cautious (all), buildable (all selected or upstream), empty")
}

func (f *selectFlags) set() bool { return len(f.sel) > 0 || len(f.exc) > 0 }

// choose evaluates the flags on a plan. It returns the selection to record
// with a run (nil when no --select or --exclude was given: the whole plan)
// and warns, as dbt does, about each selector that matches nothing — unless
// nothing at all is selected and refuse is set: then the one error line
// says so.
func (c *cli) choose(p *plan.Plan, f selectFlags, refuse bool) (*engine.Selection, error) {
	mode, err := selection.ParseMode(f.indirect)
	if err != nil {
		return nil, err
	}
	res, err := selection.Select(p, selection.Spec{Select: f.sel, Exclude: f.exc, Indirect: mode})
	if err != nil {
		return nil, err
	}
	if refuse && f.set() && len(res.Steps) == 0 {
		hint := ""
		if len(res.Unmatched) > 0 {
			hint = didYouMeanStep(p, res.Unmatched[0])
		}
		return nil, engine.Errorf(engine.CodeInvalidArgument, "%s selects no step of plan %s%s (see dvtrun ls)", describeSelection(f), p.PlanID, hint)
	}
	for _, u := range res.Unmatched {
		fmt.Fprintf(c.stderr, "dvtrun: warning: the selection criterion %q does not match any step of plan %s%s\n", u, p.PlanID, didYouMeanStep(p, u))
	}
	if !f.set() {
		return nil, nil
	}
	return &engine.Selection{Select: f.sel, Exclude: f.exc, IndirectSelection: string(mode), Steps: res.Steps}, nil
}

// didYouMeanStep suggests, for a selector that names a step and matched
// none, the step name or id closest to it: "; did you mean \"orders\"?".
// Method selectors (tag:, path:…) get no guess.
func didYouMeanStep(p *plan.Plan, selector string) string {
	name := strings.TrimLeft(selector, "@+")
	name = strings.TrimRight(strings.TrimRight(name, "0123456789"), "+")
	if name == "" || strings.Contains(name, ":") || strings.ContainsAny(name, "*?[") {
		return ""
	}
	var names []string
	for _, s := range p.Steps {
		names = append(names, s.ID)
		if _, short, ok := strings.Cut(s.ID, "."); ok {
			names = append(names, short)
		}
	}
	if s := engine.Suggest(name, names); s != "" {
		return fmt.Sprintf("; did you mean %q?", s)
	}
	return ""
}

// describeSelection is the --select/--exclude part of a message.
func describeSelection(f selectFlags) string {
	var parts []string
	if len(f.sel) > 0 {
		parts = append(parts, fmt.Sprintf("--select %q", f.sel.String()))
	}
	if len(f.exc) > 0 {
		parts = append(parts, fmt.Sprintf("--exclude %q", f.exc.String()))
	}
	return strings.Join(parts, " ")
}

// lsStep is one step of `dvtrun ls --json`.
type lsStep struct {
	ID           string   `json:"id"`
	Kind         string   `json:"kind"`
	Name         string   `json:"name"`
	Materialized string   `json:"materialized,omitempty"`
	Tags         []string `json:"tags,omitempty"`
	FQN          []string `json:"fqn"`
	Path         string   `json:"path,omitempty"`
	DependsOn    []string `json:"dependsOn"` // within the selection
}

func cmdLs(_ context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("ls", "PLAN", "List the steps a selection picks, in execution order (dbt ls). Nothing is run or written.")
	var f selectFlags
	f.register(fs)
	asJSON := fs.Bool("json", false, "print a JSON array, one object per step")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	b, err := loadPlan(pos[0], "")
	if err != nil {
		return err
	}
	p := b.Plan
	sel, err := c.choose(p, f, false)
	if err != nil {
		return err
	}
	sub := p
	if sel != nil {
		if sub, err = p.Subset(sel.Steps); err != nil {
			return err
		}
	}
	steps := []lsStep{}
	for _, s := range sub.Order() {
		steps = append(steps, lsStep{ID: s.ID, Kind: s.Kind, Name: selection.Name(s), Materialized: s.Materialized, Tags: s.Tags,
			FQN: selection.FQN(p, s), Path: s.Path, DependsOn: append([]string{}, s.DependsOn...)})
	}
	if *asJSON {
		return c.printJSON(steps)
	}
	for _, s := range steps {
		fmt.Fprintln(c.stdout, s.ID)
	}
	return nil
}
