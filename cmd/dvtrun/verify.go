package main

import (
	"context"
	"fmt"
	"math"
	"text/tabwriter"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store"
)

// codeProjectionMismatch is verify's verdict when the two projections
// disagree (exit 1).
const codeProjectionMismatch engine.Code = "PROJECTION_MISMATCH"

// sqlProjector is a state store that can compute snapshots in SQL.
type sqlProjector interface {
	ProjectSQL(ctx context.Context, runID string) (engine.Snapshot, error)
	ProjectAllSQL(ctx context.Context) (map[string]engine.Snapshot, error)
}

// projectorFor finds the store's SQL projection; tests replace it to
// inject a disagreement.
var projectorFor = func(st stateStore) (sqlProjector, bool) {
	p, ok := st.(sqlProjector)
	return p, ok
}

func cmdVerify(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("verify", "[RUN_ID | --all]", "Compare the SQL projection of runs with the Go reducer over their event logs.\nEach difference is printed as a row; exit 0 when they agree, 1 on any difference.")
	all := fs.Bool("all", false, "verify every run of the tenant/project/environment")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := c.parse(fs, args, 0, 1)
	if err != nil {
		return err
	}
	if *all == (len(pos) == 1) {
		return engine.Errorf(engine.CodeInvalidArgument, "verify needs a RUN_ID or --all (not both)")
	}
	st, err := c.openStore(ctx, true)
	if err != nil {
		return err
	}
	defer st.Close()
	proj, ok := projectorFor(st)
	if !ok {
		return engine.Errorf(engine.CodeInvalidArgument, "the %s state store has no SQL projection to verify", c.g.store)
	}
	var diffs []engine.SnapshotDiff
	var n int
	if *all {
		n, diffs, err = c.verifyAll(ctx, st, proj)
	} else {
		n, diffs, err = c.verifyOne(ctx, st, proj, pos[0])
	}
	if err != nil {
		return err
	}
	if *asJSON {
		if diffs == nil {
			diffs = []engine.SnapshotDiff{}
		}
		if err := c.printJSON(struct {
			Runs        int                   `json:"runs"`
			Differences []engine.SnapshotDiff `json:"differences"`
		}{n, diffs}); err != nil {
			return err
		}
	} else if len(diffs) > 0 {
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RUN\tSTEP\tFIELD\tSQL\tGO")
		for _, d := range diffs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", d.RunID, d.StepID, d.Field, c.redact(oneLine(d.SQL)), c.redact(oneLine(d.Go)))
		}
		tw.Flush()
	}
	if len(diffs) > 0 {
		runs := map[string]bool{}
		for _, d := range diffs {
			runs[d.RunID] = true
		}
		return &exitError{code: exitFailed, err: engine.Errorf(codeProjectionMismatch, "%d difference(s) in %d of %d runs: SQL projection != Go reducer", len(diffs), len(runs), n)}
	}
	if !*asJSON {
		fmt.Fprintf(c.stdout, "verified %d runs: SQL projection == Go reducer\n", n)
	}
	return nil
}

// goSnapshot is the Go reducer over the run's whole log (no alerts are
// recorded: verify only reads).
func goSnapshot(ctx context.Context, st stateStore, runID string) (engine.Snapshot, error) {
	evs, err := st.ListEvents(ctx, runID, 0, 0)
	if err != nil {
		return engine.Snapshot{}, err
	}
	return engine.Project(runID, evs), nil
}

func (c *cli) verifyOne(ctx context.Context, st stateStore, proj sqlProjector, runID string) (int, []engine.SnapshotDiff, error) {
	meta, err := c.loadRun(ctx, st, runID)
	if err != nil {
		return 0, nil, err
	}
	sqlSnap, err := proj.ProjectSQL(ctx, meta.RunID)
	if err != nil {
		return 0, nil, err
	}
	goSnap, err := goSnapshot(ctx, st, meta.RunID)
	if err != nil {
		return 0, nil, err
	}
	return 1, engine.DiffSnapshots(sqlSnap, goSnap), nil
}

func (c *cli) verifyAll(ctx context.Context, st stateStore, proj sqlProjector) (int, []engine.SnapshotDiff, error) {
	runs, err := st.ListRuns(ctx, store.RunFilter{TenantID: c.g.tenant, ProjectID: c.g.project, EnvironmentID: c.g.environment, Limit: math.MaxInt32})
	if err != nil {
		return 0, nil, err
	}
	sqlSnaps, err := proj.ProjectAllSQL(ctx)
	if err != nil {
		return 0, nil, err
	}
	var diffs []engine.SnapshotDiff
	seen := map[string]bool{}
	for _, m := range runs {
		seen[m.RunID] = true
		goSnap, err := goSnapshot(ctx, st, m.RunID)
		if err != nil {
			return 0, nil, err
		}
		sqlSnap, ok := sqlSnaps[m.RunID]
		if !ok {
			diffs = append(diffs, engine.SnapshotDiff{RunID: m.RunID, Field: "run", SQL: engine.Absent, Go: "present"})
			continue
		}
		diffs = append(diffs, engine.DiffSnapshots(sqlSnap, goSnap)...)
	}
	// A run the SQL projection invents in this scope is a difference too.
	for id, s := range sqlSnaps {
		if !seen[id] && s.TenantID == c.g.tenant && s.ProjectID == c.g.project && s.EnvironmentID == c.g.environment {
			diffs = append(diffs, engine.SnapshotDiff{RunID: id, Field: "run", SQL: "present", Go: engine.Absent})
		}
	}
	return len(runs), diffs, nil
}
