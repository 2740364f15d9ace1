package plan

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"

	"github.com/dvtrun/dvtrun/engine"
)

// Step kinds.
const (
	KindSeed  = "seed"
	KindModel = "model"
	KindTest  = "test"
	KindSQL   = "sql"
)

// SchemaVersion is the plan format version engine/plan/plan.schema.json
// describes; plans this code writes (dbt import) carry it.
const SchemaVersion = "1"

// Materializations of a model.
const (
	MaterializedTable = "table"
	MaterializedView  = "view"
	// MaterializedIncremental builds a table on the first run (and on a
	// full refresh) and merges the model's new rows into it afterwards, on
	// UniqueKey (see Step).
	MaterializedIncremental = "incremental"
	// MaterializedEphemeral is never built: its SQL is inlined as a CTE into
	// the models and tests that read it (see Plan.InlineEphemeral).
	MaterializedEphemeral = "ephemeral"
)

// Test severities (dbt's): an error-severity test that returns rows fails
// its step; a warn-severity one succeeds with a warning.
const (
	SeverityError = "error"
	SeverityWarn  = "warn"
)

// Plan is a dbt-style DAG of steps. It is read from JSON or YAML (see
// Parse) and validated before anything is written.
type Plan struct {
	PlanID        string   `json:"planId" yaml:"planId"`
	PlanVersion   string   `json:"planVersion" yaml:"planVersion"`
	SchemaVersion string   `json:"schemaVersion" yaml:"schemaVersion"`
	Metadata      Metadata `json:"metadata" yaml:"metadata"`
	// Sources are the tables the plan reads but does not build, declared
	// as dbt declares them; {{ source('raw', 'orders') }} names one.
	Sources []SourceTables `json:"sources,omitempty" yaml:"sources,omitempty"`
	Steps   []Step         `json:"steps" yaml:"steps"`

	// Dir is the directory the plan was read from; step paths and seed files
	// resolve against it. Not serialised.
	Dir string `json:"-" yaml:"-"`
	// Seeds holds each seed's CSV bytes, as LoadBundle hashed them, by its
	// path in the plan: the warehouse loads these (StepRequest.SeedData),
	// so a run needs no file on disk once its bundle is stored.
	Seeds map[string][]byte `json:"-" yaml:"-"`
}

// SourceTables declares tables of one source, as dbt's sources: Schema
// defaults to the source's Name (dbt's default), Database to the
// warehouse's own. Tables are the tables' names as the warehouse knows
// them.
type SourceTables struct {
	Name     string   `json:"name" yaml:"name"`
	Database string   `json:"database,omitempty" yaml:"database,omitempty"`
	Schema   string   `json:"schema,omitempty" yaml:"schema,omitempty"`
	Tables   []string `json:"tables" yaml:"tables"`
}

// Metadata holds the plan's adapter requirements.
type Metadata struct {
	Name                 string   `json:"name,omitempty" yaml:"name,omitempty"`
	TargetAdapter        string   `json:"targetAdapter,omitempty" yaml:"targetAdapter,omitempty"` // "any" or an adapter name
	RequiresCapabilities []string `json:"requiresCapabilities,omitempty" yaml:"requiresCapabilities,omitempty"`
}

// Step is one node of the DAG. ID is dbt-like: seed.customers,
// model.orders, test.not_null_orders_id. Name is the relation it builds
// (defaults to the part of ID after the first dot).
type Step struct {
	ID           string      `json:"id" yaml:"id"`
	Kind         string      `json:"kind" yaml:"kind"`
	Name         string      `json:"name,omitempty" yaml:"name,omitempty"`
	Materialized string      `json:"materialized,omitempty" yaml:"materialized,omitempty"`
	SQL          string      `json:"sql,omitempty" yaml:"sql,omitempty"`
	Path         string      `json:"path,omitempty" yaml:"path,omitempty"` // SQL file, or CSV for seeds
	DependsOn    []string    `json:"dependsOn,omitempty" yaml:"dependsOn,omitempty"`
	Severity     string      `json:"severity,omitempty" yaml:"severity,omitempty"` // tests: error (default) | warn
	Retries      int         `json:"retries,omitempty" yaml:"retries,omitempty"`   // transient-error retries (engine attempts)
	Timeout      Duration    `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	Secrets      []SecretRef `json:"secrets,omitempty" yaml:"secrets,omitempty"`
	// Tags, FQN and OriginalFilePath are what node selection (dbt's tag:,
	// fqn and path: methods) reads; the dbt importer copies them from the
	// manifest. FQN defaults to [planId, the id after its first dot];
	// OriginalFilePath is informational (dvtrun reads Path, never it).
	Tags             []string `json:"tags,omitempty" yaml:"tags,omitempty"`
	FQN              []string `json:"fqn,omitempty" yaml:"fqn,omitempty"`
	OriginalFilePath string   `json:"originalFilePath,omitempty" yaml:"originalFilePath,omitempty"`
	// DbtUniqueID is the dbt node a step was imported from
	// (model.jaffle_shop.orders); run_results.json reports it as the
	// step's unique_id, so that dbt's tools join it with the manifest.
	DbtUniqueID string `json:"dbtUniqueId,omitempty" yaml:"dbtUniqueId,omitempty"`
	// UniqueKey (incremental models) are the columns new rows are merged
	// on: a new row replaces the table's row with the same key. Without a
	// key, new rows are appended (dbt's behaviour).
	UniqueKey []string `json:"uniqueKey,omitempty" yaml:"uniqueKey,omitempty"`
	// IncrementalFilter (incremental models) is a predicate over the
	// model's output columns that picks the new rows on runs after the
	// first; {{ this }} names the existing table, e.g.
	// "updated_at > (select max(updated_at) from {{ this }})".
	IncrementalFilter string `json:"incrementalFilter,omitempty" yaml:"incrementalFilter,omitempty"`
}

// SecretRef names a secret a step needs. Plans carry references, never
// values; the value is resolved at step time and bound as a parameter or
// substituted where the SQL says {{ secret('NAME') }}.
type SecretRef struct {
	Name string `json:"name" yaml:"name"`
}

// Duration is a time.Duration written as a Go duration string ("30s") or a
// number of seconds.
type Duration struct {
	time.Duration
	// invalid keeps a value that is no duration, or one out of range, for
	// Validate to report with its step.
	invalid string
}

// MaxStepTimeout bounds a step's timeout: beyond it a number of seconds
// would overflow time.Duration long before it meant anything.
const MaxStepTimeout = 7 * 24 * time.Hour

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads "30s"-style strings or a number of seconds. A value
// that is neither, or is out of range, is kept for Validate to refuse.
func (d *Duration) UnmarshalJSON(b []byte) error {
	*d = Duration{}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var secs float64
		if err2 := json.Unmarshal(b, &secs); err2 != nil {
			return fmt.Errorf("duration must be a string like \"30s\" or a number of seconds: %w", err)
		}
		if secs < 0 || secs > MaxStepTimeout.Seconds() {
			d.invalid = string(b) + "s"
			return nil
		}
		d.Duration = time.Duration(secs * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 || v > MaxStepTimeout {
		d.invalid = s
		return nil
	}
	d.Duration = v
	return nil
}

// Parse reads a plan from JSON or YAML (YAML is a superset; name is
// used in messages only) and checks it against the plan schema. It does not
// validate the DAG: see Validate.
func Parse(data []byte, name string) (*Plan, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, engine.Errorf(engine.CodePlanInvalid, "%s: not valid YAML or JSON: %v", name, err)
	}
	doc = normalizeYAML(doc)
	if m, ok := doc.(map[string]any); ok {
		// `planVersion: 3` in YAML is a number; the plan means the string.
		if v, isNum := m["planVersion"].(int); isNum {
			m["planVersion"] = fmt.Sprint(v)
		}
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, engine.Errorf(engine.CodePlanInvalid, "%s: %v", name, err)
	}
	sch, err := planSchema()
	if err != nil {
		return nil, err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		return nil, engine.Errorf(engine.CodePlanInvalid, "%s: %v", name, err)
	}
	if err := sch.Validate(inst); err != nil {
		return nil, engine.Errorf(engine.CodePlanInvalid, "%s does not match the plan schema: %s", name, strings.Join(engine.SchemaProblems(err), "; "))
	}
	var p Plan
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, engine.Errorf(engine.CodePlanInvalid, "%s: %v", name, err)
	}
	p.InferDependsOn()
	return &p, nil
}

// normalizeYAML turns yaml.v3's map[string]any trees into JSON-encodable
// values (it already uses string keys for mappings with string keys).
func normalizeYAML(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			t[k] = normalizeYAML(x)
		}
	case map[any]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[fmt.Sprint(k)] = normalizeYAML(x)
		}
		return m
	case []any:
		for i, x := range t {
			t[i] = normalizeYAML(x)
		}
	}
	return v
}

//go:embed plan.schema.json
var planSchemaJSON []byte

var planSchema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(planSchemaJSON))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(engine.SchemaBase+"plan.schema.json", doc); err != nil {
		return nil, err
	}
	return c.Compile(engine.SchemaBase + "plan.schema.json")
})

// Source reads plan files and the files steps refer to. The CLI passes
// the real file system; tests pass fstest.MapFS.
type Source interface {
	ReadFile(name string) ([]byte, error)
}

// OSFiles is the Source of the file system.
type OSFiles struct{}

// ReadFile reads the named file.
func (OSFiles) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }

var identRE = regexp.MustCompile(`^[A-Za-z_\p{L}][A-Za-z0-9_$\p{L}\p{N}]*$`)

// relationRE is a relation name: an identifier, or schema.name (two
// identifiers) for warehouses with schemas (Postgres); the SQLite and
// Snowflake warehouses refuse the qualified form.
var relationRE = regexp.MustCompile(`^[A-Za-z_\p{L}][A-Za-z0-9_$\p{L}\p{N}]*(\.[A-Za-z_\p{L}][A-Za-z0-9_$\p{L}\p{N}]*)?$`)

// Relation is the table or view a step builds: Name, or the part of the id
// after its first dot.
func (s Step) Relation() string {
	if s.Name != "" {
		return s.Name
	}
	if _, after, ok := strings.Cut(s.ID, "."); ok {
		return after
	}
	return s.ID
}

// Validate checks the plan before anything is written and reports every
// problem, each naming its step: duplicate or malformed ids (control
// characters, '|'), unknown kinds and materializations, reserved relation
// names, empty SQL, SQL a step kind cannot run (several statements in a
// model or test, transaction control in a sql step), secrets the SQL uses
// without declaring them, timeouts out of range, unknown dependencies, and
// cycles. Every check the warehouses would make on the plan's text is made
// here, so that a run is recorded only for a plan that passed them.
func (p *Plan) Validate() error {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for _, f := range []struct{ name, v string }{{"planId", p.PlanID}, {"planVersion", p.PlanVersion}} {
		switch {
		case f.v == "":
			add("%s is missing", f.name)
		case engine.HasControl(f.v):
			add("%s %s contains a control character", f.name, engine.QuoteText(f.v))
		case strings.Contains(f.v, "|"):
			add("%s %s contains '|'", f.name, engine.QuoteText(f.v))
		}
	}
	if len(p.Steps) == 0 {
		add("the plan has no steps")
	}
	ids := make(map[string]int, len(p.Steps))
	relations := map[string]string{}
	for i, s := range p.Steps {
		if s.ID == "" {
			add("step #%d has no id", i+1)
			continue
		}
		label := "step " + engine.ShowText(s.ID) // as messages show it
		if engine.HasControl(s.ID) {
			label = fmt.Sprintf("step #%d", i+1)
		}
		for _, msg := range s.Problems() {
			add("%s: %s", label, msg)
		}
		if engine.HasControl(s.ID) {
			continue
		}
		if _, dup := ids[s.ID]; dup {
			add("%s: duplicate id", label)
		}
		ids[s.ID] = i
		if s.Kind == KindSeed || s.Kind == KindModel {
			rel := s.Relation()
			lower := strings.ToLower(rel)
			if other, dup := relations[lower]; dup && relationRE.MatchString(rel) && !reservedRelation(lower) {
				add("%s: builds %s, which step %s builds too", label, rel, other)
			} else if !dup {
				relations[lower] = engine.ShowText(s.ID)
			}
		}
	}
	for _, s := range p.Steps {
		if s.ID == "" || engine.HasControl(s.ID) {
			continue
		}
		id := engine.ShowText(s.ID)
		for _, d := range s.DependsOn {
			if _, ok := ids[d]; !ok {
				add("step %s: depends on unknown step %s", id, engine.ShowText(d))
			} else if d == s.ID {
				add("step %s: depends on itself", id)
			} else if dep := p.Steps[ids[d]]; isEphemeral(dep) && s.Kind != KindModel && s.Kind != KindTest {
				add("step %s: depends on ephemeral model %s, which only models and tests can read (it is inlined as a CTE)", id, engine.ShowText(d))
			}
		}
	}
	problems = append(problems, p.refProblems()...)
	if len(problems) == 0 {
		if cycle := p.findCycle(); cycle != nil {
			for i, id := range cycle {
				cycle[i] = engine.ShowText(id)
			}
			add("dependency cycle: %s", engine.JoinLimited(cycle, " -> ", 20))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return &engine.Error{Code: engine.CodePlanInvalid, Msg: fmt.Sprintf("plan %s: %s", engine.QuoteText(engine.OrUnknown(p.PlanID)), engine.JoinLimited(problems, "; ", maxListed)), Meta: map[string]any{"problems": problems}}
}

// Problems lists what is wrong with the step on its own, each as a sentence
// that does not name the step: control characters or '|' in its id, name or
// path, an unknown kind, materialization or severity, a relation name that
// is not an identifier or is reserved, SQL a warehouse would refuse (see
// sqlProblems), negative retries, a timeout out of range, a malformed
// secret name, the incremental-model rules. Validate adds what concerns
// several steps (duplicates, dependencies, cycles); the dbt importer drops
// a node with problems.
func (s Step) Problems() []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	switch {
	case engine.HasControl(s.ID):
		add("id %s contains a control character", engine.QuoteText(s.ID))
	case strings.Contains(s.ID, "|"):
		add("id contains '|'")
	}
	for _, f := range []struct{ name, v string }{{"name", s.Name}, {"path", s.Path}} {
		if engine.HasControl(f.v) {
			add("%s %s contains a control character", f.name, engine.QuoteText(f.v))
		}
	}
	switch s.Kind {
	case KindSeed:
		if s.Path == "" {
			add("a seed needs the path of its CSV file")
		}
	case KindModel:
		switch s.Materialized {
		case "", MaterializedTable, MaterializedView, MaterializedIncremental, MaterializedEphemeral:
		default:
			add("materialized %s is not table, view, incremental or ephemeral", engine.QuoteText(s.Materialized))
		}
	case KindTest:
		switch s.Severity {
		case "", SeverityError, SeverityWarn:
		default:
			add("severity %s is not error or warn", engine.QuoteText(s.Severity))
		}
	case KindSQL:
	default:
		add("unknown kind %s (want seed, model, test or sql)", engine.QuoteText(s.Kind))
	}
	if s.Kind != KindSeed {
		out = append(out, sqlProblems(s)...)
	}
	if s.Kind == KindSeed || s.Kind == KindModel {
		switch rel := s.Relation(); {
		case !relationRE.MatchString(rel):
			add("relation name %s is not a valid identifier (or schema.name)", engine.QuoteText(rel))
		case reservedRelation(strings.ToLower(rel)):
			add("relation name %s uses a reserved prefix (sqlite_, dvt_tmp__)", engine.QuoteText(rel))
		}
	}
	if s.Retries < 0 {
		add("retries %d is negative", s.Retries)
	}
	if bad := s.Timeout.invalid; bad != "" || s.Timeout.Duration < 0 || s.Timeout.Duration > MaxStepTimeout {
		if bad == "" {
			bad = s.Timeout.String()
		}
		add("timeout %s is out of range: want a duration from 0 to %s (a string like \"30s\" or a number of seconds)", engine.QuoteText(bad), MaxStepTimeout)
	}
	for _, ref := range s.Secrets {
		if !secretNameRE.MatchString(ref.Name) {
			add("secret name %s must be letters, digits and _", engine.QuoteText(ref.Name))
		}
	}
	return append(out, incrementalProblems(s)...)
}

// maxListed is how many problems a one-line error names before it says how
// many more there are.
const maxListed = 10

// reservedRelation: names the warehouses keep for themselves (SQLite's
// catalog, the temporary names of atomic replaces).
func reservedRelation(lower string) bool {
	if _, name, ok := strings.Cut(lower, "."); ok {
		lower = name // schema.name: the name is what is built
	}
	return strings.HasPrefix(lower, "sqlite_") || strings.HasPrefix(lower, "dvt_tmp__")
}

// sqlProblems lists what a warehouse would refuse in a step's SQL text.
func sqlProblems(s Step) []string {
	if strings.TrimSpace(s.SQL) == "" {
		return []string{"SQL is empty"}
	}
	// SQLite ends a statement at a NUL byte and runs what came before: the
	// rest of the step would be silently dropped.
	if i := strings.IndexByte(s.SQL, 0); i >= 0 {
		return []string{fmt.Sprintf("the SQL holds a NUL byte (at byte %d), where a warehouse may cut the statement short; remove it", i)}
	}
	var out []string
	switch s.Kind {
	case KindModel, KindTest:
		if _, err := SingleStatement(s.SQL); err != nil {
			out = append(out, err.Error())
		}
	case KindSQL:
		if stmt := TransactionControl(s.SQL); stmt != "" {
			out = append(out, fmt.Sprintf("%s controls the transaction; a sql step already runs in one", engine.QuoteText(stmt)))
		}
	}
	problems, used := templateProblems(s)
	out = append(out, problems...)
	if used && s.Kind == KindModel && (s.Materialized == "" || s.Materialized == MaterializedView) {
		out = append(out, "a view cannot take a secret (the warehouse stores a view's text); materialize it as a table")
	}
	return out
}

var secretNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// findCycle returns one dependency cycle (first step repeated at the end),
// or nil.
func (p *Plan) findCycle() []string {
	deps := map[string][]string{}
	for _, s := range p.Steps {
		deps[s.ID] = s.DependsOn
	}
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	var stack []string
	var found []string
	var visit func(id string) bool
	visit = func(id string) bool {
		color[id] = grey
		stack = append(stack, id)
		for _, d := range deps[id] {
			switch color[d] {
			case grey:
				i := slices.Index(stack, d)
				found = append(slices.Clone(stack[i:]), d)
				return true
			case white:
				if visit(d) {
					return true
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[id] = black
		return false
	}
	for _, s := range p.Steps {
		if color[s.ID] == white && visit(s.ID) {
			// Report the cycle in dependency order: a depends on b -> ...
			return found
		}
	}
	return nil
}

// Order returns the steps in a deterministic topological order: a step
// comes after its dependencies; ties keep plan order. The plan must be
// valid.
func (p *Plan) Order() []Step {
	indeg := map[string]int{}
	dependents := p.Dependents()
	for _, s := range p.Steps {
		indeg[s.ID] = len(s.DependsOn)
	}
	var out []Step
	done := map[string]bool{}
	for len(out) < len(p.Steps) {
		progressed := false
		for _, s := range p.Steps {
			if done[s.ID] || indeg[s.ID] > 0 {
				continue
			}
			done[s.ID] = true
			out = append(out, s)
			progressed = true
			for _, d := range dependents[s.ID] {
				indeg[d]--
			}
		}
		if !progressed {
			break // a cycle; Validate reports it
		}
	}
	return out
}

// Dependents maps each step id to the ids of the steps that depend on it
// directly.
func (p *Plan) Dependents() map[string][]string {
	out := map[string][]string{}
	for _, s := range p.Steps {
		for _, d := range s.DependsOn {
			out[d] = append(out[d], s.ID)
		}
	}
	return out
}

// Step returns the step with the given id.
func (p *Plan) Step(id string) (Step, bool) {
	for _, s := range p.Steps {
		if s.ID == id {
			return s, true
		}
	}
	return Step{}, false
}

// CheckAdapter refuses a plan the local adapter cannot run: required
// capabilities (it evaluates none) or another target adapter. StartRun and
// `plan validate` both call it.
func CheckAdapter(p *Plan) error {
	if n := len(p.Metadata.RequiresCapabilities); n > 0 {
		return engine.Errorf(engine.CodeCapabilitiesNotSupported, "plan %s requires capabilities %v; the %s adapter evaluates none", engine.ShowText(p.PlanID), p.Metadata.RequiresCapabilities, engine.AdapterName)
	}
	if t := p.Metadata.TargetAdapter; t != "" && t != "any" && t != engine.AdapterName {
		return engine.Errorf(engine.CodeTargetAdapterMismatch, "plan %s targets adapter %s; this is the %q adapter", engine.ShowText(p.PlanID), engine.QuoteText(t), engine.AdapterName)
	}
	return nil
}

// Identity is the plan's id and version (engine.StartPlan).
func (p *Plan) Identity() (planID, planVersion string) {
	if p == nil {
		return "", ""
	}
	return p.PlanID, p.PlanVersion
}

// CheckStart is what StartRun checks before anything is written
// (engine.StartPlan): the plan is valid, the local adapter can run it, and
// sel's steps are the plan's.
func (p *Plan) CheckStart(sel *engine.Selection) error {
	if p == nil {
		return engine.Errorf(engine.CodeInvalidArgument, "no plan")
	}
	if err := p.Validate(); err != nil {
		return err
	}
	if err := CheckAdapter(p); err != nil {
		return err
	}
	if sel != nil {
		if _, err := p.Subset(sel.Steps); err != nil {
			return err
		}
	}
	return nil
}
