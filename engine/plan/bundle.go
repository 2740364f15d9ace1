package plan

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/dvtrun/dvtrun/engine"
)

// A plan bundle is the plan file and every file it references (step SQL
// files and seed CSVs): what a run executes. Its sha256 is recorded with the
// run (RunMetadata.PlanSHA256, and RunQueued's planRef with one sha256 per
// file) so that `resume`, `retry` and the queue run exactly what was
// accepted, and can name the file that changed when it is not.
//
// The bundle's sha256 is that of its manifest, the lines `sha256sum` prints
// for the files — "<hex>  <path>\n" — the plan file first (by its base
// name), then the referenced files sorted by path as the plan writes them
// (relative to the plan's directory). From the plan's directory,
//
//	sha256sum plan.yaml $(referenced files, sorted) | sha256sum
//
// gives the same digest.

// Bundle is a loaded plan with its PlanRef, whose SHA256 covers the
// bundle and whose Files list each file's digest.
type Bundle struct {
	Plan *Plan
	Ref  engine.PlanRef
	// Files holds each file's bytes, as hashed, by its Ref.Files path: what
	// the state store keeps of the bundle (EncodeBundle).
	Files map[string][]byte
}

// LoadBundle reads a plan and every file it references, hashes them as one
// bundle, and runs every check a run runs before anything is written
// (Plan.Validate and Preflight): a bundle it returns is one `run` accepts.
// Seed files are parsed from the bytes that were hashed.
func LoadBundle(src Source, file string) (*Bundle, error) {
	p, ref, files, err := loadPlan(src, file)
	if err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := p.preflight(p.Seeds); err != nil {
		return nil, err
	}
	return &Bundle{Plan: p, Ref: ref, Files: files}, nil
}

// Load reads and parses a plan file, resolves step `path` SQL files
// relative to it, and returns its PlanRef with the bundle's sha256 (see
// LoadBundle). It does not validate the plan.
func Load(src Source, file string) (*Plan, engine.PlanRef, error) {
	p, ref, _, err := loadPlan(src, file)
	return p, ref, err
}

// loadPlan is Load; it also returns every file's bytes by its bundle
// path (Bundle.Files), and keeps each seed's in p.Seeds.
func loadPlan(src Source, file string) (*Plan, engine.PlanRef, map[string][]byte, error) {
	data, err := src.ReadFile(file)
	if err != nil {
		return nil, engine.PlanRef{}, nil, engine.Errorf(engine.CodePlanInvalid, "cannot read plan %s: %v", file, err)
	}
	p, err := Parse(data, file)
	if err != nil {
		return nil, engine.PlanRef{}, nil, err
	}
	p.Dir = filepath.Dir(file)
	files := map[string]string{}
	contents := map[string][]byte{filepath.Base(file): data}
	p.Seeds = map[string][]byte{}
	for i := range p.Steps {
		st := &p.Steps[i]
		if st.Path == "" {
			continue
		}
		b, err := src.ReadFile(p.FilePath(st.Path))
		if err != nil {
			what := "cannot read"
			if st.Kind == KindSeed {
				what = "cannot read seed file"
			}
			return nil, engine.PlanRef{}, nil, engine.Errorf(engine.CodePlanInvalid, "step %s: %s %s: %v", engine.ShowText(st.ID), what, engine.ShowText(st.Path), PathErr(err))
		}
		files[st.Path] = digest(b)
		contents[st.Path] = b
		if st.Kind == KindSeed {
			p.Seeds[st.Path] = b
			continue
		}
		st.SQL = string(b)
	}
	// Parse inferred dependencies from inline SQL only; a model's SQL file
	// refs other steps just the same (dbt's models are files).
	p.InferDependsOn()
	bundle := []engine.BundleFile{{Path: filepath.Base(file), SHA256: digest(data)}}
	paths := make([]string, 0, len(files))
	for path := range files {
		paths = append(paths, path)
	}
	slices.Sort(paths)
	for _, path := range paths {
		bundle = append(bundle, engine.BundleFile{Path: path, SHA256: files[path]})
	}
	ref := engine.PlanRef{URI: file, SHA256: bundleSHA256(bundle), SchemaVersion: p.SchemaVersion, PlanID: p.PlanID, PlanVersion: p.PlanVersion, Files: bundle}
	return p, ref, contents, nil
}

// FilePath resolves a path the plan names against the plan's directory.
func (p *Plan) FilePath(path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(p.Dir, path)
}

// PathErr drops the path an *fs.PathError repeats (the message names it).
func PathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// bundleSHA256 is the sha256 of a bundle's manifest (see LoadBundle).
func bundleSHA256(files []engine.BundleFile) string {
	var b bytes.Buffer
	for _, f := range files {
		fmt.Fprintf(&b, "%s  %s\n", f.SHA256, f.Path)
	}
	return digest(b.Bytes())
}

// preflight parses every seed from the bytes that were hashed: a missing,
// malformed, binary or oversized seed is refused before a run is recorded
// rather than failing mid-run.
func (p *Plan) preflight(seeds map[string][]byte) error {
	var problems []string
	for _, st := range p.Steps {
		if st.Kind != KindSeed {
			continue
		}
		if _, err := ReadSeed(bytes.NewReader(seeds[st.Path]), st.Path); err != nil {
			msg := err.Error()
			var e *engine.Error
			if errors.As(err, &e) {
				msg = e.Msg
			}
			problems = append(problems, fmt.Sprintf("step %s: %s", engine.ShowText(st.ID), msg))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return &engine.Error{Code: engine.CodePlanInvalid, Msg: fmt.Sprintf("plan %s: %s", engine.QuoteText(p.PlanID), engine.JoinLimited(problems, "; ", maxListed)), Meta: map[string]any{"problems": problems}}
}
