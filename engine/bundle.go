package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
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

// BundleFile is one file of a plan bundle.
type BundleFile struct {
	Path   string `json:"path"`   // as the plan names it; the plan file by its base name
	SHA256 string `json:"sha256"` // hex digest of the file's bytes
}

// PlanBundle is a loaded plan with its PlanRef, whose SHA256 covers the
// bundle and whose Files list each file's digest.
type PlanBundle struct {
	Plan *Plan
	Ref  PlanRef
	// Files holds each file's bytes, as hashed, by its Ref.Files path: what
	// the state store keeps of the bundle (EncodeBundle).
	Files map[string][]byte
}

// LoadBundle reads a plan and every file it references, hashes them as one
// bundle, and runs every check a run runs before anything is written
// (Plan.Validate and Preflight): a bundle it returns is one `run` accepts.
// Seed files are parsed from the bytes that were hashed.
func LoadBundle(src PlanSource, file string) (*PlanBundle, error) {
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
	return &PlanBundle{Plan: p, Ref: ref, Files: files}, nil
}

// LoadPlan reads and parses a plan file, resolves step `path` SQL files
// relative to it, and returns its PlanRef with the bundle's sha256 (see
// LoadBundle). It does not validate the plan.
func LoadPlan(src PlanSource, file string) (*Plan, PlanRef, error) {
	p, ref, _, err := loadPlan(src, file)
	return p, ref, err
}

// loadPlan is LoadPlan; it also returns every file's bytes by its bundle
// path (PlanBundle.Files), and keeps each seed's in p.Seeds.
func loadPlan(src PlanSource, file string) (*Plan, PlanRef, map[string][]byte, error) {
	data, err := src.ReadFile(file)
	if err != nil {
		return nil, PlanRef{}, nil, Errorf(CodePlanInvalid, "cannot read plan %s: %v", file, err)
	}
	p, err := ParsePlan(data, file)
	if err != nil {
		return nil, PlanRef{}, nil, err
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
			return nil, PlanRef{}, nil, Errorf(CodePlanInvalid, "step %s: %s %s: %v", ShowText(st.ID), what, ShowText(st.Path), PathErr(err))
		}
		files[st.Path] = digest(b)
		contents[st.Path] = b
		if st.Kind == KindSeed {
			p.Seeds[st.Path] = b
			continue
		}
		st.SQL = string(b)
	}
	bundle := []BundleFile{{Path: filepath.Base(file), SHA256: digest(data)}}
	paths := make([]string, 0, len(files))
	for path := range files {
		paths = append(paths, path)
	}
	slices.Sort(paths)
	for _, path := range paths {
		bundle = append(bundle, BundleFile{Path: path, SHA256: files[path]})
	}
	ref := PlanRef{URI: file, SHA256: bundleSHA256(bundle), SchemaVersion: p.SchemaVersion, PlanID: p.PlanID, PlanVersion: p.PlanVersion, Files: bundle}
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

var sha256RE = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// bundleSHA256 is the sha256 of a bundle's manifest (see LoadBundle).
func bundleSHA256(files []BundleFile) string {
	var b bytes.Buffer
	for _, f := range files {
		fmt.Fprintf(&b, "%s  %s\n", f.SHA256, f.Path)
	}
	return digest(b.Bytes())
}

// CheckSHA256 refuses a bundle whose sha256 is not want (--plan-sha256).
func (r PlanRef) CheckSHA256(want string) error {
	if !sha256RE.MatchString(want) {
		return Errorf(CodeInvalidArgument, "plan sha256 %q is not 64 hex digits", want)
	}
	if !strings.EqualFold(r.SHA256, want) {
		return Errorf(CodePlanHashMismatch, "plan %s has bundle sha256 %s (the plan and the %d file(s) it references) but %s was expected", r.URI, r.SHA256, len(r.Files)-1, want)
	}
	return nil
}

// Compare refuses a bundle that is not the recorded one (what a run started
// with): PLAN_HASH_MISMATCH naming each file that changed, appeared or
// disappeared. A recorded ref without files (a run recorded before bundles)
// is compared by its sha256 alone.
func (r PlanRef) Compare(recorded PlanRef) error {
	if strings.EqualFold(r.SHA256, recorded.SHA256) {
		return nil
	}
	var changes []string
	if len(recorded.Files) > 0 {
		was := map[string]string{}
		for _, f := range recorded.Files[1:] {
			was[f.Path] = f.SHA256
		}
		if len(r.Files) > 0 && !strings.EqualFold(r.Files[0].SHA256, recorded.Files[0].SHA256) {
			changes = append(changes, "the plan file "+QuoteText(r.Files[0].Path)+" changed")
		}
		now := map[string]bool{}
		for _, f := range r.Files[min(1, len(r.Files)):] {
			now[f.Path] = true
			switch old, ok := was[f.Path]; {
			case !ok:
				changes = append(changes, QuoteText(f.Path)+" is new")
			case !strings.EqualFold(old, f.SHA256):
				changes = append(changes, QuoteText(f.Path)+" changed")
			}
		}
		for _, f := range recorded.Files[1:] {
			if !now[f.Path] {
				changes = append(changes, QuoteText(f.Path)+" is no longer referenced")
			}
		}
	}
	if len(changes) == 0 {
		changes = []string{"its sha256 is " + r.SHA256}
	}
	return &Error{
		Code: CodePlanHashMismatch,
		Msg:  fmt.Sprintf("plan %s is not the bundle the run started with (sha256 %s): %s", QuoteText(r.URI), recorded.SHA256, JoinLimited(changes, "; ", 10)),
		Meta: map[string]any{"changes": changes},
	}
}

// RecordedPlanRef returns the PlanRef a run was queued with (RunQueued's
// planRef, with the bundle's files). A run whose RunQueued carries none
// gets its metadata's sha256 alone.
func RecordedPlanRef(ctx context.Context, log EventReader, meta RunMetadata) (PlanRef, error) {
	q, err := RecordedRequest(ctx, log, meta)
	return q.PlanRef, err
}

// RecordedRequest returns what a run was queued with (RunQueued's payload:
// its selection, flags and PlanRef); its PlanRef is RecordedPlanRef's.
func RecordedRequest(ctx context.Context, log EventReader, meta RunMetadata) (RunQueuedRequest, error) {
	evs, err := log.ListEvents(ctx, meta.RunID, 0, 1)
	if err != nil {
		return RunQueuedRequest{}, err
	}
	q, err := QueuedRequest(evs)
	if err != nil {
		return RunQueuedRequest{}, err
	}
	if q.PlanRef.SHA256 == "" {
		q.PlanRef = PlanRef{SHA256: meta.PlanSHA256, PlanID: meta.PlanID, PlanVersion: meta.PlanVersion}
	}
	return q, nil
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
			var e *Error
			if errors.As(err, &e) {
				msg = e.Msg
			}
			problems = append(problems, fmt.Sprintf("step %s: %s", ShowText(st.ID), msg))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return &Error{Code: CodePlanInvalid, Msg: fmt.Sprintf("plan %s: %s", QuoteText(p.PlanID), JoinLimited(problems, "; ", maxListed)), Meta: map[string]any{"problems": problems}}
}
