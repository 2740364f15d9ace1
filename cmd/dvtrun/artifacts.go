package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/runresults"
)

// artifactFiles is the runner's ArtifactWriter: a run's artifacts are files
// in dir (--target-path), or in runs/<run_id> under the directory runsDir
// gives when dir is empty, referenced by a file:// URI with their sha256 and
// size.
type artifactFiles struct {
	c    *cli
	dir  string
	runs string
	say  bool // name each file written on stderr (sayArtifacts)
}

// runsDir is where runs' artifact directories go by default: runs/ next to
// an SQLite state store (.dvt/runs for the default .dvt/state.db); with a
// state store elsewhere, runs/ next to an SQLite warehouse (the target's
// local files), else .dvt/runs next to the configuration file (the
// project, whatever the working directory), else ./.dvt/runs.
func (c *cli) runsDir() string {
	if t, err := c.parseTarget("store", c.g.store); err == nil && t.kind == "sqlite" {
		return filepath.Join(filepath.Dir(t.path), "runs")
	}
	if t, err := c.parseTarget("warehouse", c.g.warehouse); err == nil && t.kind == "sqlite" {
		return filepath.Join(filepath.Dir(t.path), "runs")
	}
	if c.g.config != "" {
		return filepath.Join(filepath.Dir(c.g.config), ".dvt", "runs")
	}
	return filepath.Join(".dvt", "runs")
}

// sayArtifacts reports whether a run's files are named in its output as
// they are written: when no SQLite state store beside them says where to look
// (a Postgres or Snowflake store keeps only their references).
func (c *cli) sayArtifacts() bool {
	t, err := c.parseTarget("store", c.g.store)
	return err == nil && t.kind != "sqlite"
}

// localStoreDir is the directory of an SQLite state store, else .dvt: the
// default spool's parent (the spool goes with the store, not the warehouse).
func (c *cli) localStoreDir() string {
	if t, err := c.parseTarget("store", c.g.store); err == nil && t.kind == "sqlite" {
		return filepath.Dir(t.path)
	}
	return ".dvt"
}

// WriteArtifact implements runner.ArtifactWriter. Known secret values are
// redacted first, as from every other output; the reference describes the
// bytes written.
func (a artifactFiles) WriteArtifact(_ context.Context, runID, kind, name string, data []byte) (engine.ArtifactRef, error) {
	dir := a.dir
	if dir == "" {
		if runID == "" || runID == "." || runID == ".." || strings.ContainsAny(runID, `/\`) {
			return engine.ArtifactRef{}, engine.Errorf(engine.CodeInvalidArgument, "run id %q cannot name a directory", runID)
		}
		dir = filepath.Join(a.runs, runID)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return engine.ArtifactRef{}, engine.Errorf(engine.CodeArtifactWriteFailed, "cannot create %s: %v", dir, plan.PathErr(err))
	}
	data = []byte(a.c.redact(string(data)))
	path, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		return engine.ArtifactRef{}, engine.Errorf(engine.CodeArtifactWriteFailed, "%s: %v", name, err)
	}
	if err := writeFileAtomic(path, data); err != nil {
		return engine.ArtifactRef{}, err
	}
	if a.say {
		fmt.Fprintf(a.c.stdout, "Wrote %s: %s\n", name, a.c.clean(path))
	}
	sum := sha256.Sum256(data)
	return engine.ArtifactRef{
		URI:       (&url.URL{Scheme: "file", Path: filepath.ToSlash(path)}).String(),
		Kind:      kind,
		SHA256:    hex.EncodeToString(sum[:]),
		SizeBytes: int64(len(data)),
	}, nil
}

// runResultsExport rebuilds a run's run_results.json from its log. The plan
// (for compiled_code) is the file planPath; else the bundle the state store
// keeps for the run; else (a run from before bundles) the file the run
// recorded in RunQueued, when its sha256 is the run's. Otherwise
// compiled_code is null and a note says why.
func (c *cli) runResultsExport(ctx context.Context, st plan.BundleStore, meta engine.RunMetadata, evs []engine.RunEventRecord, planPath string) ([]byte, error) {
	if planPath == "" {
		q, err := engine.QueuedRequest(evs)
		if err != nil {
			return nil, err
		}
		b, ok, err := storedBundle(ctx, st, cmp.Or(q.PlanRef.SHA256, meta.PlanSHA256), q.PlanRef.URI)
		if err != nil {
			return nil, err
		}
		if ok {
			return runresults.Build(meta.RunID, evs, b.Plan).JSON()
		}
		planPath = q.PlanRef.URI
	}
	var runPlan *plan.Plan
	if planPath != "" {
		p, ref, err := plan.Load(osSource{}, planPath)
		switch {
		case err != nil:
			c.note("compiled_code left out: cannot read the run's plan %s: %s", planPath, oneLine(err.Error()))
		case !strings.EqualFold(ref.SHA256, meta.PlanSHA256):
			c.note("compiled_code left out: plan %s has changed since run %s (sha256 %s, the run's %s)", planPath, meta.RunID, ref.SHA256, meta.PlanSHA256)
		default:
			runPlan = p
		}
	}
	return runresults.Build(meta.RunID, evs, runPlan).JSON()
}

// note prints an informational line on stderr.
func (c *cli) note(format string, args ...any) {
	fmt.Fprintf(c.stderr, "dvtrun: note: %s\n", c.redact(fmt.Sprintf(format, args...)))
}
