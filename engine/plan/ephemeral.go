package plan

import (
	"regexp"
	"slices"
	"strings"
)

// InlineEphemeral returns the plan as it executes: ephemeral models are not
// steps of it. Each model or test that reads an ephemeral model gets the
// ephemeral's SQL as a CTE named after its relation, in front of its own
// SQL (merged into its WITH clause when it has one), as dbt inlines them
// (dbt names the CTE __dbt__cte__<name> and rewrites the ref; a dvtrun plan
// names relations in plain SQL, so the CTE takes the relation's own name).
// An ephemeral model reading another is inlined with it, innermost first.
//
// A step "reads" an ephemeral model when it depends on it and its SQL (or
// the SQL of a CTE inlined into it) names the relation as a whole word, in
// any case: SQL imported from dbt, which already carries dbt's own
// __dbt__cte__ CTEs, gets nothing twice. Dependencies on an ephemeral model
// become dependencies on what the ephemeral depends on, and its declared
// secrets are added to the reader's. The plan must be valid (Validate);
// the receiver is not modified.
func (p *Plan) InlineEphemeral() *Plan {
	byID := make(map[string]Step, len(p.Steps))
	has := false
	for _, s := range p.Steps {
		byID[s.ID] = s
		has = has || isEphemeral(s)
	}
	out := *p
	if !has {
		return &out
	}
	out.Steps = nil
	for _, s := range p.Steps {
		if isEphemeral(s) {
			continue
		}
		s.DependsOn = expandEphemeralDeps(s.DependsOn, byID, map[string]bool{})
		if len(s.DependsOn) == 0 {
			s.DependsOn = nil
		}
		var chain []Step // ephemeral ancestors, dependencies first
		seen := map[string]bool{}
		var visit func(ids []string)
		visit = func(ids []string) {
			for _, d := range ids {
				e, ok := byID[d]
				if !ok || !isEphemeral(e) || seen[d] {
					continue
				}
				seen[d] = true
				visit(e.DependsOn)
				chain = append(chain, e)
			}
		}
		visit(byID[s.ID].DependsOn)
		// Keep the CTEs that are read: walk from the reader inwards (a CTE
		// comes after everything it depends on in chain).
		read := []string{s.SQL}
		var ctes []Step
		for i := len(chain) - 1; i >= 0; i-- {
			e := chain[i]
			if !namesRelation(read, e.Relation()) {
				continue
			}
			read = append(read, e.SQL)
			ctes = append(ctes, e)
		}
		if len(ctes) > 0 {
			slices.Reverse(ctes)
			s.SQL = withCTEs(s.SQL, ctes)
			for _, e := range ctes {
				for _, ref := range e.Secrets {
					if !slices.Contains(s.Secrets, ref) {
						s.Secrets = append(s.Secrets, ref)
					}
				}
			}
		}
		out.Steps = append(out.Steps, s)
	}
	return &out
}

// expandEphemeralDeps replaces ephemeral steps in deps by their own
// dependencies, recursively, keeping the first occurrence of each id.
func expandEphemeralDeps(deps []string, byID map[string]Step, seen map[string]bool) []string {
	var out []string
	for _, d := range deps {
		if seen[d] {
			continue
		}
		seen[d] = true
		if e, ok := byID[d]; ok && isEphemeral(e) {
			out = append(out, expandEphemeralDeps(e.DependsOn, byID, seen)...)
			continue
		}
		out = append(out, d)
	}
	return out
}

// namesRelation reports whether any of texts names rel as a whole word
// (quoted or not, any case).
func namesRelation(texts []string, rel string) bool {
	re := regexp.MustCompile(`(?i)(?:^|[^\w$])` + regexp.QuoteMeta(rel) + `(?:$|[^\w$])`)
	for _, t := range texts {
		if re.MatchString(t) {
			return true
		}
	}
	return false
}

// simpleNameRE is a name every warehouse resolves unquoted.
var simpleNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// cteName is how a CTE is named so that the reader's reference resolves to
// it: unquoted when the name is simple (an unquoted reference is
// upper-cased by Snowflake, case-folded by SQLite, and so is an unquoted
// CTE name), quoted otherwise.
func cteName(rel string) string {
	if simpleNameRE.MatchString(rel) {
		return rel
	}
	return `"` + strings.ReplaceAll(rel, `"`, `""`) + `"`
}

// withCTEs puts the CTEs in front of sql, inside its WITH clause if it
// starts with one (after blanks and comments).
func withCTEs(sql string, ctes []Step) string {
	var b strings.Builder
	for i, e := range ctes {
		if i > 0 {
			b.WriteString(",\n")
		}
		// The newline before ')' keeps a trailing -- comment from
		// swallowing it.
		b.WriteString(cteName(e.Relation()) + " AS (\n" + trimStatement(e.SQL) + "\n)")
	}
	defs := b.String()
	at, words := leadingKeywords(sql, 2)
	if len(words) > 0 && words[0].word == "WITH" {
		cut := words[0].end
		if len(words) > 1 && words[1].word == "RECURSIVE" {
			cut = words[1].end
		}
		return sql[:cut] + "\n" + defs + ",\n" + strings.TrimLeft(sql[cut:], " \t\r\n")
	}
	return sql[:at] + "WITH " + defs + "\n" + sql[at:]
}

// trimStatement drops blanks and trailing semicolons.
func trimStatement(sql string) string {
	return strings.TrimRight(strings.TrimSpace(sql), "; \t\r\n")
}

type keyword struct {
	word string // upper-cased
	end  int    // index after it
}

// leadingKeywords returns the index of the first token of sql after blanks
// and comments, and up to n upper-cased words from there.
func leadingKeywords(sql string, n int) (int, []keyword) {
	first := -1
	var words []keyword
	for i := 0; i < len(sql) && len(words) < n; {
		switch c := sql[i]; {
		case strings.HasPrefix(sql[i:], "--"):
			if k := strings.IndexByte(sql[i:], '\n'); k >= 0 {
				i += k + 1
			} else {
				i = len(sql)
			}
		case strings.HasPrefix(sql[i:], "/*"):
			if k := strings.Index(sql[i+2:], "*/"); k >= 0 {
				i += k + 4
			} else {
				i = len(sql)
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			if first < 0 {
				first = i
			}
			j := i
			for j < len(sql) && (sql[j] == '_' || sql[j] >= 'a' && sql[j] <= 'z' || sql[j] >= 'A' && sql[j] <= 'Z' || sql[j] >= '0' && sql[j] <= '9') {
				j++
			}
			words = append(words, keyword{word: strings.ToUpper(sql[i:j]), end: j})
			i = j
		default:
			if first < 0 {
				first = i
			}
			return first, words
		}
	}
	if first < 0 {
		first = len(sql)
	}
	return first, words
}
