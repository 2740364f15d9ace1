package dbt

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// renderGeneric writes the SQL of dbt's built-in generic tests from
// test_metadata, for manifests that carry no compiled SQL (dbt parse). The
// queries are dbt's own (dbt-core macros/generic_test_sql), in SQL every
// warehouse here accepts: each returns the failing rows.
func (im *importer) renderGeneric(n *node) (string, error) {
	tm := n.TestMetadata
	if tm == nil {
		return "", errors.New("a singular test with no compiled SQL in the manifest (run dbt compile)")
	}
	if tm.Namespace != "" && tm.Namespace != "dbt" {
		return "", fmt.Errorf("generic test %s.%s has no compiled SQL in the manifest (only unique, not_null, accepted_values and relationships can be rendered)", tm.Namespace, tm.Name)
	}
	switch tm.Name {
	case "unique", "not_null", "accepted_values", "relationships":
	default:
		return "", fmt.Errorf("generic test %q has no compiled SQL in the manifest (only unique, not_null, accepted_values and relationships can be rendered)", tm.Name)
	}
	colName, _ := tm.Kwargs["column_name"].(string)
	if colName == "" {
		colName = n.ColumnName
	}
	col, err := column(colName)
	if err != nil {
		return "", fmt.Errorf("%s test: %w", tm.Name, err)
	}
	model, err := im.testedRelation(n)
	if err != nil {
		return "", fmt.Errorf("%s test: %w", tm.Name, err)
	}
	if w := strings.TrimSpace(n.Config.Where); w != "" {
		if strings.Contains(w, "{{") || strings.Contains(w, "{%") {
			return "", fmt.Errorf("%s test: config.where %q holds Jinja, which only dbt can render", tm.Name, w)
		}
		model = "(select * from " + model + " where " + w + ") as dbt_subquery"
	}
	switch tm.Name {
	case "not_null":
		return "select *\nfrom " + model + "\nwhere " + col + " is null", nil
	case "unique":
		return "select " + col + " as unique_field, count(*) as n_records\nfrom " + model +
			"\nwhere " + col + " is not null\ngroup by " + col + "\nhaving count(*) > 1", nil
	case "accepted_values":
		list, err := valueList(tm.Kwargs)
		if err != nil {
			return "", fmt.Errorf("accepted_values test: %w", err)
		}
		return "select " + col + " as value_field, count(*) as n_records\nfrom " + model +
			"\nwhere " + col + " not in (" + list + ")\ngroup by " + col, nil
	default: // relationships
		to, _ := tm.Kwargs["to"].(string)
		parent, err := im.resolveRef(to)
		if err != nil {
			return "", fmt.Errorf("relationships test: to: %w", err)
		}
		fieldName, _ := tm.Kwargs["field"].(string)
		field, err := column(fieldName)
		if err != nil {
			return "", fmt.Errorf("relationships test: field: %w", err)
		}
		return "with child as (\n    select " + col + " as from_field\n    from " + model + "\n    where " + col + " is not null\n),\n" +
			"parent as (\n    select " + field + " as to_field\n    from " + parent + "\n)\n" +
			"select from_field\nfrom child\nleft join parent on child.from_field = parent.to_field\nwhere parent.to_field is null", nil
	}
}

// column quotes a column name; dbt also allows an expression there, which
// cannot be checked here and is refused.
func column(name string) (string, error) {
	if name == "" {
		return "", errors.New("no column_name")
	}
	if !identRE.MatchString(name) {
		return "", fmt.Errorf("column %q is an expression, not a plain column name", name)
	}
	return quoteIdent(name), nil
}

// valueList renders accepted_values' values as SQL literals: strings quoted
// (quote: true, the default) with quotes doubled; numbers and booleans as
// numbers.
func valueList(kwargs map[string]any) (string, error) {
	vals, _ := kwargs["values"].([]any)
	if len(vals) == 0 {
		return "", errors.New("no values")
	}
	quote := true
	if q, ok := kwargs["quote"].(bool); ok {
		quote = q
	}
	parts := make([]string, len(vals))
	for i, v := range vals {
		switch x := v.(type) {
		case string:
			if !quote {
				if _, err := strconv.ParseFloat(x, 64); err != nil {
					return "", fmt.Errorf("value %q with quote: false is not a number", x)
				}
				parts[i] = x
				continue
			}
			parts[i] = "'" + strings.ReplaceAll(x, "'", "''") + "'"
		case float64:
			parts[i] = strconv.FormatFloat(x, 'f', -1, 64)
		case bool:
			parts[i] = map[bool]string{true: "1", false: "0"}[x]
		default:
			return "", fmt.Errorf("value %v is neither a string nor a number", v)
		}
	}
	return strings.Join(parts, ", "), nil
}

// testedRelation is the relation a generic test reads: the node it is
// attached to, else the ref() in kwargs.model, else its only dependency.
func (im *importer) testedRelation(n *node) (string, error) {
	if n.AttachedNode != "" {
		if rel, ok := im.nodeRelation(n.AttachedNode); ok {
			return rel, nil
		}
	}
	if m, ok := n.TestMetadata.Kwargs["model"].(string); ok && m != "" {
		return im.resolveRef(m)
	}
	if len(n.DependsOn.Nodes) == 1 {
		if rel, ok := im.nodeRelation(n.DependsOn.Nodes[0]); ok {
			return rel, nil
		}
	}
	return "", errors.New("cannot tell which relation it tests (no attached_node, kwargs.model or single dependency)")
}

// nodeRelation is the quoted name (one part, or schema.name with
// KeepSchemas) of a seed, model, snapshot or source by unique_id.
func (im *importer) nodeRelation(id string) (string, bool) {
	if n, ok := im.m.Nodes[id]; ok && n != nil {
		return im.quoted(n.Schema, n.relationName()), true
	}
	if s, ok := im.m.Sources[id]; ok && s != nil {
		return im.quoted(s.Schema, orDefault(s.Identifier, s.Name)), true
	}
	return "", false
}

var (
	refRE    = regexp.MustCompile(`\bref\(\s*(['"])([^'"]+)['"]\s*(?:,\s*(['"])([^'"]+)['"]\s*)?(?:,\s*(?:v|version)\s*=\s*['"]?([^'")\s]+)['"]?\s*)?\)`)
	sourceRE = regexp.MustCompile(`\bsource\(\s*['"]([^'"]+)['"]\s*,\s*['"]([^'"]+)['"]\s*\)`)
)

// resolveRef turns "ref('orders')", "ref('pkg', 'orders')",
// "ref('orders', v=2)" or "source('raw', 'events')" (possibly inside
// "{{ get_where_subquery(...) }}") into a quoted relation name.
func (im *importer) resolveRef(expr string) (string, error) {
	if m := sourceRE.FindStringSubmatch(expr); m != nil {
		// unique_id is source.<package>.<source_name>.<table name>.
		for id, s := range im.m.Sources {
			if s != nil && strings.HasSuffix(id, "."+m[1]+"."+m[2]) {
				return im.quoted(s.Schema, orDefault(s.Identifier, s.Name)), nil
			}
		}
		return "", fmt.Errorf("source(%q, %q) is not in the manifest", m[1], m[2])
	}
	m := refRE.FindStringSubmatch(expr)
	if m == nil {
		return "", fmt.Errorf("%q is not a ref() or source()", expr)
	}
	pkg, name, version := "", m[2], m[5]
	if m[4] != "" {
		pkg, name = m[2], m[4]
	}
	var found []*node
	for _, id := range im.ids {
		n := im.m.Nodes[id]
		switch n.ResourceType {
		case "model", "seed", "snapshot":
		default:
			continue
		}
		if n.Name != name || pkg != "" && n.PackageName != pkg || version != "" && n.version() != version {
			continue
		}
		found = append(found, n)
	}
	switch {
	case len(found) == 1:
		return im.quoted(found[0].Schema, found[0].relationName()), nil
	case len(found) == 0:
		return "", fmt.Errorf("%s matches no model, seed or snapshot", strings.TrimSpace(m[0]))
	}
	// Several versions and none asked for: dbt resolves to the latest.
	best, bestV := found[0], -1.0
	for _, n := range found {
		v, err := strconv.ParseFloat(n.version(), 64)
		if err != nil {
			return "", fmt.Errorf("%s is ambiguous", strings.TrimSpace(m[0]))
		}
		if v > bestV {
			best, bestV = n, v
		}
	}
	return im.quoted(best.Schema, best.relationName()), nil
}
