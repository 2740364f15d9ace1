package engine

import "time"

// Step kinds.
const (
	KindSeed  = "seed"
	KindModel = "model"
	KindTest  = "test"
	KindSQL   = "sql"
)

// Materializations of a model.
const (
	MaterializedTable = "table"
	MaterializedView  = "view"
)

// Test severities (dbt's): an error-severity test that returns rows fails
// its step; a warn-severity one succeeds with a warning.
const (
	SeverityError = "error"
	SeverityWarn  = "warn"
)

// Plan is a dbt-style DAG of steps. It is read from JSON or YAML (see
// ParsePlan) and validated before anything is written.
type Plan struct {
	PlanID        string       `json:"planId" yaml:"planId"`
	PlanVersion   string       `json:"planVersion" yaml:"planVersion"`
	SchemaVersion string       `json:"schemaVersion" yaml:"schemaVersion"`
	Metadata      PlanMetadata `json:"metadata" yaml:"metadata"`
	Steps         []PlanStep   `json:"steps" yaml:"steps"`

	// Dir is the directory the plan was read from; step paths and seed files
	// resolve against it. Not serialised.
	Dir string `json:"-" yaml:"-"`
}

// PlanMetadata holds the plan's adapter requirements.
type PlanMetadata struct {
	Name                 string   `json:"name,omitempty" yaml:"name,omitempty"`
	TargetAdapter        string   `json:"targetAdapter,omitempty" yaml:"targetAdapter,omitempty"` // "any" or an adapter name
	RequiresCapabilities []string `json:"requiresCapabilities,omitempty" yaml:"requiresCapabilities,omitempty"`
}

// PlanStep is one node of the DAG. ID is dbt-like: seed.customers,
// model.orders, test.not_null_orders_id. Name is the relation it builds
// (defaults to the part of ID after the first dot).
type PlanStep struct {
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
}

// SecretRef names a secret a step needs. Plans carry references, never
// values; the value is resolved at step time and bound as a parameter or
// substituted where the SQL says {{ secret('NAME') }}.
type SecretRef struct {
	Name string `json:"name" yaml:"name"`
}

// PlanRef identifies the exact plan a run executes. SHA256 is the hex digest
// of the plan file's bytes; a mismatch is refused (PLAN_HASH_MISMATCH).
type PlanRef struct {
	URI           string `json:"uri"`
	SHA256        string `json:"sha256"`
	SchemaVersion string `json:"schemaVersion"`
	PlanID        string `json:"planId"`
	PlanVersion   string `json:"planVersion"`
}

// Duration is a time.Duration written as a Go duration string ("30s").
type Duration struct{ time.Duration }
