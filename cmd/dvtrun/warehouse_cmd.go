package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/snowflake"
)

// fenceCleaner is a warehouse that keeps a table per run for the run's
// fence (Snowflake), which `warehouse cleanup` can list and remove.
type fenceCleaner interface {
	FenceTables(ctx context.Context) ([]snowflake.FenceTableInfo, error)
	RemoveFence(ctx context.Context, ft snowflake.FenceTableInfo) error
	LegacyFenceRuns(ctx context.Context) ([]string, bool, error)
	RemoveLegacyFences(ctx context.Context) error
}

var _ fenceCleaner = (*snowflake.Warehouse)(nil)

func cmdWarehouse(ctx context.Context, c *cli, args []string) error {
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" || args[0] == "help" {
		w := c.stdout
		if len(args) == 0 {
			w = c.stderr
		}
		fmt.Fprintln(w, `Usage: dvtrun warehouse cleanup [--apply]

What dvtrun keeps in the warehouse (docs/reference/backend-objects.md).

Run `+"`dvtrun warehouse SUBCOMMAND --help`"+` for its flags.`)
		if len(args) == 0 {
			return &exitError{code: exitUsage}
		}
		return errHelp
	}
	switch args[0] {
	case "cleanup":
		return cmdWarehouseCleanup(ctx, c, args[1:])
	}
	return engine.Errorf(engine.CodeInvalidArgument, "unknown warehouse subcommand %q (want cleanup)", args[0])
}

// cmdWarehouseCleanup removes the fence tables that runs which have ended
// left in a Snowflake warehouse: those of earlier versions (which kept one
// per run for good) and those of runners that died before their run's
// end. A table is removed only when the state store holds the run's end;
// the run's fence is closed first, so that a stale runner of the run is
// refused afterwards (sql/snowflake/warehouse.sql, close_fence).
func cmdWarehouseCleanup(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("warehouse cleanup", "", "List the per-run fence tables (DVT_FENCE_…) in the Snowflake warehouse's schema and the run each\nbelongs to. Without --apply nothing changes (a dry run); with it, the tables of runs whose end\nthe state store holds are removed (the run's fence is closed first: a stale runner of the run is\nrefused afterwards). Tables of runs still in flight, or not in this state store, are kept.")
	apply := fs.Bool("apply", false, "remove the tables of ended runs (default: only list them)")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	wh, kind, err := c.openWarehouse(ctx)
	if err != nil {
		return err
	}
	defer wh.Close()
	fc, ok := wh.(fenceCleaner)
	if !ok {
		fmt.Fprintf(c.stdout, "The %s warehouse keeps no objects per run: nothing to clean up.\n", kind)
		return nil
	}
	tables, err := fc.FenceTables(ctx)
	if err != nil {
		return err
	}
	legacyRuns, legacy, err := fc.LegacyFenceRuns(ctx)
	if err != nil {
		return err
	}
	if len(tables) == 0 && !legacy {
		fmt.Fprintln(c.stdout, "No fence tables in the warehouse's schema.")
		return nil
	}
	st, err := c.openStore(ctx, true)
	if err != nil {
		return err
	}
	defer st.Close()
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "TABLE\tRUN\tSTATUS\tACTION")
	var removable, removed int
	for _, ft := range tables {
		status, action := "", ""
		switch {
		case ft.RunID == "":
			status, action = "-", "kept: the table names no run"
		default:
			s, err := runStatusOf(ctx, st, ft.RunID)
			switch {
			case engine.CodeOf(err) == engine.CodeRunNotFound:
				status, action = "-", "kept: not a run of this state store"
			case err != nil:
				return err
			case !s.Terminal():
				status, action = string(s), "kept: the run has not ended"
			default:
				status = string(s)
				removable++
				action = "would remove"
				if *apply {
					if err := fc.RemoveFence(ctx, ft); err != nil {
						tw.Flush()
						return err
					}
					removed++
					action = "removed"
				}
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", ft.Name, c.cleanLine(ft.RunID), status, action)
	}
	if legacy {
		// The one table all runs shared before issue 16: removed once every
		// run it names has ended.
		open := 0
		for _, id := range legacyRuns {
			s, err := runStatusOf(ctx, st, id)
			if err != nil && engine.CodeOf(err) != engine.CodeRunNotFound {
				tw.Flush()
				return err
			}
			if err != nil || !s.Terminal() {
				open++
			}
		}
		status, action := fmt.Sprintf("%d runs, all ended", len(legacyRuns)), "would remove"
		switch {
		case open > 0:
			status, action = fmt.Sprintf("%d runs, %d not ended here", len(legacyRuns), open), "kept: it holds the fence of runs that have not ended (or of another store's)"
		case *apply:
			if err := fc.RemoveLegacyFences(ctx); err != nil {
				tw.Flush()
				return err
			}
			action = "removed"
		}
		if open == 0 {
			removable++
			if *apply {
				removed++
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", "DVT_RUN_FENCES", "(shared, before issue 16)", status, action)
	}
	tw.Flush()
	total := len(tables)
	if legacy {
		total++
	}
	switch {
	case *apply:
		fmt.Fprintf(c.stdout, "Removed %d of %d fence tables (those of ended runs).\n", removed, total)
	case removable > 0:
		fmt.Fprintf(c.stdout, "%d of %d fence tables belong to ended runs: run again with --apply to remove them.\n", removable, total)
	default:
		fmt.Fprintf(c.stdout, "None of the %d fence tables belongs to an ended run.\n", total)
	}
	return nil
}

// runStatusOf is a run's status from its log (the Go reducer);
// RUN_NOT_FOUND when the store has no such run.
func runStatusOf(ctx context.Context, st stateStore, runID string) (engine.RunStatus, error) {
	if _, err := st.GetRun(ctx, runID); err != nil {
		if errors.Is(err, engine.ErrRunNotFound) || engine.CodeOf(err) == engine.CodeRunNotFound {
			return "", engine.Errorf(engine.CodeRunNotFound, "run %s is not in the state store", runID)
		}
		return "", err
	}
	evs, err := st.ListEvents(ctx, runID, 0, 0)
	if err != nil {
		return "", err
	}
	return engine.Project(runID, evs).Status, nil
}
