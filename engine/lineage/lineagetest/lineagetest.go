// Package lineagetest checks OpenLineage events in tests: against
// OpenLineage's published JSON Schemas (vendored in testdata/openlineage,
// sources in SOURCES.md there), and for the shape dvtrun promises (START
// before the end per run, every step run's parent and root resolving to its
// plan run).
package lineagetest

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

//go:embed testdata/openlineage/*.json
var schemaFiles embed.FS

// coreURL is the RunEvent schema every event is validated against.
const coreURL = "https://openlineage.io/spec/2-0-2/OpenLineage.json"

// olVersionRE matches the versioned URLs facets use for the core schema.
var olVersionRE = regexp.MustCompile(`^https://openlineage\.io/spec/\d+-\d+-\d+/OpenLineage\.json$`)

// facetAliases maps a facet schema URL the sink stamps to the vendored
// schema that checks it, where they differ: ParentRunFacet 1-1-0 only added
// the optional root, which Check verifies itself.
var facetAliases = map[string]string{
	"https://openlineage.io/spec/facets/1-1-0/ParentRunFacet.json": "https://openlineage.io/spec/1-0-1/ParentRunFacet.json",
}

// loader serves the vendored files by their $id. Facets name the core
// schema under older versions; they all resolve to the vendored 2-0-2.
type loader map[string]any

func (l loader) Load(url string) (any, error) {
	if olVersionRE.MatchString(url) {
		url = coreURL
	}
	if d, ok := l[url]; ok {
		return d, nil
	}
	return nil, fmt.Errorf("no vendored OpenLineage schema %s", url)
}

type validator struct {
	c       *jsonschema.Compiler
	mu      sync.Mutex
	schemas map[string]*jsonschema.Schema
}

var shared = sync.OnceValues(func() (*validator, error) {
	l := loader{}
	entries, err := schemaFiles.ReadDir("testdata/openlineage")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		b, err := schemaFiles.ReadFile(path.Join("testdata/openlineage", e.Name()))
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		id, _ := doc.(map[string]any)["$id"].(string)
		l[id] = doc
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(l)
	c.AssertFormat() // uuid, date-time and uri are checked, not annotations
	return &validator{c: c, schemas: map[string]*jsonschema.Schema{}}, nil
})

func (v *validator) schema(url string) (*jsonschema.Schema, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if s, ok := v.schemas[url]; ok {
		return s, nil
	}
	doc, frag, _ := strings.Cut(url, "#")
	if a, ok := facetAliases[doc]; ok {
		doc = a
	}
	s, err := v.c.Compile(doc + "#" + frag)
	if err != nil {
		return nil, err
	}
	v.schemas[url] = s
	return s, nil
}

// Validate checks one event: against the RunEvent schema, and each facet
// (run, job, output dataset) against the schema its _schemaURL names,
// which must be one of the vendored ones.
func Validate(event []byte) error {
	v, err := shared()
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(event))
	if err != nil {
		return err
	}
	core, err := v.schema(coreURL + "#/$defs/RunEvent")
	if err != nil {
		return err
	}
	if err := core.Validate(inst); err != nil {
		return fmt.Errorf("RunEvent: %w", err)
	}
	var facets []map[string]any
	m := inst.(map[string]any)
	for _, k := range []string{"run", "job"} {
		if f, ok := m[k].(map[string]any)["facets"].(map[string]any); ok {
			facets = append(facets, f)
		}
	}
	if outs, ok := m["outputs"].([]any); ok {
		for _, o := range outs {
			if f, ok := o.(map[string]any)["outputFacets"].(map[string]any); ok {
				facets = append(facets, f)
			}
		}
	}
	for _, group := range facets {
		for name, f := range group {
			url, _ := f.(map[string]any)["_schemaURL"].(string)
			s, err := v.schema(url)
			if err != nil {
				return fmt.Errorf("facet %s: %w", name, err)
			}
			if err := s.Validate(f); err != nil {
				return fmt.Errorf("facet %s: %w", name, err)
			}
		}
	}
	return nil
}

// Event is the part of an OpenLineage event Check reads.
type Event struct {
	EventType string `json:"eventType"`
	EventTime string `json:"eventTime"`
	Run       struct {
		RunID  string `json:"runId"`
		Facets struct {
			Parent *struct {
				Ref
				Root *Ref `json:"root"`
			} `json:"parent"`
		} `json:"facets"`
	} `json:"run"`
	Job     JobRef `json:"job"`
	Inputs  []Name `json:"inputs"`
	Outputs []Name `json:"outputs"`
}

// JobRef names a job.
type JobRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// Ref names a run of a job.
type Ref struct {
	Run struct {
		RunID string `json:"runId"`
	} `json:"run"`
	Job JobRef `json:"job"`
}

// Name is a dataset's identity.
type Name struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// Check validates every event (Validate) and checks the run structure:
// each run starts with one START and ends at most once, after it; each
// run's job never changes; a run with a parent names, as parent and root,
// a plan run (one with no parent) present in events. It returns the
// decoded events.
func Check(events [][]byte) ([]Event, error) {
	out := make([]Event, len(events))
	for i, b := range events {
		if err := Validate(b); err != nil {
			return nil, fmt.Errorf("event %d: %w\n%s", i, err, b)
		}
		if err := json.Unmarshal(b, &out[i]); err != nil {
			return nil, err
		}
	}
	type runState struct {
		job     JobRef
		started bool
		ended   string
	}
	runs := map[string]*runState{}
	for i, e := range out {
		r, ok := runs[e.Run.RunID]
		if !ok {
			r = &runState{job: e.Job}
			runs[e.Run.RunID] = r
		}
		switch {
		case r.job != e.Job:
			return nil, fmt.Errorf("event %d: run %s is job %v, earlier %v", i, e.Run.RunID, e.Job, r.job)
		case r.ended != "":
			return nil, fmt.Errorf("event %d: %s after run %s (%s) ended with %s", i, e.EventType, e.Run.RunID, e.Job.Name, r.ended)
		case e.EventType == "START" && r.started:
			return nil, fmt.Errorf("event %d: run %s (%s) started twice", i, e.Run.RunID, e.Job.Name)
		case e.EventType == "START":
			r.started = true
		case e.EventType == "COMPLETE" || e.EventType == "FAIL":
			if !r.started {
				return nil, fmt.Errorf("event %d: %s of run %s (%s) before its START", i, e.EventType, e.Run.RunID, e.Job.Name)
			}
			r.ended = e.EventType
		case e.EventType == "ABORT":
			r.ended = e.EventType // a run cancelled while queued never started
		}
	}
	hasParent := map[string]bool{} // step runs; a plan run has none
	for _, e := range out {
		if e.Run.Facets.Parent != nil {
			hasParent[e.Run.RunID] = true
		}
	}
	for i, e := range out {
		p := e.Run.Facets.Parent
		if p == nil {
			continue
		}
		if p.Root == nil || *p.Root != p.Ref {
			return nil, fmt.Errorf("event %d: run %s's root %v is not its parent %v (a step's parent is the top-level plan run)", i, e.Run.RunID, p.Root, p.Ref)
		}
		pr, ok := runs[p.Run.RunID]
		if !ok || pr.job != p.Job || hasParent[p.Run.RunID] {
			return nil, fmt.Errorf("event %d: run %s's parent %v is no plan run of these events", i, e.Run.RunID, p.Ref)
		}
	}
	return out, nil
}
