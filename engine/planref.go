package engine

import (
	"fmt"
	"regexp"
	"strings"
)

// BundleFile is one file of a plan bundle.
type BundleFile struct {
	Path   string `json:"path"`   // as the plan names it; the plan file by its base name
	SHA256 string `json:"sha256"` // hex digest of the file's bytes
}

// PlanRef identifies the exact plan a run executes. SHA256 is the digest of
// the plan bundle (the plan file and every file it references, see
// LoadBundle) and Files the digest of each; a mismatch is refused
// (PLAN_HASH_MISMATCH).
type PlanRef struct {
	URI           string       `json:"uri"`
	SHA256        string       `json:"sha256"`
	SchemaVersion string       `json:"schemaVersion"`
	PlanID        string       `json:"planId"`
	PlanVersion   string       `json:"planVersion"`
	Files         []BundleFile `json:"files,omitempty"`
}

var sha256RE = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)

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
