package snowflake

import (
	"strings"

	"github.com/dvtrun/dvtrun/engine/plan"
)

// The Warehouse is the renderer's plan.Dialect: {{ ref }} and {{ this }}
// name relations as it creates them (ident: a simple name upper-cased and
// quoted), in the DSN's database and schema.
var _ plan.Dialect = (*Warehouse)(nil)

// Relation is DB.SCHEMA.NAME in the DSN's database and schema; without
// them in the DSN, the parts it lacks are left to the session's current
// database and schema, where the step creates its relation too.
func (w *Warehouse) Relation(name string) string {
	return qualify(w.database, w.schemaName, name)
}

// Source is DB.SCHEMA.TABLE; database "" is the DSN's.
func (w *Warehouse) Source(database, schema, table string) string {
	if database == "" {
		database = w.database
	}
	return qualify(database, schema, table)
}

func qualify(database, schema, name string) string {
	parts := []string{ident(name)}
	if schema != "" {
		parts = append([]string{ident(schema)}, parts...)
		if database != "" {
			parts = append([]string{ident(database)}, parts...)
		}
	}
	return strings.Join(parts, ".")
}

// StringLiteral is v as a Snowflake string literal: Snowflake reads backslash
// escapes in single-quoted strings (docs: "String & binary data types",
// escape sequences), so backslashes are doubled before the quotes are.
func (w *Warehouse) StringLiteral(v string) string {
	return plan.QuoteString(strings.ReplaceAll(v, `\`, `\\`))
}

// BoolLiteral is TRUE or FALSE.
func (w *Warehouse) BoolLiteral(v bool) string {
	if v {
		return "TRUE"
	}
	return "FALSE"
}
