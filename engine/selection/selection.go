// Package selection picks the steps of a plan a run executes, with dbt's
// node selection syntax (docs.getdbt.com/reference/node-selection):
//
//	spec := selection.Spec{Select: []string{"+customers", "tag:nightly"}, Exclude: []string{"stg_orders"}}
//	res, err := selection.Select(plan, spec) // res.Steps: ids in execution order
//
// An expression is a space-separated union of comma-separated
// intersections of selectors. A selector is
//
//	[@][N+][method[.arg]:]value[+N]
//
// with the methods fqn (the default), tag, path, file, resource_type,
// config.materialized (also config.tags, config.severity) and package. A
// value without a method is a path if it contains a slash, a file if it
// ends in .sql, .csv or .py, and otherwise an fqn — or, as dvtrun adds, a
// step id (model.orders). `+` before the value adds ancestors (N: at most N
// edges up), after it descendants; `@` adds the descendants and every
// ancestor of those. `*`, `?` and [a-z] are wildcards in names, fqn parts,
// tags, paths and ids.
//
// How a step maps to dbt's names: a step's name is the part of its id
// after the first dot (orders for model.orders, the test's name for a
// test); its fqn is PlanStep.FQN (the dbt importer copies the manifest's,
// e.g. jaffle_shop.staging.stg_orders) or else [planId, name]. An fqn
// selector matches a step whose name equals it, or whose fqn starts with
// its dot-separated parts (jaffle_shop.staging.* or just jaffle_shop).
// path: matches a step's Path (relative to the plan file) or its
// OriginalFilePath (relative to the dbt project), a directory selecting
// everything under it.
//
// Tests follow dbt's indirect selection (Spec.Indirect, eager by default):
// a test is selected when any of its parents is (eager), all of them are
// (cautious), all of them are selected or ancestors of the selection
// (buildable), or never through its parents (empty). Exclusion applies
// the same expansion, so excluding a model excludes its tests.
package selection

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// Mode is dbt's --indirect-selection.
type Mode string

// Indirect selection modes.
const (
	Eager     Mode = "eager"
	Cautious  Mode = "cautious"
	Buildable Mode = "buildable"
	Empty     Mode = "empty"
)

// Spec is a selection request: what --select, --exclude and
// --indirect-selection say. No Select means every step.
type Spec struct {
	Select   []string
	Exclude  []string
	Indirect Mode // "" is Eager
}

// Result is what a Spec selects.
type Result struct {
	Steps []string // in execution order
	// Unmatched lists the selectors that match no step (dbt warns about
	// each: "does not match any enabled nodes").
	Unmatched []string
}

// Selector is one parsed selector, e.g. 2+tag:nightly+1.
type Selector struct {
	Raw    string
	Method string   // fqn, tag, path, file, resource_type, config, package
	Args   []string // config.materialized → [materialized]
	Value  string

	Parents          bool
	ParentsDepth     int // -1: unlimited
	Children         bool
	ChildrenDepth    int // -1: unlimited
	ChildrensParents bool
}

// Expr is a parsed expression: a union of intersections.
type Expr [][]Selector

// Method names.
const (
	MethodFQN          = "fqn"
	MethodTag          = "tag"
	MethodPath         = "path"
	MethodFile         = "file"
	MethodResourceType = "resource_type"
	MethodConfig       = "config"
	MethodPackage      = "package"
)

var methods = []string{MethodFQN, MethodTag, MethodPath, MethodFile, MethodResourceType, MethodConfig, MethodPackage}

// configKeys are the config.<key> arguments dvtrun plans carry.
var configKeys = []string{"materialized", "tags", "severity"}

// resourceTypes are the step kinds resource_type: accepts.
var resourceTypes = []string{plan.KindSeed, plan.KindModel, plan.KindTest, plan.KindSQL}

// selectorRE is dbt's RAW_SELECTOR_PATTERN.
var selectorRE = regexp.MustCompile(`^(@)?(?:(\d*)(\+))?(?:([\w.]+):)?(.*?)(?:(\+)(\d*))?$`)

// Parse reads selection expressions: each is split on spaces into a union,
// each part on commas into an intersection. Several expressions are one
// union, like dbt's `--select a b`.
func Parse(exprs ...string) (Expr, error) {
	var out Expr
	for _, e := range exprs {
		for _, part := range strings.Fields(e) {
			var inter []Selector
			for _, raw := range strings.Split(part, ",") {
				if raw == "" {
					return nil, engine.Errorf(engine.CodeInvalidArgument, "selector %q has an empty part (a comma at its start or end, or two in a row)", part)
				}
				s, err := ParseSelector(raw)
				if err != nil {
					return nil, err
				}
				inter = append(inter, s)
			}
			out = append(out, inter)
		}
	}
	return out, nil
}

// ParseSelector reads one selector (no spaces or commas).
func ParseSelector(raw string) (Selector, error) {
	m := selectorRE.FindStringSubmatch(raw)
	bad := func(format string, args ...any) (Selector, error) {
		return Selector{}, engine.Errorf(engine.CodeInvalidArgument, "selector %q: %s", raw, fmt.Sprintf(format, args...))
	}
	if m == nil {
		return bad("not a selector")
	}
	s := Selector{Raw: raw, Value: m[5], ChildrensParents: m[1] != "", ParentsDepth: -1, ChildrenDepth: -1}
	if s.Value == "" {
		return bad("no value to select")
	}
	s.Parents, s.Children = m[3] != "", m[6] != ""
	for _, d := range []struct {
		text string
		to   *int
	}{{m[2], &s.ParentsDepth}, {m[7], &s.ChildrenDepth}} {
		if d.text == "" {
			continue
		}
		n, err := strconv.Atoi(d.text)
		if err != nil {
			return bad("depth %s is too large", d.text)
		}
		*d.to = n
	}
	if s.Children && s.ChildrensParents {
		return bad(`the "@" prefix and a "+" suffix cannot be combined`)
	}
	method := m[4]
	if method == "" {
		s.Method = defaultMethod(s.Value)
	} else {
		parts := strings.Split(method, ".")
		s.Method, s.Args = parts[0], parts[1:]
		if !slices.Contains(methods, s.Method) {
			return bad("%q is not a selection method (dvtrun supports %s)", s.Method, strings.Join(methods, ", "))
		}
	}
	switch s.Method {
	case MethodConfig:
		if len(s.Args) != 1 || !slices.Contains(configKeys, s.Args[0]) {
			return bad("config needs one of config.%s", strings.Join(configKeys, ", config."))
		}
	case MethodResourceType:
		if !slices.Contains(resourceTypes, s.Value) {
			return bad("resource_type %q is not a step kind (%s)", s.Value, strings.Join(resourceTypes, ", "))
		}
		fallthrough
	default:
		if len(s.Args) > 0 {
			return bad("method %s takes no argument", s.Method)
		}
	}
	if _, err := path.Match(globPattern(s.Value), ""); err != nil {
		return bad("malformed wildcard pattern")
	}
	return s, nil
}

// defaultMethod is dbt's choice for a selector without a method.
func defaultMethod(v string) string {
	switch {
	case strings.ContainsAny(v, `/\`):
		return MethodPath
	case hasAnySuffix(strings.ToLower(v), ".sql", ".csv", ".py"):
		return MethodFile
	}
	return MethodFQN
}

func hasAnySuffix(s string, suffixes ...string) bool {
	for _, x := range suffixes {
		if strings.HasSuffix(s, x) {
			return true
		}
	}
	return false
}

// ParseMode reads --indirect-selection.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "":
		return Eager, nil
	case Eager, Cautious, Buildable, Empty:
		return m, nil
	}
	return "", engine.Errorf(engine.CodeInvalidArgument, "indirect selection %q: want eager, cautious, buildable or empty", s)
}
