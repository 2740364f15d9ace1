package main

import (
	"context"
	"fmt"

	"github.com/dvtrun/dvtrun/engine"
)

func cmdPlan(ctx context.Context, c *cli, args []string) error {
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" || args[0] == "help" {
		fmt.Fprintln(c.stdout, "Usage: dvtrun plan validate PLAN\n       dvtrun plan import-dbt MANIFEST --project-dir DIR [-o plan.yaml]\n\nRun `dvtrun plan SUBCOMMAND --help` for its flags.")
		if len(args) == 0 {
			return &exitError{code: exitUsage}
		}
		return errHelp
	}
	switch args[0] {
	case "validate":
		return cmdPlanValidate(ctx, c, args[1:])
	case "import-dbt":
		return cmdPlanImportDBT(ctx, c, args[1:])
	}
	return engine.Errorf(engine.CodeInvalidArgument, "unknown plan subcommand %q (want validate or import-dbt)", args[0])
}

func cmdPlanValidate(_ context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("plan validate", "PLAN", "Validate a plan without writing anything: schema, ids, dependencies, cycles.\nExit 0 when valid, 2 with every problem named otherwise.")
	wantSHA := fs.String("plan-sha256", "", "also require the plan file to hash to `HEX`")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	p, ref, _, err := loadPlan(pos[0], *wantSHA)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "OK: plan %s@%s is valid: %d steps (sha256 %s)\n", p.PlanID, p.PlanVersion, len(p.Steps), ref.SHA256)
	return nil
}

func cmdPlanImportDBT(_ context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("plan import-dbt", "MANIFEST", "Turn a dbt manifest (target/manifest.json) into a dvtrun plan.")
	fs.String("project-dir", "", "the dbt project `DIR` (seed CSVs and SQL paths resolve against it)")
	fs.String("o", "", "write the plan to `FILE` instead of stdout")
	if _, err := c.parse(fs, args, 1, 1); err != nil {
		return err
	}
	return engine.Errorf(engine.CodeInvalidArgument, "plan import-dbt is not available in this build yet")
}
