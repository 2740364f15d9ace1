package sqlite

import "github.com/dvtrun/dvtrun/engine/plan"

// The Warehouse is the renderer's plan.Dialect: one-part quoted names (a
// warehouse is one database file; dev and prod are different files).
var _ plan.Dialect = (*Warehouse)(nil)

// Relation is the quoted one-part name, as the warehouse creates it.
func (w *Warehouse) Relation(name string) string { return quoteIdent(name) }

// Source is the table's quoted one-part name: SQLite's schemas are
// attached database files, which a warehouse does not attach, so a
// source's tables are in the warehouse's own file.
func (w *Warehouse) Source(_, _, table string) string { return quoteIdent(table) }

// StringLiteral quotes v, doubling its single quotes (SQLite reads no backslash
// escapes).
func (w *Warehouse) StringLiteral(v string) string { return plan.QuoteString(v) }

// BoolLiteral is 1 or 0: SQLite has no boolean type (TRUE is 1).
func (w *Warehouse) BoolLiteral(v bool) string {
	if v {
		return "1"
	}
	return "0"
}
