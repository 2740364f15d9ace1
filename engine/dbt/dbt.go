// Package dbt turns a dbt manifest (target/manifest.json, schema v4 to v12)
// into a dvtrun plan that runs on SQLite (and on any warehouse that takes
// one-part relation names), or with Options.KeepSchemas on Postgres with
// dbt's schema-qualified names.
//
// Usage, as `dvtrun plan import-dbt MANIFEST --project-dir DIR [-o FILE]`
// does it:
//
//	res, err := dbt.Import(manifestBytes, dbt.Options{ProjectDir: dir, OutDir: filepath.Dir(file)})
//	if err != nil { ... }              // unreadable manifest, or no usable plan
//	for _, p := range res.Problems { } // nodes that were not imported, by id
//	out, err := res.YAML()             // or res.JSON(); write to FILE
//
// What becomes a step:
//   - seeds → seed.<name>, reading <ProjectDir>/<original_file_path> (or
//     <ProjectDir>/seeds/<name>.csv), the path written relative to OutDir;
//   - models → model.<name> (versioned models: model.<name>_v<version>)
//     with their compiled SQL (compiled_code, or compiled_sql before v7),
//     materialized table, view, ephemeral, or incremental on unique_key
//     (see incremental for what is rebuilt as a table instead); dynamic
//     tables become tables, materialized views views;
//   - tests → test.<name>: compiled SQL when the manifest has it, otherwise
//     the generic tests unique, not_null, accepted_values and relationships
//     are rendered from test_metadata; severity warn is kept.
//
// Every step keeps the node's tags, fqn and original_file_path, which node
// selection (engine/selection: tag:, fqn, path:) reads.
//
// Relation names in compiled SQL are rewritten to one quoted part:
// "db"."schema"."orders" becomes "orders", a source becomes its identifier;
// with Options.KeepSchemas to two, "schema"."orders", and steps build
// schema.orders (Postgres).
// dependsOn comes from depends_on.nodes (sources are not steps and drop out).
//
// Nothing is skipped silently: a node that cannot be translated (no
// compiled SQL, a Python model, a singular test with no SQL, a snapshot, a
// unit test…)
// is listed in Result.Problems with its unique_id, and so is every node that
// depends on it, since its step could not run. The plan always passes
// plan.Plan.Validate; Import returns an error (PLAN_INVALID) if the
// manifest is unreadable, its schema version unsupported, or no node at all
// could be imported.
package dbt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// Options configures Import.
type Options struct {
	// ProjectDir is the dbt project's root; seed CSV files are found under it.
	ProjectDir string
	// OutDir is the directory the plan file will be written to: seed paths
	// are made relative to it. Empty means the current directory.
	OutDir string
	// PlanID defaults to the manifest's project_name ("dbt" if none);
	// PlanVersion defaults to "1".
	PlanID, PlanVersion string
	// KeepSchemas keeps relation names schema-qualified, for a warehouse
	// with schemas (Postgres): a step builds schema.name, and compiled SQL
	// reads "schema"."name". The database part of dbt's three-part names
	// goes (a Postgres session reads its own database: the warehouse
	// DSN's). Without it every name becomes one part, for SQLite.
	KeepSchemas bool
}

// Problem is a manifest node that did not become a step, and why.
type Problem struct {
	NodeID  string `json:"nodeId"`
	Message string `json:"message"`
}

func (p Problem) String() string { return p.NodeID + ": " + p.Message }

// Result is an imported plan and what could not be imported.
type Result struct {
	Plan          *plan.Plan
	Problems      []Problem
	SchemaVersion int // the manifest's schema version, 4..12
	// MissingSeeds are the seed CSVs looked for and not found (the first
	// place looked, sorted): most often a wrong project directory.
	MissingSeeds []string
}

// YAML renders the plan as the YAML plan.Parse reads. Multi-line SQL
// is written as a literal block where that keeps it byte for byte, and
// double-quoted otherwise (leading blank lines or indentation, trailing
// blanks, CR): yaml.v3 block scalars do not round-trip those.
func (r *Result) YAML() ([]byte, error) {
	// Via JSON: yaml.Node.Encode goes through yaml.v3's own text, which is
	// what cannot be read back.
	js, err := json.Marshal(r.Plan)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(js, &doc); err != nil {
		return nil, err
	}
	styleStrings(&doc)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func styleStrings(n *yaml.Node) {
	if n.Kind == yaml.MappingNode {
		// JSON has no omitempty for the Duration struct: drop "timeout: 0s".
		kept := n.Content[:0]
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "timeout" && n.Content[i+1].Value == "0s" {
				continue
			}
			kept = append(kept, n.Content[i], n.Content[i+1])
		}
		n.Content = kept
	}
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		n.Style = 0 // block, not JSON's flow style
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		n.Style = 0
		if literalSafe(n.Value) {
			n.Style = yaml.LiteralStyle
		} else if strings.ContainsAny(n.Value, "\n\r\t") {
			n.Style = yaml.DoubleQuotedStyle
		}
	}
	for _, c := range n.Content {
		styleStrings(c)
	}
}

// literalSafe: multi-line text a literal block keeps exactly.
func literalSafe(s string) bool {
	if !strings.Contains(s, "\n") || strings.ContainsAny(s, "\r\t") {
		return false
	}
	if s[0] == ' ' || s[0] == '\n' {
		return false
	}
	for _, line := range strings.Split(s, "\n") {
		if strings.HasSuffix(line, " ") {
			return false
		}
	}
	// Literal blocks keep one final newline or none (|-), not several.
	return !strings.HasSuffix(s, "\n\n")
}

// JSON renders the plan as indented JSON.
func (r *Result) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(r.Plan, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Supported manifest schema versions.
const (
	MinSchemaVersion = 4
	MaxSchemaVersion = 12
)

// manifest is the part of a dbt manifest the importer reads; it is common
// to schemas v4..v12.
type manifest struct {
	Metadata struct {
		SchemaVersion string `json:"dbt_schema_version"`
		DbtVersion    string `json:"dbt_version"`
		ProjectName   string `json:"project_name"`
	} `json:"metadata"`
	Nodes   map[string]*node   `json:"nodes"`
	Sources map[string]*source `json:"sources"`
	// UnitTests (v12) are run by dbt build but need dbt to render their
	// fixtures: each is reported, none imported.
	UnitTests map[string]json.RawMessage `json:"unit_tests"`
}

type node struct {
	UniqueID         string `json:"unique_id"`
	ResourceType     string `json:"resource_type"`
	Name             string `json:"name"`
	Alias            string `json:"alias"`
	Database         string `json:"database"`
	Schema           string `json:"schema"`
	PackageName      string `json:"package_name"`
	OriginalFilePath string `json:"original_file_path"`
	RelationName     string `json:"relation_name"`
	Language         string `json:"language"`
	CompiledCode     string `json:"compiled_code"`
	CompiledSQL      string `json:"compiled_sql"`
	Version          any    `json:"version"` // a number or a string
	AttachedNode     string `json:"attached_node"`
	ColumnName       string `json:"column_name"`
	Config           struct {
		Materialized string `json:"materialized"`
		// UniqueKey is a column name, a list of them, or (dbt allows it)
		// an SQL expression.
		UniqueKey           any    `json:"unique_key"`
		IncrementalStrategy string `json:"incremental_strategy"`
		Severity            string `json:"severity"`
		Where               string `json:"where"`
		Delimiter           string `json:"delimiter"`
		Enabled             *bool  `json:"enabled"`
	} `json:"config"`
	DependsOn struct {
		Nodes []string `json:"nodes"`
	} `json:"depends_on"`
	TestMetadata *struct {
		Name      string         `json:"name"`
		Namespace string         `json:"namespace"`
		Kwargs    map[string]any `json:"kwargs"`
	} `json:"test_metadata"`
	// Node selection (tag:, fqn) reads these on the plan's steps.
	Tags []string `json:"tags"`
	FQN  []string `json:"fqn"`
}

type source struct {
	UniqueID     string `json:"unique_id"`
	Name         string `json:"name"`
	Identifier   string `json:"identifier"`
	Database     string `json:"database"`
	Schema       string `json:"schema"`
	RelationName string `json:"relation_name"`
}

var schemaVersionRE = regexp.MustCompile(`/manifest/v(\d+)\.json$`)

// Import converts a manifest. See the package documentation.
func Import(data []byte, opts Options) (*Result, error) {
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, engine.Errorf(engine.CodePlanInvalid, "the dbt manifest is not valid JSON: %w", err)
	}
	sm := schemaVersionRE.FindStringSubmatch(m.Metadata.SchemaVersion)
	if sm == nil {
		return nil, engine.Errorf(engine.CodePlanInvalid, "the dbt manifest has no metadata.dbt_schema_version like .../manifest/v12.json (got %q)", m.Metadata.SchemaVersion)
	}
	ver, err := strconv.Atoi(sm[1])
	if err != nil || ver < MinSchemaVersion || ver > MaxSchemaVersion {
		return nil, engine.Errorf(engine.CodePlanInvalid, "dbt manifest schema v%s is not supported (v%d to v%d are)", sm[1], MinSchemaVersion, MaxSchemaVersion)
	}
	im := &importer{m: &m, opts: opts, version: ver, steps: map[string]*plan.Step{}, stepOf: map[string]string{}, failed: map[string]string{}}
	return im.run()
}

type importer struct {
	m       *manifest
	opts    Options
	version int

	ids      []string              // node ids, sorted
	steps    map[string]*plan.Step // by node id
	stepOf   map[string]string     // node id → step id
	failed   map[string]string     // node id → why it is not a step
	problems []Problem
	missing  []string // seed CSVs not found
	renames  []rename // relation names in compiled SQL → one-part (or schema.name) names
}

// rename replaces one spelling of a relation name; unquoted spellings
// (db.schema.name) match only as whole names, through re.
type rename struct {
	from, to string
	re       *regexp.Regexp
}

func (im *importer) fail(id, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	im.failed[id] = msg
	delete(im.steps, id)
	delete(im.stepOf, id)
}

func (im *importer) run() (*Result, error) {
	for id, n := range im.m.Nodes {
		if n == nil {
			return nil, engine.Errorf(engine.CodePlanInvalid, "dbt manifest node %s is null", id)
		}
		if n.UniqueID == "" {
			n.UniqueID = id
		}
		im.ids = append(im.ids, id)
	}
	sort.Strings(im.ids)
	im.collectRenames()

	// Pass 1: each node on its own.
	for _, id := range im.ids {
		n := im.m.Nodes[id]
		if n.Config.Enabled != nil && !*n.Config.Enabled {
			im.fail(id, "disabled")
			continue
		}
		switch n.ResourceType {
		case "seed":
			im.seed(n)
		case "model":
			im.model(n)
		case "test":
			im.test(n)
		case "snapshot":
			im.fail(id, "snapshots are not supported (they need SCD history, not a rebuild)")
		case "analysis":
			im.fail(id, "analyses are not run by dbt build; not imported")
		case "operation":
			im.fail(id, "hooks and operations are not imported")
		default:
			im.fail(id, "resource type %q is not supported", n.ResourceType)
		}
	}
	// Step ids and relations must be unique; a clash is a problem for the
	// later node (in id order), not a silent overwrite.
	seenStep, seenRel := map[string]string{}, map[string]string{}
	for _, id := range im.ids {
		st, ok := im.steps[id]
		if !ok {
			continue
		}
		// What the plan's validation would refuse in this step alone (SQL
		// with several statements, a reserved name, control characters…)
		// is this node's problem, not the whole import's.
		if probs := st.Problems(); len(probs) > 0 {
			im.fail(id, "%s", strings.Join(probs, "; "))
			continue
		}
		if other, dup := seenStep[st.ID]; dup {
			// Tests of the same name in two places differ by the hash dbt
			// appends to their unique_id.
			n := im.m.Nodes[id]
			h := strings.TrimPrefix(id, "test."+n.PackageName+"."+n.Name+".")
			alt := st.ID + "_" + h
			if st.Kind != plan.KindTest || h == id || h == "" || strings.Contains(h, ".") || seenStep[alt] != "" {
				im.fail(id, "its step id %s is taken by %s", st.ID, other)
				continue
			}
			st.ID = alt
			im.stepOf[id] = alt
		}
		if st.Kind != plan.KindTest {
			rel := strings.ToLower(st.Relation())
			if other, dup := seenRel[rel]; dup {
				im.fail(id, "builds relation %s, which %s builds too (SQLite has one schema)", st.Relation(), other)
				continue
			}
			seenRel[rel] = id
		}
		seenStep[st.ID] = id
	}

	// Pass 2: dependencies, until no more nodes fail (a failure makes its
	// dependents fail).
	for changed := true; changed; {
		changed = false
		for _, id := range im.ids {
			st, ok := im.steps[id]
			if !ok {
				continue
			}
			st.DependsOn = st.DependsOn[:0]
			seen := map[string]bool{}
			for _, dep := range im.m.Nodes[id].DependsOn.Nodes {
				if _, isSource := im.m.Sources[dep]; isSource || strings.HasPrefix(dep, "source.") {
					continue // external tables: not steps
				}
				if strings.HasPrefix(dep, "metric.") || strings.HasPrefix(dep, "semantic_model.") {
					continue
				}
				if why, bad := im.failed[dep]; bad {
					im.fail(id, "depends on %s, which was not imported (%s)", dep, firstClause(why))
					changed = true
					break
				}
				sid, ok := im.stepOf[dep]
				if !ok {
					im.fail(id, "depends on %s, which is not in the manifest's nodes", dep)
					changed = true
					break
				}
				if !seen[sid] && sid != st.ID {
					seen[sid] = true
					st.DependsOn = append(st.DependsOn, sid)
				}
			}
		}
	}

	p := &plan.Plan{
		PlanID:        im.opts.PlanID,
		PlanVersion:   im.opts.PlanVersion,
		SchemaVersion: plan.SchemaVersion,
		Metadata: plan.Metadata{
			Name:          fmt.Sprintf("imported from dbt project %s (dbt %s, manifest v%d)", orDefault(im.m.Metadata.ProjectName, "?"), orDefault(im.m.Metadata.DbtVersion, "?"), im.version),
			TargetAdapter: "any",
		},
	}
	if p.PlanID == "" {
		p.PlanID = orDefault(strings.ReplaceAll(im.m.Metadata.ProjectName, "|", "_"), "dbt")
	}
	if p.PlanVersion == "" {
		p.PlanVersion = "1"
	}
	// Steps in a stable order: seeds, models, tests, each by node id.
	rank := map[string]int{plan.KindSeed: 0, plan.KindModel: 1, plan.KindTest: 2}
	var order []string
	for _, id := range im.ids {
		if _, ok := im.steps[id]; ok {
			order = append(order, id)
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return rank[im.steps[order[i]].Kind] < rank[im.steps[order[j]].Kind] })
	for _, id := range order {
		st := im.steps[id]
		if len(st.DependsOn) == 0 {
			st.DependsOn = nil
		}
		p.Steps = append(p.Steps, *st)
	}
	for id := range im.m.UnitTests {
		im.failed[id] = "unit tests are not imported (their fixtures need dbt to render)"
		im.ids = append(im.ids, id)
	}
	sort.Strings(im.ids)
	for _, id := range im.ids {
		if why, ok := im.failed[id]; ok {
			im.problems = append(im.problems, Problem{NodeID: id, Message: why})
		}
	}
	sort.Strings(im.missing)
	res := &Result{Plan: p, Problems: im.problems, SchemaVersion: im.version, MissingSeeds: im.missing}
	if len(p.Steps) == 0 {
		// The error is all a caller gets: it carries the problems whole in
		// Meta, and leads with a cause (a node that failed on its own, not
		// for a dependency) in one short line.
		listed := make([]string, len(im.problems))
		var causes []string
		for i, pr := range im.problems {
			listed[i] = engine.ShowText(pr.NodeID) + ": " + pr.Message
			if !strings.HasPrefix(pr.Message, "depends on ") {
				causes = append(causes, listed[i])
			}
		}
		msg := "no node of the dbt manifest could be imported"
		switch {
		case len(im.missing) > 0:
			msg = fmt.Sprintf("seed CSV not found: %s", im.missing[0])
			if more := len(im.missing) - 1; more > 0 {
				msg += fmt.Sprintf(" (and %d more seed(s))", more)
			}
			msg += fmt.Sprintf("; no node of the dbt manifest could be imported (%d problems)", len(listed))
		case len(causes) > 0:
			msg += fmt.Sprintf(" (%d problems): %s", len(listed), engine.JoinLimited(causes, "; ", 3))
		case len(listed) > 0:
			msg += fmt.Sprintf(" (%d problems): %s", len(listed), engine.JoinLimited(listed, "; ", 3))
		}
		return res, &engine.Error{Code: engine.CodePlanInvalid, Msg: msg, Meta: map[string]any{"problems": listed, "missingSeeds": im.missing}}
	}
	if err := p.Validate(); err != nil {
		return res, fmt.Errorf("the imported plan is not valid: %w", err)
	}
	return res, nil
}

func firstClause(s string) string {
	if i := strings.Index(s, " ("); i > 0 {
		return s[:i]
	}
	return s
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// relationName is what the node builds: its alias (dbt's default alias of
// a versioned model is <name>_v<version>).
func (n *node) relationName() string {
	if n.Alias != "" {
		return n.Alias
	}
	if v := n.version(); v != "" {
		return n.Name + "_v" + v
	}
	return n.Name
}

func (n *node) version() string {
	switch v := n.Version.(type) {
	case nil:
		return ""
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case string:
		return v
	}
	return fmt.Sprint(n.Version)
}

// stepName is <name> in the step id: the relation for seeds and models
// (unique by construction), the test's name for tests.
func (n *node) stepName() string {
	if n.ResourceType == "test" {
		return n.Name
	}
	name := n.Name
	if v := n.version(); v != "" {
		name += "_v" + v
	}
	return name
}

func (n *node) compiled() string {
	if n.CompiledCode != "" {
		return n.CompiledCode
	}
	return n.CompiledSQL
}

func (im *importer) newStep(n *node, kind string) (*plan.Step, bool) {
	name := n.stepName()
	if name == "" {
		im.fail(n.UniqueID, "the node has no name")
		return nil, false
	}
	st := &plan.Step{ID: kind + "." + name, Kind: kind, OriginalFilePath: n.OriginalFilePath, DbtUniqueID: n.UniqueID}
	// For node selection: tag:, fqn (jaffle_shop.staging.*) and path:.
	for _, t := range n.Tags {
		if t != "" && !slices.Contains(st.Tags, t) {
			st.Tags = append(st.Tags, t)
		}
	}
	if len(n.FQN) > 0 && !slices.Contains(n.FQN, "") {
		st.FQN = slices.Clone(n.FQN)
	}
	if strings.Contains(st.ID, "|") {
		im.fail(n.UniqueID, "its name %q contains '|', which step ids may not", name)
		return nil, false
	}
	if kind != plan.KindTest {
		rel := n.relationName()
		if !identRE.MatchString(rel) {
			im.fail(n.UniqueID, "relation name %q is not a plain identifier (letters, digits, _ and $)", rel)
			return nil, false
		}
		if im.opts.KeepSchemas && n.Schema != "" {
			if !identRE.MatchString(n.Schema) {
				im.fail(n.UniqueID, "schema name %q is not a plain identifier (letters, digits, _ and $)", n.Schema)
				return nil, false
			}
			rel = n.Schema + "." + rel
		}
		st.Name = rel
	}
	im.steps[n.UniqueID] = st
	im.stepOf[n.UniqueID] = st.ID
	return st, true
}

// identRE is plan.Plan's rule for relation names.
var identRE = regexp.MustCompile(`^[A-Za-z_\p{L}][A-Za-z0-9_$\p{L}\p{N}]*$`)

func (im *importer) seed(n *node) {
	if d := n.Config.Delimiter; d != "" && d != "," {
		im.fail(n.UniqueID, "seed delimiter %q is not supported (CSV with commas only)", d)
		return
	}
	var candidates []string
	if n.OriginalFilePath != "" {
		candidates = append(candidates, filepath.Join(im.opts.ProjectDir, filepath.FromSlash(n.OriginalFilePath)))
	}
	if c := filepath.Join(im.opts.ProjectDir, "seeds", n.Name+".csv"); !slices.Contains(candidates, c) {
		candidates = append(candidates, c)
	}
	path := ""
	for _, c := range candidates {
		if fi, err := os.Stat(c); err == nil && !fi.IsDir() {
			path = c
			break
		}
	}
	if path == "" {
		im.fail(n.UniqueID, "seed CSV not found (looked for %s)", strings.Join(candidates, ", "))
		im.missing = append(im.missing, candidates[0])
		return
	}
	rel, err := relativeTo(im.opts.OutDir, path)
	if err != nil {
		im.fail(n.UniqueID, "seed CSV %s: %v", path, err)
		return
	}
	st, ok := im.newStep(n, plan.KindSeed)
	if !ok {
		return
	}
	st.Path = filepath.ToSlash(rel)
}

func relativeTo(dir, path string) (string, error) {
	if dir == "" {
		dir = "."
	}
	ad, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	ap, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	return filepath.Rel(ad, ap)
}

func (im *importer) model(n *node) {
	if n.Language != "" && n.Language != "sql" {
		im.fail(n.UniqueID, "%s models are not supported", n.Language)
		return
	}
	mat := ""
	var key []string
	switch m := strings.ToLower(n.Config.Materialized); m {
	case "table", "dynamic_table":
		mat = plan.MaterializedTable
	case "incremental":
		mat, key = incremental(n)
	case "view", "materialized_view", "":
		mat = plan.MaterializedView
	case "ephemeral":
		// Not built: dbt has already inlined it, as a __dbt__cte__ CTE, in
		// its readers' compiled SQL (so the plan adds nothing there); a
		// test rendered from test_metadata gets it inlined by the plan.
		mat = plan.MaterializedEphemeral
	default:
		im.fail(n.UniqueID, "materialization %q is not supported", n.Config.Materialized)
		return
	}
	sql := n.compiled()
	if strings.TrimSpace(sql) == "" {
		im.fail(n.UniqueID, "no compiled SQL in the manifest (run dbt compile, not dbt parse)")
		return
	}
	if strings.EqualFold(n.Config.Materialized, "incremental") && n.readsItself(sql) {
		im.fail(n.UniqueID, "its compiled SQL reads its own table: dbt compiled the is_incremental() branch, which cannot build the table on a first run (compile with `dbt compile --full-refresh` and import again)")
		return
	}
	st, ok := im.newStep(n, plan.KindModel)
	if !ok {
		return
	}
	st.Materialized = mat
	st.UniqueKey = key
	st.SQL = im.rewrite(sql)
}

// incremental maps a dbt incremental model. With the merge or
// delete+insert strategy (dbt's defaults) and a unique_key of plain column
// names it stays incremental on that key; its compiled SQL is the full
// select (is_incremental() was false when it compiled), so each run merges
// every row of it — dbt's result, without dbt's saving of reading only new
// rows (add incrementalFilter to the plan for that). Otherwise (no key:
// dbt appends; an expression key; append, insert_overwrite or microbatch)
// it is rebuilt in full as a table, since appending the full select every
// run would repeat rows.
func incremental(n *node) (string, []string) {
	switch strings.ToLower(n.Config.IncrementalStrategy) {
	case "", "merge", "delete+insert":
	default:
		return plan.MaterializedTable, nil
	}
	var key []string
	switch k := n.Config.UniqueKey.(type) {
	case string:
		key = []string{k}
	case []any:
		for _, c := range k {
			s, ok := c.(string)
			if !ok {
				return plan.MaterializedTable, nil
			}
			key = append(key, s)
		}
	}
	if len(key) == 0 {
		return plan.MaterializedTable, nil
	}
	for _, c := range key {
		if !identRE.MatchString(c) {
			return plan.MaterializedTable, nil
		}
	}
	return plan.MaterializedIncremental, key
}

// readsItself reports whether compiled SQL names the node's own relation,
// as {{ this }} renders in an is_incremental() branch.
func (n *node) readsItself(sql string) bool {
	forms := []string{n.RelationName}
	if n.Schema != "" {
		name := n.relationName()
		forms = append(forms, quoteIdent(n.Schema)+"."+quoteIdent(name))
		if n.Database != "" {
			forms = append(forms, n.Database+"."+n.Schema+"."+name)
		}
	}
	for _, f := range forms {
		if f != "" && strings.Contains(sql, f) {
			return true
		}
	}
	return false
}

func (im *importer) test(n *node) {
	sql := n.compiled()
	if strings.TrimSpace(sql) != "" {
		sql = im.rewrite(sql)
	} else {
		var err error
		sql, err = im.renderGeneric(n)
		if err != nil {
			im.fail(n.UniqueID, "%v", err)
			return
		}
	}
	st, ok := im.newStep(n, plan.KindTest)
	if !ok {
		return
	}
	st.SQL = sql
	if strings.EqualFold(n.Config.Severity, "warn") {
		st.Severity = plan.SeverityWarn
	}
}

// collectRenames lists every way the manifest names a relation it knows —
// relation_name, and database.schema.alias quoted and bare — with the
// one-part quoted name it becomes, longest first so that a three-part name
// is replaced before the two-part name inside it.
func (im *importer) collectRenames() {
	seen := map[string]bool{}
	add := func(to string, relationName, db, schema, name string) {
		if to == "" {
			return
		}
		q := im.quoted(schema, to)
		forms := []string{relationName}
		if name != "" && schema != "" {
			forms = append(forms, quoteIdent(schema)+"."+quoteIdent(name), schema+"."+name)
			if db != "" {
				forms = append(forms, quoteIdent(db)+"."+quoteIdent(schema)+"."+quoteIdent(name), db+"."+schema+"."+name)
			}
		}
		for _, f := range forms {
			if f == "" || f == q || seen[f] {
				continue
			}
			seen[f] = true
			r := rename{from: f, to: q}
			if !strings.HasPrefix(f, `"`) && !strings.HasPrefix(f, "`") {
				r.re = regexp.MustCompile(`(^|[^\w."])` + regexp.QuoteMeta(f) + `($|[^\w."])`)
			}
			im.renames = append(im.renames, r)
		}
	}
	for _, id := range im.ids {
		n := im.m.Nodes[id]
		switch n.ResourceType {
		case "seed", "model", "snapshot":
			add(n.relationName(), n.RelationName, n.Database, n.Schema, n.relationName())
		}
	}
	var sids []string
	for id := range im.m.Sources {
		sids = append(sids, id)
	}
	sort.Strings(sids)
	for _, id := range sids {
		s := im.m.Sources[id]
		if s == nil {
			continue
		}
		ident := orDefault(s.Identifier, s.Name)
		add(ident, s.RelationName, s.Database, s.Schema, ident)
	}
	sort.SliceStable(im.renames, func(i, j int) bool { return len(im.renames[i].from) > len(im.renames[j].from) })
}

// threePartRE matches a fully quoted "db"."schema"."name" (or with
// backticks) that no manifest node names, e.g. a table outside dbt.
var threePartRE = regexp.MustCompile("(?:\"(?:[^\"]|\"\")+\"\\.){1,2}(\"(?:[^\"]|\"\")+\")|(?:`[^`]+`\\.){1,2}`([^`]+)`")

// keptSchemaRE matches a fully quoted "db"."schema"."name": what
// KeepSchemas cuts to "schema"."name".
var keptSchemaRE = regexp.MustCompile("\"(?:[^\"]|\"\")+\"\\.(\"(?:[^\"]|\"\")+\"\\.\"(?:[^\"]|\"\")+\")|`[^`]+`\\.(`[^`]+`\\.`[^`]+`)")

// quoted is a relation's name as rewritten SQL spells it: "name", or with
// KeepSchemas "schema"."name".
func (im *importer) quoted(schema, name string) string {
	if im.opts.KeepSchemas && schema != "" {
		return quoteIdent(schema) + "." + quoteIdent(name)
	}
	return quoteIdent(name)
}

// rewrite replaces multi-part relation names in compiled SQL with one-part
// quoted names (two-part with KeepSchemas). Unquoted forms are replaced
// only at word boundaries.
func (im *importer) rewrite(sql string) string {
	for _, r := range im.renames {
		if r.re == nil {
			sql = strings.ReplaceAll(sql, r.from, r.to)
			continue
		}
		sql = r.re.ReplaceAllString(sql, "${1}"+strings.ReplaceAll(r.to, "$", "$$")+"${2}")
	}
	if im.opts.KeepSchemas {
		return keptSchemaRE.ReplaceAllString(sql, "${1}${2}")
	}
	return threePartRE.ReplaceAllStringFunc(sql, func(s string) string {
		m := threePartRE.FindStringSubmatch(s)
		if m[1] != "" {
			return m[1]
		}
		return quoteIdent(m[2])
	})
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
