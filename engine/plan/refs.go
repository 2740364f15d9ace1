package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dvtrun/dvtrun/engine"
)

// templatesOf returns the templates of s's SQL and incremental filter (nil
// when one does not parse: Problems reports it).
func templatesOf(s Step) []template {
	ts, _ := parseTemplates(s.SQL)
	fs, _ := parseTemplates(s.IncrementalFilter)
	return append(ts, fs...)
}

// templateProblems lists what is wrong with the templates of s on its own:
// one that does not parse, a secret the step does not declare or one in
// its incremental filter, {{ this }} in a step that builds no relation.
func templateProblems(s Step) (out []string, usesSecret bool) {
	declared := map[string]bool{}
	for _, r := range s.Secrets {
		declared[r.Name] = true
	}
	for _, f := range []struct{ name, text string }{{"SQL", s.SQL}, {"incrementalFilter", s.IncrementalFilter}} {
		ts, err := parseTemplates(f.text)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", f.name, err))
			continue
		}
		for _, t := range ts {
			switch {
			case t.name == "secret" && f.name != "SQL":
				out = append(out, fmt.Sprintf("%s: %s: a secret can only be used in the step's SQL (it is bound as a parameter)", f.name, t.text))
			case t.name == "secret":
				usesSecret = true
				if n := t.args[0].text; !declared[n] {
					out = append(out, fmt.Sprintf("the SQL uses secret %s, which the step does not declare in secrets", n))
					declared[n] = true // once per name
				}
			case t.name == "this" && s.Kind != KindSeed && s.Kind != KindModel:
				out = append(out, fmt.Sprintf("%s: {{ this }} is the relation a model builds; a %s step builds none", f.name, s.Kind))
			}
		}
	}
	return out, usesSecret
}

// refProblems lists, for Validate, each ref naming no seed or model of p,
// each source p does not declare, each ref to a step the step does not
// depend on (Parse adds those; a plan built in code must), and what is
// wrong with the sources.
func (p *Plan) refProblems() []string {
	var out []string
	seen := map[string]bool{}
	for _, src := range p.Sources {
		switch {
		case engine.HasControl(src.Name + src.Database + src.Schema):
			out = append(out, fmt.Sprintf("source %s: a name contains a control character", engine.QuoteText(src.Name)))
		case seen[src.Name]:
			out = append(out, fmt.Sprintf("source %s is declared twice", engine.QuoteText(src.Name)))
		}
		seen[src.Name] = true
		for _, t := range src.Tables {
			if engine.HasControl(t) || t == "" {
				out = append(out, fmt.Sprintf("source %s: table %s is not a name", engine.QuoteText(src.Name), engine.QuoteText(t)))
			}
		}
	}
	r := NewRenderer(p, Context{})
	for _, s := range p.Steps {
		for _, t := range templatesOf(s) {
			if t.name != "ref" && t.name != "source" {
				continue
			}
			if _, err := r.value(s, t); err != nil {
				out = append(out, fmt.Sprintf("step %s: %s: %v", engine.ShowText(s.ID), t.text, err))
				continue
			}
			if t.name == "ref" {
				dep := r.relations[strings.ToLower(t.args[0].text)]
				if dep.ID != s.ID && !slices.Contains(s.DependsOn, dep.ID) {
					out = append(out, fmt.Sprintf("step %s: %s reads step %s, which it does not depend on", engine.ShowText(s.ID), t.text, engine.ShowText(dep.ID)))
				}
			}
		}
	}
	return out
}

// InferDependsOn adds to each step's DependsOn the seeds and models its
// {{ ref(…) }} name, after the ones it lists (dbt infers dependencies the
// same way). Parse calls it; a ref naming the step itself is added too, for
// Validate to report (a cycle), and an unknown ref is left for Validate.
func (p *Plan) InferDependsOn() {
	r := NewRenderer(p, Context{})
	for i, s := range p.Steps {
		for _, t := range templatesOf(s) {
			if t.name != "ref" {
				continue
			}
			if dep, ok := r.relations[strings.ToLower(t.args[0].text)]; ok && !slices.Contains(s.DependsOn, dep.ID) {
				s.DependsOn = append(s.DependsOn, dep.ID)
			}
		}
		p.Steps[i] = s
	}
}
