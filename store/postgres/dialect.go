package postgres

import "github.com/dvtrun/dvtrun/engine/plan"

// The Warehouse is the renderer's plan.Dialect: schema.name, quoted as the
// warehouse quotes the relations it builds.
var _ plan.Dialect = (*Warehouse)(nil)

// Relation is "schema"."name" in the session's current schema (search_path)
// when the warehouse opened, where a step builds an unqualified relation;
// a name already schema.name is quoted part by part.
func (w *Warehouse) Relation(name string) string {
	if w.schema == "" {
		return quoteIdent(name)
	}
	return quoteIdent(w.schema) + "." + quoteIdent(name)
}

// Source is "schema"."table": a Postgres session reads one database, so a
// source's database is not part of the name.
func (w *Warehouse) Source(_, schema, table string) string {
	return quoteIdent(schema) + "." + quoteIdent(table)
}

// StringLiteral quotes v, doubling its single quotes (standard SQL;
// standard_conforming_strings is on, reading no backslash escapes).
func (w *Warehouse) StringLiteral(v string) string { return plan.QuoteString(v) }

// BoolLiteral is TRUE or FALSE.
func (w *Warehouse) BoolLiteral(v bool) string {
	if v {
		return "TRUE"
	}
	return "FALSE"
}
