package main

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

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
	fs := c.newFlagSet("verify", "[RUN_ID | --all]", "Compare the SQL projection of runs with the Go reducer over their event logs.\nEach difference is printed as a row; exit 0 when they agree, 1 on any difference.\nThis checks the projection, not the tamper-evident chain: `dvtrun audit verify --all` does that.")
	all := fs.Bool("all", false, "verify every run in the store, of every tenant/project/environment unless --tenant, --project or --environment (or DVT_TENANT…) narrow it")
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
	var scopes []verifiedScope
	if *all {
		scopes, diffs, err = c.verifyAll(ctx, st, proj)
	} else {
		scopes, diffs, err = c.verifyOne(ctx, st, proj, pos[0])
	}
	if err != nil {
		return err
	}
	n := 0
	for _, s := range scopes {
		n += s.Runs
	}
	if *asJSON {
		if diffs == nil {
			diffs = []engine.SnapshotDiff{}
		}
		if scopes == nil {
			scopes = []verifiedScope{}
		}
		if err := c.printJSON(struct {
			Runs        int                   `json:"runs"`
			Scopes      []verifiedScope       `json:"scopes"`
			Differences []engine.SnapshotDiff `json:"differences"`
		}{n, scopes, diffs}); err != nil {
			return err
		}
	} else if len(diffs) > 0 {
		tw := newTable(c.stdout)
		fmt.Fprintln(tw, "RUN\tSTEP\tFIELD\tSQL\tGO")
		for _, d := range diffs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.clean(d.RunID), c.clean(d.StepID), d.Field, c.cleanLine(d.SQL), c.cleanLine(d.Go))
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
		fmt.Fprintf(c.stdout, "verified %d runs in %d scope(s): SQL projection == Go reducer\n", n, len(scopes))
		for _, s := range scopes {
			fmt.Fprintf(c.stdout, "  %s/%s/%s: %d runs\n", c.clean(s.TenantID), c.clean(s.ProjectID), c.clean(s.EnvironmentID), s.Runs)
		}
		fmt.Fprintln(c.stdout, "this checks the SQL projection against the events, not the events themselves: `dvtrun audit verify --all` checks the tamper-evident chain")
	}
	return nil
}

// verifiedScope counts the runs verify checked in one tenant/project/environment.
type verifiedScope struct {
	TenantID      string `json:"tenantId"`
	ProjectID     string `json:"projectId"`
	EnvironmentID string `json:"environmentId"`
	Runs          int    `json:"runs"`
}

// countScopes groups runs by scope, in a stable order.
func countScopes(runs []store.RunSummary) []verifiedScope {
	idx := map[[3]string]int{}
	var out []verifiedScope
	for _, m := range runs {
		k := [3]string{m.TenantID, m.ProjectID, m.EnvironmentID}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, verifiedScope{TenantID: k[0], ProjectID: k[1], EnvironmentID: k[2]})
		}
		out[i].Runs++
	}
	slices.SortFunc(out, func(a, b verifiedScope) int {
		return cmp.Or(strings.Compare(a.TenantID, b.TenantID), strings.Compare(a.ProjectID, b.ProjectID), strings.Compare(a.EnvironmentID, b.EnvironmentID))
	})
	return out
}

// runFilter is the scope verify --all checks: only the scope flags given.
func (c *cli) runFilter() store.RunFilter {
	f := store.RunFilter{Limit: math.MaxInt32}
	if c.g.scoped["tenant"] {
		f.TenantID = c.g.tenant
	}
	if c.g.scoped["project"] {
		f.ProjectID = c.g.project
	}
	if c.g.scoped["environment"] {
		f.EnvironmentID = c.g.environment
	}
	return f
}

// inScope reports whether a snapshot's run is one f selects (empty fields
// select everything, as in ListRuns).
func inScope(f store.RunFilter, s engine.Snapshot) bool {
	return (f.TenantID == "" || f.TenantID == s.TenantID) && (f.ProjectID == "" || f.ProjectID == s.ProjectID) && (f.EnvironmentID == "" || f.EnvironmentID == s.EnvironmentID)
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

func (c *cli) verifyOne(ctx context.Context, st stateStore, proj sqlProjector, runID string) ([]verifiedScope, []engine.SnapshotDiff, error) {
	meta, err := c.loadRun(ctx, st, runID)
	if err != nil {
		return nil, nil, err
	}
	sqlSnap, err := proj.ProjectSQL(ctx, meta.RunID)
	if err != nil {
		return nil, nil, err
	}
	goSnap, err := goSnapshot(ctx, st, meta.RunID)
	if err != nil {
		return nil, nil, err
	}
	return countScopes([]store.RunSummary{{RunMetadata: meta}}), engine.DiffSnapshots(sqlSnap, goSnap), nil
}

func (c *cli) verifyAll(ctx context.Context, st stateStore, proj sqlProjector) ([]verifiedScope, []engine.SnapshotDiff, error) {
	filter := c.runFilter()
	runs, err := st.ListRuns(ctx, filter)
	if err != nil {
		return nil, nil, err
	}
	sqlSnaps, err := proj.ProjectAllSQL(ctx)
	if err != nil {
		return nil, nil, err
	}
	var diffs []engine.SnapshotDiff
	seen := map[string]bool{}
	for _, m := range runs {
		seen[m.RunID] = true
		goSnap, err := goSnapshot(ctx, st, m.RunID)
		if err != nil {
			return nil, nil, err
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
		if !seen[id] && inScope(filter, s) {
			diffs = append(diffs, engine.SnapshotDiff{RunID: id, Field: "run", SQL: "present", Go: engine.Absent})
		}
	}
	return countScopes(runs), diffs, nil
}
