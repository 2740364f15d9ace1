package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/dbt"
	"github.com/dvtrun/dvtrun/engine/plan"
	runcore "github.com/dvtrun/dvtrun/engine/run"
)

func cmdPlan(ctx context.Context, c *cli, args []string) error {
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" || args[0] == "help" {
		w := c.stdout
		if len(args) == 0 {
			w = c.stderr // a usage error
		}
		fmt.Fprintln(w, "Usage: dvtrun plan validate PLAN\n       dvtrun plan show RUN_ID [--file F | --list]\n       dvtrun plan import-dbt MANIFEST --project-dir DIR [-o plan.yaml]\n\nRun `dvtrun plan SUBCOMMAND --help` for its flags.")
		if len(args) == 0 {
			return &exitError{code: exitUsage}
		}
		return errHelp
	}
	switch args[0] {
	case "validate":
		return cmdPlanValidate(ctx, c, args[1:])
	case "show":
		return cmdPlanShow(ctx, c, args[1:])
	case "import-dbt":
		return cmdPlanImportDBT(ctx, c, args[1:])
	}
	return engine.Errorf(engine.CodeInvalidArgument, "unknown plan subcommand %q (want validate, show or import-dbt)", args[0])
}

func cmdPlanValidate(_ context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("plan validate", "PLAN", "Validate a plan without writing anything: schema, ids, dependencies, refs, cycles, vars.\nExit 0 when valid, 2 with every problem named otherwise.")
	wantSHA := fs.String("plan-sha256", "", "also require the plan file to hash to `HEX`")
	asJSON := fs.Bool("json", false, "print the verdict as JSON (problems listed one by one)")
	varsFlag := fs.String("vars", "", varsHelp)
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	vars, err := plan.ParseVars(*varsFlag)
	if err != nil {
		return err
	}
	b, err := loadPlan(pos[0], *wantSHA)
	if err == nil {
		err = plan.CheckAdapter(b.Plan) // run refuses these before writing too
	}
	if err == nil {
		// The vars as run would render them; the data interval is a
		// schedule's, unknown here: its names are not checked.
		var prep *runcore.Prepared
		if prep, err = runcore.Prepare(runcore.Input{Plan: b.Plan, Shape: engine.RunQueuedRequest{Vars: vars}, AnyInterval: true}); err == nil {
			err = prep.CheckContext()
		}
	}
	if *asJSON {
		v := planVerdict{Valid: err == nil, Problems: []string{}}
		if err == nil {
			v.PlanID, v.PlanVersion, v.Steps, v.SHA256, v.Files = b.Plan.PlanID, b.Plan.PlanVersion, len(b.Plan.Steps), b.Ref.SHA256, b.Ref.Files
		} else {
			v.Code, v.Problems = engine.CodeOf(err), problemsOf(err)
		}
		if perr := c.printJSON(v); perr != nil {
			return perr
		}
	}
	if err != nil {
		return err
	}
	if !*asJSON {
		fmt.Fprintf(c.stdout, "OK: plan %s@%s is valid: %d steps, %d file(s) referenced (bundle sha256 %s)\n", c.clean(b.Plan.PlanID), c.clean(b.Plan.PlanVersion), len(b.Plan.Steps), len(b.Ref.Files)-1, b.Ref.SHA256)
	}
	return nil
}

type planVerdict struct {
	Valid       bool                `json:"valid"`
	PlanID      string              `json:"planId,omitempty"`
	PlanVersion string              `json:"planVersion,omitempty"`
	Steps       int                 `json:"steps,omitempty"`
	SHA256      string              `json:"sha256,omitempty"` // of the bundle
	Files       []engine.BundleFile `json:"files,omitempty"`
	Code        engine.Code         `json:"code,omitempty"`
	Problems    []string            `json:"problems"`
}

// problemsOf lists a validation error's problems one by one (Validate puts
// them in Meta["problems"]); other errors are one problem.
func problemsOf(err error) []string {
	var e *engine.Error
	if errors.As(err, &e) {
		if ps, ok := e.Meta["problems"].([]string); ok {
			return ps
		}
		return []string{e.Msg}
	}
	return []string{err.Error()}
}

func cmdPlanImportDBT(_ context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("plan import-dbt", "MANIFEST", "Turn a dbt manifest (target/manifest.json) into a dvtrun plan. Nodes that cannot be\ntranslated are listed by id; the plan written always validates.")
	projectDir := fs.String("project-dir", "", "the dbt project `DIR` (seed CSVs resolve against it; default: the manifest's directory's parent)")
	out := fs.String("o", "", "write the plan to `FILE` instead of stdout (.json: JSON, otherwise YAML)")
	planID := fs.String("plan-id", "", "the plan's `ID` (default: the dbt project name)")
	planVersion := fs.String("plan-version", "", "the plan's `VERSION` (default 1)")
	strict := fs.Bool("strict", false, "refuse the manifest (PLAN_INVALID, exit 2) if any node could not be imported")
	keepSchemas := fs.Bool("keep-schemas", false, "keep relation names schema-qualified (schema.name), for --warehouse postgres://…; by default they become one part, for SQLite")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(pos[0])
	if err != nil {
		return engine.Errorf(engine.CodeInvalidArgument, "cannot read the dbt manifest %s: %v", pos[0], plan.PathErr(err))
	}
	dir := *projectDir
	if dir == "" {
		dir = filepath.Dir(filepath.Dir(pos[0]))
	}
	outDir := "."
	if *out != "" {
		outDir = filepath.Dir(*out)
	}
	res, err := dbt.Import(data, dbt.Options{ProjectDir: dir, OutDir: outDir, PlanID: *planID, PlanVersion: *planVersion, KeepSchemas: *keepSchemas})
	var e *engine.Error
	if errors.As(err, &e) && *projectDir == "" {
		// Most often the manifest is not in the project's target/: say
		// what to pass rather than list every node that failed for it.
		if missing, _ := e.Meta["missingSeeds"].([]string); len(missing) > 0 {
			return engine.Errorf(engine.CodeInvalidArgument, "seed CSV not found: %s; pass --project-dir DIR (the dbt project root; without it, the manifest's directory's parent %s)", missing[0], dir)
		}
	}
	if err != nil {
		return err
	}
	var text []byte
	if strings.EqualFold(filepath.Ext(*out), ".json") {
		text, err = res.JSON()
	} else {
		text, err = res.YAML()
	}
	if err != nil {
		return err
	}
	// The plan goes to stdout unless -o: the report goes where it does not
	// mix with the plan.
	report := c.stdout
	if *out == "" {
		report = c.stderr
		if _, err := c.stdout.Write(text); err != nil {
			return err
		}
	} else if err := writeFileAtomic(*out, text); err != nil {
		return err
	}
	where := "stdout"
	if *out != "" {
		where = *out
	}
	fmt.Fprintf(report, "imported %d steps from dbt manifest v%d into plan %s@%s (%s)\n", len(res.Plan.Steps), res.SchemaVersion, c.clean(res.Plan.PlanID), c.clean(res.Plan.PlanVersion), c.clean(where))
	if len(res.Problems) > 0 {
		fmt.Fprintf(report, "%d node(s) not imported:\n", len(res.Problems))
		for _, p := range res.Problems {
			fmt.Fprintf(report, "  %s: %s\n", c.clean(p.NodeID), c.cleanLine(p.Message))
		}
		if *strict {
			return engine.Errorf(engine.CodePlanInvalid, "%d dbt node(s) could not be imported (--strict)", len(res.Problems))
		}
	}
	return nil
}
