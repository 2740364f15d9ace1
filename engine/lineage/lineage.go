// Package lineage turns dvtrun's run events into OpenLineage RunEvents
// (spec 2-0-2): one job per plan run (name = planId) and one per seed, model
// or sql step, named like dbt-ol's (db.schema.table), each step run pointing
// at the plan run through its parent facet. Everything an event says is
// derived from the stored run event and the run's stored plan bundle, so a
// redelivery produces the same bytes: run ids are name-based UUIDs of (run,
// step, logical attempt) and eventTime is the event's emittedAt.
package lineage

import (
	"cmp"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// Published identities of what dvtrun emits.
const (
	// Producer is every event's producer and every facet's _producer.
	Producer = "https://github.com/dvtrun/dvtrun"
	// SchemaURL is the RunEvent schema the events follow.
	SchemaURL = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"
	// DefaultNamespace is the jobs' namespace when the sink sets none.
	DefaultNamespace = "dvtrun"
	// Integration is the jobType facet's integration.
	Integration = "DVTRUN"
)

// Facet schema URLs: the facet versions the sink's fields follow. The
// parent facet is 1-1-0's, the version that added root.
const (
	jobTypeSchema    = "https://openlineage.io/spec/facets/2-0-2/JobTypeJobFacet.json#/$defs/JobTypeJobFacet"
	sqlSchema        = "https://openlineage.io/spec/1-0-1/SQLJobFacet.json#/$defs/SQLJobFacet"
	parentSchema     = "https://openlineage.io/spec/facets/1-1-0/ParentRunFacet.json#/$defs/ParentRunFacet"
	engineSchema     = "https://openlineage.io/spec/facets/1-1-0/ProcessingEngineRunFacet.json#/$defs/ProcessingEngineRunFacet"
	errorSchema      = "https://openlineage.io/spec/facets/1-0-0/ErrorMessageRunFacet.json#/$defs/ErrorMessageRunFacet"
	queryIDSchema    = "https://openlineage.io/spec/facets/1-0-0/ExternalQueryRunFacet.json#/$defs/ExternalQueryRunFacet"
	outputStatSchema = "https://openlineage.io/spec/1-0-1/OutputStatisticsOutputDatasetFacet.json#/$defs/OutputStatisticsOutputDatasetFacet"
)

// OpenLineage event types.
const (
	Start    = "START"
	Complete = "COMPLETE"
	Fail     = "FAIL"
	Abort    = "ABORT"
)

// Event is an OpenLineage RunEvent.
type Event struct {
	EventType string    `json:"eventType"`
	EventTime string    `json:"eventTime"`
	Run       Run       `json:"run"`
	Job       Job       `json:"job"`
	Inputs    []Dataset `json:"inputs"`
	Outputs   []Dataset `json:"outputs"`
	Producer  string    `json:"producer"`
	SchemaURL string    `json:"schemaURL"`
}

// Run is an event's run: its id and facets.
type Run struct {
	RunID  string         `json:"runId"`
	Facets map[string]any `json:"facets,omitempty"`
}

// Job is an event's job.
type Job struct {
	Namespace string         `json:"namespace"`
	Name      string         `json:"name"`
	Facets    map[string]any `json:"facets,omitempty"`
}

// Dataset is an input or output dataset.
type Dataset struct {
	Namespace    string         `json:"namespace"`
	Name         string         `json:"name"`
	OutputFacets map[string]any `json:"outputFacets,omitempty"`
}

// runRef names a run of a job (the parent facet's run and job, and its
// root).
type runRef struct {
	Run struct {
		RunID string `json:"runId"`
	} `json:"run"`
	Job struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"job"`
}

// Naming places the warehouse's relations in OpenLineage's dataset naming
// (https://openlineage.io/docs/spec/naming).
type Naming struct {
	// Namespace is the datasets' namespace: snowflake://org-account,
	// postgres://host:port, sqlite://<absolute path of the database file>.
	Namespace string
	// Database and Schema qualify a step's relation: a dataset is named
	// Database.Schema.relation, a step's job likewise (dbt-ol's job name).
	Database, Schema string
	// NamespaceHoldsDatabase drops Database from dataset names where the
	// namespace already is the database (SQLite's file).
	NamespaceHoldsDatabase bool
	// Upper upper-cases names (Snowflake resolves unquoted names upper-case,
	// and dvtrun creates simple names that way).
	Upper bool
	// Source is the externalQuery facet's source: the warehouse's kind.
	Source string
}

// SnowflakeNaming is snowflake://<account> and DB.SCHEMA.TABLE. account is
// the DSN's account identifier (orgname-accountname, or a legacy locator).
func SnowflakeNaming(account, database, schema string) Naming {
	return Naming{Namespace: "snowflake://" + strings.ToLower(account), Database: database, Schema: schema, Upper: true, Source: "snowflake"}
}

// PostgresNaming is postgres://host:port and db.schema.table.
func PostgresNaming(host string, port int, database, schema string) Naming {
	if port == 0 {
		port = 5432
	}
	return Naming{Namespace: "postgres://" + host + ":" + strconv.Itoa(port), Database: database, Schema: cmp.Or(schema, "public"), Source: "postgres"}
}

// SQLiteNaming is dvtrun's choice for SQLite, which OpenLineage's naming
// spec leaves out: the namespace sqlite://<absolute file path> (the file is
// the database), datasets named main.table, and jobs <file stem>.main.table.
func SQLiteNaming(path string) Naming {
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	stem := strings.TrimSuffix(filepath.Base(abs), filepath.Ext(abs))
	return Naming{Namespace: "sqlite://" + filepath.ToSlash(abs), Database: stem, Schema: "main", NamespaceHoldsDatabase: true, Source: "sqlite"}
}

func (n Naming) up(s string) string {
	if n.Upper {
		return strings.ToUpper(s)
	}
	return s
}

// DatasetName is relation's dataset name.
func (n Naming) DatasetName(relation string) string {
	parts := n.qualify(relation)
	if n.NamespaceHoldsDatabase {
		parts = parts[1:]
	}
	return n.up(joinNonEmpty(parts))
}

// SourceName is a source table's dataset name: its own database when the
// plan declares one, else the warehouse's.
func (n Naming) SourceName(src plan.SourceRef) string {
	parts := []string{cmp.Or(src.Database, n.Database), src.Schema, src.Table}
	if n.NamespaceHoldsDatabase {
		parts = parts[1:]
	}
	return n.up(joinNonEmpty(parts))
}

// JobName is the job name of a step that builds relation: db.schema.table.
func (n Naming) JobName(relation string) string {
	return n.up(joinNonEmpty(n.qualify(relation)))
}

// qualify is [database, schema, table]: a schema-qualified relation
// (schema.table, as the Postgres warehouse builds dbt's --keep-schemas
// names) keeps its own schema.
func (n Naming) qualify(relation string) []string {
	if schema, table, ok := strings.Cut(relation, "."); ok {
		return []string{n.Database, schema, table}
	}
	return []string{n.Database, n.Schema, relation}
}

func joinNonEmpty(parts []string) string {
	out := parts[:0:0]
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, ".")
}

// idSpace is the namespace of dvtrun's name-based (v5) run ids. Fixed
// forever: changing it would give every past run a new identity.
var idSpace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/dvtrun/dvtrun/openlineage"))

// PlanRunID is the OpenLineage runId of a dvtrun run's plan job.
func PlanRunID(runID string) string {
	return uuid.NewSHA1(idSpace, []byte("run\x00"+runID)).String()
}

// StepRunID is the OpenLineage runId of one logical attempt of a step: a
// step resumed on another engine attempt keeps it, a retry gets a new one.
func StepRunID(runID, stepID string, logicalAttempt int) string {
	return uuid.NewSHA1(idSpace, []byte("step\x00"+runID+"\x00"+stepID+"\x00"+strconv.Itoa(logicalAttempt))).String()
}

// PlanSource gives the plan bundle a run ran (from the state store); ok is
// false when it was not stored (a run recorded before bundles were).
// target is the configuration target the run was started on ("" without
// targets).
type PlanSource interface {
	RunBundle(ctx context.Context, runID string) (b *plan.Bundle, target string, ok bool, err error)
}

// Options configures a Mapper.
type Options struct {
	Namespace string // the jobs' namespace; default DefaultNamespace
	// Naming names the datasets of a run started on no target, or on one
	// Targets does not have.
	Naming Naming
	// Targets names the datasets of runs by the target they were started
	// on: each target has its own warehouse.
	Targets       map[string]Naming
	Plans         PlanSource
	EngineVersion string // processing_engine's version; default "unknown"
}

// Mapper maps run events to OpenLineage events. It is safe for concurrent
// use.
type Mapper struct {
	o  Options
	mu sync.Mutex
	// plans caches the last runs' indexed plans: a delivery batch holds a
	// few runs' events in order.
	plans map[string]*runPlan
	order []string
}

// planCache bounds Mapper's cache of plans.
const planCache = 32

// NewMapper fills the defaults.
func NewMapper(o Options) (*Mapper, error) {
	if o.Plans == nil {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "the openlineage mapper needs the runs' plans")
	}
	o.Namespace = cmp.Or(o.Namespace, DefaultNamespace)
	o.EngineVersion = cmp.Or(o.EngineVersion, "unknown")
	return &Mapper{o: o, plans: map[string]*runPlan{}}, nil
}

// runPlan is a run's plan indexed for mapping (nil bundle: not stored),
// with the naming of its warehouse.
type runPlan struct {
	bundle *plan.Bundle
	steps  map[string]plan.Step
	naming Naming
}

func (m *Mapper) plan(ctx context.Context, runID string) (*runPlan, error) {
	m.mu.Lock()
	p, ok := m.plans[runID]
	m.mu.Unlock()
	if ok {
		return p, nil
	}
	b, target, found, err := m.o.Plans.RunBundle(ctx, runID)
	if err != nil {
		return nil, err
	}
	p = &runPlan{steps: map[string]plan.Step{}, naming: m.o.Naming}
	if n, ok := m.o.Targets[target]; ok && target != "" {
		p.naming = n
	}
	if found {
		p.bundle = b
		for _, s := range b.Plan.Steps {
			p.steps[s.ID] = s
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.plans[runID]; !ok {
		if len(m.order) >= planCache {
			delete(m.plans, m.order[0])
			m.order = m.order[1:]
		}
		m.order = append(m.order, runID)
	}
	m.plans[runID] = p
	return p, nil
}

// eventTypes maps the run events that have an OpenLineage counterpart.
var eventTypes = map[engine.EventType]string{
	engine.RunStarted: Start, engine.RunCompleted: Complete, engine.RunFailed: Fail, engine.RunCancelled: Abort,
	engine.StepStarted: Start, engine.StepCompleted: Complete, engine.StepFailed: Fail,
}

// stepPayload is what a step event's payload says that lineage uses.
type stepPayload struct {
	RowCount     int64             `json:"rowCount"`
	RowsAffected int64             `json:"rowsAffected"`
	QueryIDs     []string          `json:"queryIds"`
	SQL          string            `json:"sql"`
	Error        *engine.ErrorInfo `json:"error"`
}

// Map returns the OpenLineage event of rec, or nil when rec has none
// (queueing, approvals, pauses, signals, skipped steps, tests and
// ephemeral models, which build nothing).
func (m *Mapper) Map(ctx context.Context, rec engine.RunEventRecord) (*Event, error) {
	olType, ok := eventTypes[rec.EventType]
	if !ok {
		return nil, nil // decoding no payload: RunQueued's holds the whole plan ref
	}
	var pl stepPayload
	if len(rec.Payload) > 0 {
		// Payloads were validated on append; a field that does not decode
		// is left out rather than holding the delivery back.
		_ = json.Unmarshal(rec.Payload, &pl)
	}
	if rec.EventType == engine.StepFailed && pl.Error != nil && pl.Error.Code == string(engine.CodeStepCancelled) {
		olType = Abort // the run's cancellation ended it, not an error of its own
	}
	ev := &Event{
		EventType: olType,
		EventTime: rec.EmittedAt.UTC().Format(time.RFC3339Nano),
		Inputs:    []Dataset{},
		Outputs:   []Dataset{},
		Producer:  Producer,
		SchemaURL: SchemaURL,
	}
	runFacets := map[string]any{
		"processing_engine": map[string]any{"_producer": Producer, "_schemaURL": engineSchema,
			"name": "dvtrun", "version": m.o.EngineVersion, "openlineageAdapterVersion": m.o.EngineVersion},
	}
	if olType == Fail && pl.Error != nil && pl.Error.Message != "" {
		runFacets["errorMessage"] = map[string]any{"_producer": Producer, "_schemaURL": errorSchema,
			"message": pl.Error.Code + ": " + pl.Error.Message, "programmingLanguage": "SQL"}
	}
	if !rec.EventType.StepLevel() {
		ev.Run = Run{RunID: PlanRunID(rec.RunID), Facets: runFacets}
		ev.Job = Job{Namespace: m.o.Namespace, Name: rec.PlanID, Facets: map[string]any{"jobType": jobType("JOB")}}
		return ev, nil
	}

	p, err := m.plan(ctx, rec.RunID)
	if err != nil {
		return nil, err
	}
	s, known := p.steps[rec.StepID]
	if !known || (!Builds(s) && s.Kind != plan.KindSQL) {
		// A run whose plan was not stored (recorded before bundles were)
		// has its plan job only: its step events do not say what the
		// steps read.
		return nil, nil
	}
	relation, naming := s.Relation(), p.naming
	ev.Job = Job{Namespace: m.o.Namespace, Name: naming.JobName(relation), Facets: map[string]any{"jobType": jobType(strings.ToUpper(s.Kind))}}
	if q := cmp.Or(pl.SQL, p.stepSQL(s)); q != "" {
		ev.Job.Facets["sql"] = map[string]any{"_producer": Producer, "_schemaURL": sqlSchema, "query": q}
	}
	parent := ref(PlanRunID(rec.RunID), m.o.Namespace, rec.PlanID)
	runFacets["parent"] = map[string]any{"_producer": Producer, "_schemaURL": parentSchema,
		"run": parent.Run, "job": parent.Job, "root": map[string]any{"run": parent.Run, "job": parent.Job}}
	if n := len(pl.QueryIDs); n > 0 && olType != Start {
		// The last query is the one that built the relation (earlier ones
		// prepare it).
		runFacets["externalQuery"] = map[string]any{"_producer": Producer, "_schemaURL": queryIDSchema,
			"externalQueryId": pl.QueryIDs[n-1], "source": cmp.Or(naming.Source, "warehouse")}
	}
	ev.Run = Run{RunID: StepRunID(rec.RunID, rec.StepID, rec.LogicalAttemptID), Facets: runFacets}
	for _, in := range p.inputs(s) {
		ev.Inputs = append(ev.Inputs, Dataset{Namespace: naming.Namespace, Name: naming.DatasetName(in)})
	}
	for _, src := range p.sources(s) {
		ev.Inputs = append(ev.Inputs, Dataset{Namespace: naming.Namespace, Name: naming.SourceName(src)})
	}
	if Builds(s) {
		out := Dataset{Namespace: naming.Namespace, Name: naming.DatasetName(relation)}
		rows := pl.RowCount
		if s.Materialized == plan.MaterializedIncremental {
			rows = pl.RowsAffected // what this run wrote, not the table's size
		}
		if olType == Complete && rows > 0 {
			out.OutputFacets = map[string]any{"outputStatistics": map[string]any{"_producer": Producer, "_schemaURL": outputStatSchema, "rowCount": rows}}
		}
		ev.Outputs = append(ev.Outputs, out)
	}
	return ev, nil
}

func jobType(t string) map[string]any {
	return map[string]any{"_producer": Producer, "_schemaURL": jobTypeSchema, "processingType": "BATCH", "integration": Integration, "jobType": t}
}

func ref(runID, namespace, name string) runRef {
	var r runRef
	r.Run.RunID = runID
	r.Job.Namespace, r.Job.Name = namespace, name
	return r
}

// Builds reports whether step s builds a relation of its own: a seed, or a
// model that is not ephemeral (an ephemeral one is inlined where it is read).
func Builds(s plan.Step) bool {
	return s.Kind == plan.KindSeed || (s.Kind == plan.KindModel && s.Materialized != plan.MaterializedEphemeral)
}

// inputs are the relations step s reads, from the DAG's edges: each
// dependency that builds a relation, and through an ephemeral model, what
// it reads. A sql step's own writes are not known (its SQL is not parsed),
// so a dependency on one adds nothing. In dependency order, each once.
func (p *runPlan) inputs(s plan.Step) []string {
	var out []string
	seen := map[string]bool{}
	var walk func(deps []string)
	walk = func(deps []string) {
		for _, id := range deps {
			if seen[id] {
				continue
			}
			seen[id] = true
			d, ok := p.steps[id]
			switch {
			case !ok:
			case Builds(d):
				out = append(out, d.Relation())
			case d.Kind == plan.KindModel: // ephemeral
				walk(d.DependsOn)
			}
		}
	}
	walk(s.DependsOn)
	return out
}

// sources are the source tables step s reads ({{ source(…) }}), its own
// and, through the ephemeral models it reads, theirs; each once.
func (p *runPlan) sources(s plan.Step) []plan.SourceRef {
	if p.bundle == nil {
		return nil
	}
	var out []plan.SourceRef
	seen := map[string]bool{}
	var walk func(s plan.Step)
	walk = func(s plan.Step) {
		s.SQL = p.stepSQL(s)
		for _, ref := range p.bundle.Plan.SourcesOf(s) {
			if !slices.Contains(out, ref) {
				out = append(out, ref)
			}
		}
		for _, id := range s.DependsOn {
			if d, ok := p.steps[id]; ok && !seen[id] && d.Kind == plan.KindModel && d.Materialized == plan.MaterializedEphemeral {
				seen[id] = true
				walk(d)
			}
		}
	}
	walk(s)
	return out
}

// stepSQL is the step's SQL as the plan holds it (inline or its file).
func (p *runPlan) stepSQL(s plan.Step) string {
	if s.SQL != "" || s.Kind == plan.KindSeed || s.Path == "" || p.bundle == nil {
		return s.SQL
	}
	b, ok := p.bundle.File(s.Path)
	if !ok {
		return ""
	}
	return string(b)
}
