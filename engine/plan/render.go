package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// Dialect is what the renderer needs of the warehouse a run executes in:
// how it names relations and writes literals. The SQLite, Postgres and Snowflake
// warehouses implement it; a warehouse that does not gets plain one-part
// names (PlainDialect).
type Dialect interface {
	// Relation is the name SQL uses for a relation the plan builds, in the
	// warehouse's own database and schema, quoted as the warehouse needs:
	// Snowflake DB.SCHEMA.NAME, Postgres schema.name, SQLite name.
	Relation(name string) string
	// Source is the name of a source's table; database "" is the
	// warehouse's own.
	Source(database, schema, table string) string
	// StringLiteral is v as a string literal; BoolLiteral a boolean one.
	StringLiteral(v string) string
	BoolLiteral(v bool) string
}

// PlainDialect names relations by their one-part name, as written, and
// writes standard SQL literals: what `plan validate` renders with, and the
// renderer's default.
type PlainDialect struct{}

// Relation is name itself.
func (PlainDialect) Relation(name string) string { return name }

// Source is the table's one-part name: without a warehouse there is no
// schema to put it in.
func (PlainDialect) Source(_, _, table string) string { return table }

// StringLiteral quotes v, doubling its single quotes (standard SQL).
func (PlainDialect) StringLiteral(v string) string { return QuoteString(v) }

// BoolLiteral is TRUE or FALSE.
func (PlainDialect) BoolLiteral(v bool) string {
	if v {
		return "TRUE"
	}
	return "FALSE"
}

// QuoteString is v as a standard SQL string literal: single-quoted, each
// single quote doubled. Dialects whose literals also read backslash
// escapes (Snowflake) double those too.
func QuoteString(v string) string { return "'" + strings.ReplaceAll(v, "'", "''") + "'" }

// Context is what a run's steps are rendered with: RunQueued's vars and
// data interval (so that resume and retry render what the first attempt
// rendered), the warehouse's dialect and the secrets.
type Context struct {
	Dialect  Dialect // nil: PlainDialect
	Vars     map[string]any
	Interval *engine.DataInterval
	// AnyInterval stands for an interval not known yet (plan validate):
	// the interval names render as a placeholder literal instead of
	// failing when Interval is nil.
	AnyInterval bool
	// Secrets resolves {{ secret('NAME') }} at step time; nil renders each
	// as its placeholder with no value (checks that bind nothing).
	Secrets SecretLookup
}

// Renderer renders the templates of a plan's SQL — {{ this }}, ref,
// source, var, secret and the data-interval names — the one place they
// are rendered. Names are quoted by the dialect, var and interval values
// become literals, secrets become ? placeholders whose values are bound:
// no value is ever spliced into SQL unquoted.
type Renderer struct {
	c         Context
	relations map[string]Step // seeds and models (ephemeral ones included) by lower-cased relation
	sources   map[string]SourceTables
}

// NewRenderer renders p's steps with c. p is the plan as written (ephemeral
// models included: a ref to one names its CTE).
func NewRenderer(p *Plan, c Context) *Renderer {
	if c.Dialect == nil {
		c.Dialect = PlainDialect{}
	}
	r := &Renderer{c: c, relations: map[string]Step{}, sources: map[string]SourceTables{}}
	for _, s := range p.Steps {
		if s.Kind == KindSeed || s.Kind == KindModel {
			r.relations[strings.ToLower(s.Relation())] = s
		}
	}
	for _, src := range p.Sources {
		r.sources[src.Name] = src
	}
	return r
}

// SQL renders s's SQL: the text to execute and the secrets to bind to its
// ? placeholders, in order. Errors name the step: PLAN_INVALID (a missing
// var, no data interval, an unknown ref) or SECRET_NOT_FOUND.
func (r *Renderer) SQL(s Step) (string, []any, error) {
	var params []any
	out, err := r.render(s, s.SQL, func(t template) (string, bool, error) {
		if t.name != "secret" {
			return "", false, nil
		}
		name := t.args[0].text
		if !slices.Contains(s.Secrets, SecretRef{Name: name}) {
			return "", true, engine.Errorf(engine.CodeSecretNotFound, "step %s: the SQL references secret %s, which the step does not declare in secrets", engine.ShowText(s.ID), name)
		}
		if r.c.Secrets == nil {
			params = append(params, nil)
			return "?", true, nil
		}
		v, ok := r.c.Secrets(name)
		if !ok {
			return "", true, engine.Errorf(engine.CodeSecretNotFound, "step %s: secret %s is not set (set DVT_SECRET_%s or add it to the secrets file)", engine.ShowText(s.ID), name, name)
		}
		params = append(params, v)
		return "?", true, nil
	})
	if err != nil {
		return "", nil, err
	}
	return out, params, nil
}

// Filter renders s's incremental filter but for {{ this }}, which names the
// table being merged into and is the warehouse's to render (RenderThis).
func (r *Renderer) Filter(s Step) (string, error) {
	return r.render(s, s.IncrementalFilter, func(t template) (string, bool, error) {
		if t.name == "this" {
			return t.text, true, nil
		}
		return "", false, nil
	})
}

// render expands text's templates; local handles the ones that depend on
// where the text goes (handled=false: the common rendering).
func (r *Renderer) render(s Step, text string, local func(template) (string, bool, error)) (string, error) {
	return expand(text, func(t template) (string, error) {
		if v, handled, err := local(t); handled || err != nil {
			return v, err
		}
		v, err := r.value(s, t)
		if err != nil {
			var te *templateError
			if errors.As(err, &te) {
				return "", engine.Errorf(engine.CodePlanInvalid, "step %s: %s: %s", engine.ShowText(s.ID), t.text, te.msg)
			}
			return "", err
		}
		return v, nil
	}, "step "+engine.ShowText(s.ID))
}

// expand replaces each template of text by what f makes of it; where
// names the text in an error.
func expand(text string, f func(template) (string, error), where string) (string, error) {
	ts, err := parseTemplates(text)
	if err != nil {
		return "", engine.Errorf(engine.CodePlanInvalid, "%s: %v", where, err)
	}
	if len(ts) == 0 {
		return text, nil
	}
	var b strings.Builder
	last := 0
	for _, t := range ts {
		v, err := f(t)
		if err != nil {
			return "", err
		}
		b.WriteString(text[last:t.start])
		b.WriteString(v)
		last = t.end
	}
	b.WriteString(text[last:])
	return b.String(), nil
}

// didYouMeanRelation is "; did you mean ref('raw_orders')?" for a ref to a
// relation the plan does not build, close to one it does; "" otherwise.
func (r *Renderer) didYouMeanRelation(name string) string {
	names := make([]string, 0, len(r.relations))
	for _, s := range r.relations {
		names = append(names, s.Relation())
	}
	slices.Sort(names) // one answer whatever the map's order
	if s := engine.Suggest(name, names); s != "" {
		return fmt.Sprintf("; did you mean ref('%s')?", s)
	}
	return ""
}

// value renders a template whose value does not depend on where it goes.
func (r *Renderer) value(s Step, t template) (string, error) {
	d := r.c.Dialect
	switch t.name {
	case "this":
		if s.Kind != KindSeed && s.Kind != KindModel {
			return "", templateErrorf("{{ this }} is the relation a model builds; a %s step builds none", s.Kind)
		}
		return d.Relation(s.Relation()), nil
	case "ref":
		dep, ok := r.relations[strings.ToLower(t.args[0].text)]
		if !ok {
			return "", templateErrorf("no seed or model of the plan builds %s%s", engine.QuoteText(t.args[0].text), r.didYouMeanRelation(t.args[0].text))
		}
		if isEphemeral(dep) {
			return cteName(dep.Relation()), nil // inlined as a CTE of that name
		}
		return d.Relation(dep.Relation()), nil
	case "source":
		src, ok := r.sources[t.args[0].text]
		if !ok {
			return "", templateErrorf("the plan declares no source %s (sources: [{name: …, schema: …, tables: [...]}])", engine.QuoteText(t.args[0].text))
		}
		table := t.args[1].text
		if !slices.Contains(src.Tables, table) {
			return "", templateErrorf("source %s declares no table %s", engine.QuoteText(src.Name), engine.QuoteText(table))
		}
		schema := src.Schema
		if schema == "" {
			schema = src.Name
		}
		return d.Source(src.Database, schema, table), nil
	case "var":
		name := t.args[0].text
		v, ok := r.c.Vars[name]
		if !ok {
			if len(t.args) < 2 {
				return "", templateErrorf("var %s is not set (pass it with --vars) and has no default", engine.QuoteText(name))
			}
			return r.literal(t.args[1]), nil
		}
		lit, err := SQLLiteral(d, v)
		if err != nil {
			return "", templateErrorf("var %s: %v", engine.QuoteText(name), err)
		}
		return lit, nil
	case "secret":
		return "", templateErrorf("a secret cannot be used here (it is bound as a parameter of the step's SQL)")
	}
	return r.interval(t.name)
}

// literal renders a template's literal argument (a var's default).
func (r *Renderer) literal(a literal) string {
	switch a.kind {
	case 's':
		return r.c.Dialect.StringLiteral(a.text)
	case 'b':
		return r.c.Dialect.BoolLiteral(a.text == "true")
	case '0':
		return "NULL"
	}
	return a.text
}

// SQLLiteral is v — a var's value, as YAML or JSON gives it — as a SQL
// literal of dialect d: strings quoted, numbers as numbers, booleans as d
// writes them, nil as NULL. Lists and objects have no literal: an error.
func SQLLiteral(d Dialect, v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "NULL", nil
	case string:
		return d.StringLiteral(x), nil
	case bool:
		return d.BoolLiteral(x), nil
	case int:
		return strconv.Itoa(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case uint64:
		return strconv.FormatUint(x, 10), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return "", fmt.Errorf("%v is not a number SQL can hold", x)
		}
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	case json.Number:
		if _, err := strconv.ParseFloat(string(x), 64); err != nil {
			return "", fmt.Errorf("%s is not a number", x)
		}
		return string(x), nil
	case []any:
		return "", fmt.Errorf("is a list; only strings, numbers, booleans and null are rendered")
	case map[string]any:
		return "", fmt.Errorf("is an object; only strings, numbers, booleans and null are rendered")
	}
	return "", fmt.Errorf("has type %T; only strings, numbers, booleans and null are rendered", v)
}

// interval renders a data-interval name as an ISO-8601 string literal: in
// the interval's zone, or in UTC for the _utc names.
func (r *Renderer) interval(name string) (string, error) {
	iv := r.c.Interval
	if iv == nil && r.c.AnyInterval {
		return r.c.Dialect.StringLiteral(name), nil
	}
	if iv == nil {
		return "", templateErrorf("this run has no data interval (scheduled and backfilled runs have one)")
	}
	base, utc := strings.CutSuffix(name, "_utc")
	raw := iv.Start
	if base == nameIntervalEnd {
		raw = iv.End
	}
	t, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		return "", templateErrorf("the run's data interval %s is not an RFC 3339 time", engine.QuoteText(raw))
	}
	loc := time.UTC
	if iv.Timezone != "" && !utc {
		if loc, err = time.LoadLocation(iv.Timezone); err != nil {
			return "", templateErrorf("the run's data interval has an unknown time zone %s", engine.QuoteText(iv.Timezone))
		}
	}
	return r.c.Dialect.StringLiteral(t.In(loc).Format(time.RFC3339)), nil
}

// RenderThis replaces {{ this }} in an incremental filter with the quoted
// name of the existing table, which the warehouse supplies in its own
// quoting. The runner renders everything else first (Renderer.Filter); any
// other template left is an error.
func RenderThis(filter, quotedRelation string) (string, error) {
	return expand(filter, func(t template) (string, error) {
		if t.name != "this" {
			return "", engine.Errorf(engine.CodePlanInvalid, "incrementalFilter: %s was not rendered before the warehouse saw it", t.text)
		}
		return quotedRelation, nil
	}, "incrementalFilter")
}

// CheckContext renders every step of p with c and reports, in one
// PLAN_INVALID, each template that does not render: a var that is not set
// and has no default, a var whose value has no literal, an interval name
// in a run without an interval. `plan validate` and a run call it before
// anything is written; secrets are CheckSecrets' (c.Secrets is not used).
// p is the plan as the run executes it (ephemeral models inlined, its
// selection applied); full is the plan as written, for refs.
func CheckContext(full, p *Plan, c Context) error {
	c.Secrets = nil
	r := NewRenderer(full, c)
	var problems []string
	for _, s := range p.Steps {
		if s.Kind == KindSeed {
			continue
		}
		if _, _, err := r.SQL(s); err != nil {
			problems = append(problems, messageOf(err))
		}
		if _, err := r.Filter(s); err != nil {
			problems = append(problems, messageOf(err))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return &engine.Error{Code: engine.CodePlanInvalid, Msg: fmt.Sprintf("plan %s: %s", engine.QuoteText(engine.OrUnknown(p.PlanID)), engine.JoinLimited(problems, "; ", maxListed)), Meta: map[string]any{"problems": problems}}
}

// messageOf is err's sentence without its code, to list it among others.
func messageOf(err error) string {
	var e *engine.Error
	if errors.As(err, &e) {
		return e.Msg
	}
	return err.Error()
}
