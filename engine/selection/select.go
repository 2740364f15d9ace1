package selection

import (
	"path"
	"slices"
	"strings"

	"github.com/dvtrun/dvtrun/engine/plan"
)

// Select evaluates spec on the plan, as dbt does: each selector's method
// matches steps, its graph operators add relatives, tests are added by
// indirect selection; then unions, intersections and the exclusion
// combine the sets. The plan must be valid.
func Select(p *plan.Plan, spec Spec) (Result, error) {
	mode, err := ParseMode(string(spec.Indirect))
	if err != nil {
		return Result{}, err
	}
	inc, err := Parse(spec.Select...)
	if err != nil {
		return Result{}, err
	}
	exc, err := Parse(spec.Exclude...)
	if err != nil {
		return Result{}, err
	}
	g := newGraph(p, mode)
	var res Result
	var incD, incI set
	if len(inc) == 0 {
		incD = g.all()
		incI = set{}
	} else {
		incD, incI = g.union(inc, &res.Unmatched)
	}
	excD, excI := g.union(exc, nil)
	direct := incD.minus(excD)
	indirect := incD.or(incI).minus(excD.or(excI))
	direct = g.incorporate(direct, indirect)

	ids := make([]string, 0, len(direct))
	for i := range g.steps {
		if direct[i] && Executes(g.steps[i]) {
			ids = append(ids, g.steps[i].ID)
		}
	}
	if len(ids) == 0 {
		return res, nil
	}
	sub, err := p.Subset(ids)
	if err != nil {
		return Result{}, err
	}
	for _, s := range sub.Order() {
		res.Steps = append(res.Steps, s.ID)
	}
	return res, nil
}

// set is a set of step positions.
type set map[int]bool

func (s set) or(t set) set {
	out := make(set, len(s)+len(t))
	for i := range s {
		out[i] = true
	}
	for i := range t {
		out[i] = true
	}
	return out
}

func (s set) and(t set) set {
	out := set{}
	for i := range s {
		if t[i] {
			out[i] = true
		}
	}
	return out
}

func (s set) minus(t set) set {
	out := set{}
	for i := range s {
		if !t[i] {
			out[i] = true
		}
	}
	return out
}

type graph struct {
	p                 *plan.Plan
	mode              Mode
	steps             []plan.Step
	parents, children [][]int
}

func newGraph(p *plan.Plan, mode Mode) *graph {
	g := &graph{p: p, mode: mode, steps: p.Steps}
	pos := make(map[string]int, len(p.Steps))
	for i, s := range p.Steps {
		pos[s.ID] = i
	}
	g.parents = make([][]int, len(p.Steps))
	g.children = make([][]int, len(p.Steps))
	for i, s := range p.Steps {
		for _, d := range s.DependsOn {
			if j, ok := pos[d]; ok {
				g.parents[i] = append(g.parents[i], j)
				g.children[j] = append(g.children[j], i)
			}
		}
	}
	return g
}

func (g *graph) all() set {
	out := make(set, len(g.steps))
	for i := range g.steps {
		out[i] = true
	}
	return out
}

// union evaluates a union of intersections, returning dbt's (direct,
// indirect) pair. Selectors of the union that match nothing are appended
// to unmatched when it is not nil.
func (g *graph) union(e Expr, unmatched *[]string) (set, set) {
	direct, indirect := set{}, set{}
	for _, inter := range e {
		d, i := g.intersection(inter)
		if len(d) == 0 && unmatched != nil {
			raws := make([]string, len(inter))
			for k, s := range inter {
				raws[k] = s.Raw
			}
			*unmatched = append(*unmatched, strings.Join(raws, ","))
		}
		direct = direct.or(d)
		indirect = indirect.or(d.or(i))
	}
	return g.incorporate(direct, indirect), indirect
}

func (g *graph) intersection(inter []Selector) (set, set) {
	var direct, indirect set
	for k, s := range inter {
		d, i := g.criterion(s)
		if k == 0 {
			direct, indirect = d, d.or(i)
			continue
		}
		direct = direct.and(d)
		indirect = indirect.and(d.or(i))
	}
	return g.incorporate(direct, indirect), indirect
}

// criterion is one selector: the steps its method matches, their
// relatives by its graph operators, and its tests by indirect selection.
func (g *graph) criterion(s Selector) (set, set) {
	selected := set{}
	for i, st := range g.steps {
		if g.match(s, st) {
			selected[i] = true
		}
	}
	collected := selected
	if s.ChildrensParents {
		desc := g.walk(collected, g.children, -1).or(collected)
		selected = selected.or(desc).or(g.walk(desc, g.parents, -1))
	}
	if s.Parents {
		selected = selected.or(g.walk(collected, g.parents, s.ParentsDepth))
	}
	if s.Children {
		selected = selected.or(g.walk(collected, g.children, s.ChildrenDepth))
	}
	if g.mode == Empty {
		return selected, set{}
	}
	return g.expand(selected)
}

// walk returns the steps reachable from from along edges, at most depth
// edges away (-1: any distance), without from itself unless reached again.
func (g *graph) walk(from set, edges [][]int, depth int) set {
	out := set{}
	frontier := make([]int, 0, len(from))
	for i := range from {
		frontier = append(frontier, i)
	}
	for d := 0; len(frontier) > 0 && (depth < 0 || d < depth); d++ {
		var next []int
		for _, i := range frontier {
			for _, j := range edges[i] {
				if !out[j] {
					out[j] = true
					next = append(next, j)
				}
			}
		}
		frontier = next
	}
	return out
}

// expand is dbt's expand_selection: the tests that are children of the
// selection join it directly (eager; cautious and buildable when their
// parents qualify) or are kept aside as indirect.
func (g *graph) expand(selected set) (set, set) {
	direct, indirect := selected.or(nil), set{}
	var buildable set
	if g.mode == Buildable {
		buildable = selected.or(g.walk(selected, g.parents, -1))
	}
	for i := range selected {
		for _, t := range g.children[i] {
			if g.steps[t].Kind != plan.KindTest {
				continue
			}
			switch {
			case g.mode == Eager, g.parentsIn(t, selected):
				direct[t] = true
			case g.mode == Buildable && g.parentsIn(t, buildable):
				direct[t] = true
			default:
				indirect[t] = true
			}
		}
	}
	return direct, indirect
}

// incorporate is dbt's incorporate_indirect_nodes: after a set operation,
// tests kept aside join when their parents now qualify.
func (g *graph) incorporate(direct, indirect set) set {
	if g.mode != Cautious && g.mode != Buildable {
		return direct
	}
	out := direct.or(nil)
	ok := direct
	if g.mode == Buildable {
		ok = direct.or(g.walk(direct, g.parents, -1))
	}
	for t := range indirect {
		if g.parentsIn(t, ok) {
			out[t] = true
		}
	}
	return out
}

func (g *graph) parentsIn(i int, s set) bool {
	for _, j := range g.parents[i] {
		if !s[j] {
			return false
		}
	}
	return true
}

// match says whether the selector's method selects the step.
func (g *graph) match(s Selector, st plan.Step) bool {
	v := s.Value
	switch s.Method {
	case MethodFQN:
		// dvtrun's addition: a step id, wildcards allowed (model.stg_*).
		if st.ID == v || (strings.Contains(v, ".") && fnmatch(st.ID, v)) {
			return true
		}
		return fqnMatch(FQN(g.p, st), v)
	case MethodPackage:
		return fnmatch(FQN(g.p, st)[0], v)
	case MethodTag:
		return slices.ContainsFunc(st.Tags, func(t string) bool { return fnmatch(t, v) })
	case MethodResourceType:
		return st.Kind == v
	case MethodPath:
		return slices.ContainsFunc(files(st), func(f string) bool { return pathMatch(f, v) })
	case MethodFile:
		return slices.ContainsFunc(files(st), func(f string) bool {
			base := path.Base(f)
			return fnmatch(base, v) || fnmatch(strings.TrimSuffix(base, path.Ext(base)), v)
		})
	case MethodConfig:
		switch s.Args[0] {
		case "materialized":
			return materialized(st) == v
		case "tags":
			return slices.Contains(st.Tags, v)
		case "severity":
			if st.Kind != plan.KindTest {
				return false
			}
			sev := st.Severity
			if sev == "" {
				sev = plan.SeverityError
			}
			return strings.EqualFold(sev, v)
		}
	}
	return false
}

// materializedEphemeral is engine's name for a model that is never built
// (inlined as a CTE into its readers), spelled out until engine has the
// constant.
const materializedEphemeral = "ephemeral"

// Executes says whether the step runs as a step of its own: an ephemeral
// model does not (it runs inside the steps that read it, which the
// runner's plan keeps), so it is never in a selection, as dbt never runs
// one — selecting it still selects its relatives through + and @.
func Executes(st plan.Step) bool {
	return st.Kind != plan.KindModel || st.Materialized != materializedEphemeral
}

// FQN is the step's fully qualified name, what fqn selectors match:
// PlanStep.FQN (from a dbt manifest) or [planId, name].
func FQN(p *plan.Plan, st plan.Step) []string {
	if len(st.FQN) > 0 {
		return st.FQN
	}
	return []string{p.PlanID, Name(st)}
}

// Name is a step's short name, dbt's node name: the part of its id after
// the first dot (orders for model.orders).
func Name(st plan.Step) string {
	if _, after, ok := strings.Cut(st.ID, "."); ok {
		return after
	}
	return st.ID
}

// fqnMatch is dbt's is_selected_node: the fqn's last part equals the
// selector, or the selector's dot-separated parts (wildcards allowed, a
// lone * matching the rest) are a prefix of the fqn's.
func fqnMatch(fqn []string, sel string) bool {
	if fqn[len(fqn)-1] == sel {
		return true
	}
	var flat []string
	for _, seg := range fqn {
		flat = append(flat, strings.Split(seg, ".")...)
	}
	parts := strings.Split(sel, ".")
	if len(flat) < len(parts) {
		return false
	}
	for i, part := range parts {
		if part == "*" {
			return true
		}
		if flat[i] != part && !fnmatch(flat[i], part) {
			return false
		}
	}
	return true
}

// materialized is dbt's config.materialized of a step: a model's
// materialization (view by default), seed for seeds, test for tests.
func materialized(st plan.Step) string {
	switch st.Kind {
	case plan.KindModel:
		if st.Materialized == "" {
			return plan.MaterializedView
		}
		return st.Materialized
	case plan.KindSeed, plan.KindTest:
		return st.Kind
	}
	return st.Materialized
}

// files are the paths path: and file: look at: Path (relative to the plan
// file) and OriginalFilePath (relative to the dbt project).
func files(st plan.Step) []string {
	var out []string
	for _, f := range []string{st.Path, st.OriginalFilePath} {
		if f != "" {
			out = append(out, cleanPath(f))
		}
	}
	return out
}

func cleanPath(p string) string {
	return path.Clean(strings.ReplaceAll(p, `\`, "/"))
}

// pathMatch is dbt's path method: the pattern names the file or one of the
// directories it is in (wildcards within a path component).
func pathMatch(file, pattern string) bool {
	pattern = globPattern(cleanPath(pattern))
	for p := file; ; p = path.Dir(p) {
		if ok, _ := path.Match(pattern, p); ok {
			return true
		}
		if p == "." || p == "/" || path.Dir(p) == p {
			return false
		}
	}
}

// fnmatch is Python's fnmatch on one name: *, ?, [abc], [!abc].
func fnmatch(name, pattern string) bool {
	ok, _ := path.Match(globPattern(pattern), name)
	return ok
}

// globPattern turns fnmatch's [!…] negation into Go's [^…].
func globPattern(p string) string {
	return strings.ReplaceAll(p, "[!", "[^")
}
