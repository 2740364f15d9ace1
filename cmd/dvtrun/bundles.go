package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// storeBundle keeps b in the state store by its sha256 before a run or
// request records it: what a worker, `resume`, `retry` or `plan show` on
// any machine reads instead of the path this process saw. A bundle over
// engine.MaxBundleBytes is refused (PLAN_INVALID) with nothing recorded.
func storeBundle(ctx context.Context, st plan.BundleStore, b *plan.Bundle) error {
	data, err := plan.EncodeBundle(b)
	if err != nil {
		return err
	}
	return st.PutPlanBundle(ctx, b.Ref.SHA256, data)
}

// storedBundle reads bundle sha256 from the state store; ok is false when
// it is not there (a run or request recorded before bundles were stored).
// uri, when set, is what the run recorded as the plan's path (messages).
func storedBundle(ctx context.Context, st plan.BundleStore, sha256, uri string) (*plan.Bundle, bool, error) {
	if sha256 == "" {
		return nil, false, nil
	}
	data, ok, err := st.GetPlanBundle(ctx, sha256)
	if err != nil || !ok {
		return nil, false, err
	}
	b, err := plan.DecodeBundle(sha256, data)
	if err != nil {
		return nil, false, err
	}
	if uri != "" {
		b.Ref.URI = uri
	}
	return b, true, nil
}

// runBundle is the bundle run meta ran, from the state store;
// INVALID_ARGUMENT naming the command to use with a plan file when the run
// was recorded before bundles were stored.
func (c *cli) runBundle(ctx context.Context, st plan.BundleStore, meta engine.RunMetadata, recorded engine.PlanRef, command string) (*plan.Bundle, error) {
	b, ok, err := storedBundle(ctx, st, recorded.SHA256, recorded.URI)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", meta.RunID, err)
	}
	if !ok {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "run %s has no stored plan bundle (it was recorded before bundles were stored): pass its plan: dvtrun %s %s PLAN", meta.RunID, command, meta.RunID)
	}
	return b, nil
}

func cmdPlanShow(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("plan show", "RUN_ID", "Print the plan a run ran, from the bundle the state store keeps for it (with --file, one file of\nthe bundle: a step's SQL or a seed's CSV, by its path in the plan). --list names the files and their sha256.")
	file := fs.String("file", "", "print the bundle's file `F` (as the plan names it) instead of the plan")
	list := fs.Bool("list", false, "list the bundle's files with their sha256")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	st, err := c.openStore(ctx, true)
	if err != nil {
		return err
	}
	defer st.Close()
	meta, err := c.loadRun(ctx, st, pos[0])
	if err != nil {
		return err
	}
	recorded, err := engine.RecordedPlanRef(ctx, st, meta)
	if err != nil {
		return err
	}
	b, ok, err := storedBundle(ctx, st, recorded.SHA256, recorded.URI)
	if err != nil {
		return fmt.Errorf("run %s: %w", meta.RunID, err)
	}
	if !ok {
		return engine.Errorf(engine.CodeInvalidArgument, "run %s has no stored plan bundle: it was recorded before bundles were stored (bundle sha256 %s)", meta.RunID, recorded.SHA256)
	}
	if *list {
		tw := newTable(c.stdout)
		fmt.Fprintf(tw, "FILE\tSHA256\tBYTES\n")
		for _, f := range b.Ref.Files {
			data, _ := b.File(f.Path)
			fmt.Fprintf(tw, "%s\t%s\t%d\n", c.clean(f.Path), f.SHA256, len(data))
		}
		return tw.Flush()
	}
	name := b.Ref.Files[0].Path
	if *file != "" {
		name = *file
	}
	data, ok := b.File(name)
	if !ok {
		return engine.Errorf(engine.CodeInvalidArgument, "run %s's plan bundle has no file %s (it has %s)", meta.RunID, engine.QuoteText(name), strings.Join(b.BundleFileNames(), ", "))
	}
	// The bytes as stored: a plan or SQL file is the user's own text.
	_, err = c.stdout.Write(data)
	return err
}
